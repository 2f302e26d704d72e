#!/usr/bin/env bash
# Sluice against its peers, in one run, on this machine (see BENCHMARKS.md, "Peer comparison").
#
#   tests/bench/run.sh            # full matrix (≤ 15 min once built), rewrites BENCHMARKS.md
#   tests/bench/run.sh --quick    # smoke run (≤ 3 min), report written to the run folder only
#
# Options: --quick, --write (quick mode: rewrite BENCHMARKS.md too), --no-report,
#          --scenarios a,b,c,d,e,f (a subset), --skip-build.
#
# It installs what is missing (Debian: rabbitmq-server, redis-server, redis-tools, python3-venv;
# PyPI: moto[server] into target/bench-venv), builds `sluice` and `sluice-bench` (release),
# starts every server on 127.0.0.1 on free ports (Sluice on its embedded store, Sluice on Redis
# when this build has `--store`, RabbitMQ as a private node, moto, the no-op HTTP server,
# redis-server), runs the scenarios with repetitions alternating between targets, stops
# everything (also on error or Ctrl-C), and rewrites the section of BENCHMARKS.md between
# <!-- peers:start --> and <!-- peers:end -->. Raw records and logs stay in
# target/bench-run/<time>/.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
T0=$(date +%s)

QUICK=0 WRITE=0 REPORT=1 BUILD=1 SCENARIOS=a,b,c,d,e,f
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) QUICK=1 ;;
    --write) WRITE=1 ;;
    --no-report) REPORT=0 ;;
    --skip-build) BUILD=0 ;;
    --scenarios) SCENARIOS=$2; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $QUICK == 0 ]] && WRITE=1
want() { [[ ",$SCENARIOS," == *",$1,"* ]]; }

# The matrix. Full: 3 alternating repetitions of each throughput scenario; quick: 1, shorter.
if [[ $QUICK == 1 ]]; then
  MODE=quick REPS=1 DUR=3 DRAIN=10 C_DUR=4 E_COUNT=1000 E_MOTO=200 F_MSGS=50000 F_RABBIT=0 RB_N=50000
else
  MODE=full REPS=3 DUR=5 DRAIN=30 C_DUR=8 E_COUNT=10000 E_MOTO=1000 F_MSGS=1000000 F_RABBIT=200000 RB_N=100000
fi
COMMON=(--producers 8 --consumers 8 --size 1024)

log() { printf '\n== %s (%ss)\n' "$*" "$(($(date +%s) - T0))"; }

# --- What is missing --------------------------------------------------------------------------
log "checking tools"
need=()
[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || need+=(rabbitmq-server)
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
[[ -x /usr/bin/python3 ]] || need+=(python3)
# Debian's python needs python3-venv (ensurepip) to make a venv; its system pip refuses installs.
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
if [[ ${#need[@]} -gt 0 ]]; then
  echo "installing ${need[*]}"
  SUDO=; [[ $(id -u) == 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}" >/dev/null
fi
VENV=$ROOT/target/bench-venv
MOTO_VERSION=5.2.5
if [[ ! -x $VENV/bin/moto_server ]]; then
  echo "installing moto[server]==$MOTO_VERSION into $VENV"
  rm -rf "$VENV"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "moto[server]==$MOTO_VERSION"
fi

# --- Build --------------------------------------------------------------------------------------
# Two invocations, not one: building both binaries together would unify dependency features and
# rebuild `sluice` differently from `cargo build --release --bin sluice`.
if [[ $BUILD == 1 ]]; then
  log "building (release)"
  cargo build --release --bin sluice
  cargo build --release -p sluice-bench
fi
T_BUILT=$(date +%s)
SLUICE=$ROOT/target/release/sluice
BENCH=$ROOT/target/release/sluice-bench

# --- Run folder, cleanup ----------------------------------------------------------------------
RUN=$ROOT/target/bench-run/$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$RUN/logs"
RES=$RUN/results.jsonl
: >"$RES"
FS=$(df -T "$RUN" | awk 'NR==2 {print $2 " on " $1}')
case $FS in tmpfs*|ramfs*) echo "warning: $RUN is on $FS: fsync costs nothing there" ;; esac

PIDS=()
RABBIT_ENV=
cleanup() {
  set +e
  if [[ -n $RABBIT_ENV ]]; then
    (source "$RABBIT_ENV"
     # With the pid file, `stop` returns once the node's process is gone.
     timeout 60 /usr/lib/rabbitmq/bin/rabbitmqctl -n "$RABBITMQ_NODENAME" stop "$RABBITMQ_PID_FILE" \
       >/dev/null 2>&1
     pid=$(cat "$RABBITMQ_PID_FILE" 2>/dev/null) && kill -9 "$pid" 2>/dev/null
     # The node's own epmd (on ERL_EPMD_PORT): it refuses to die while a node is registered.
     for _ in 1 2 3 4 5; do epmd -kill >/dev/null 2>&1 && break; sleep 1; done)
  fi
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  wait 2>/dev/null
  # The stores are gigabytes after (f); the records and logs stay.
  rm -rf "$RUN"/*/data "$RUN/rabbitmq/mnesia" "$RUN"/redis-*/dump.rdb
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits up to 30 s for a URL in a server's log; prints it.
wait_url() { # log pid pattern
  for _ in $(seq 300); do
    local url
    url=$(grep -o -m1 "$3" "$1" 2>/dev/null | head -1 || true)
    if [[ -n $url ]]; then echo "$url"; return 0; fi
    kill -0 "$2" 2>/dev/null || { echo "process $2 exited: $(tail -3 "$1")" >&2; return 1; }
    sleep 0.1
  done
  echo "timed out waiting for $1" >&2
  return 1
}

SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
start_sluice() { # name [serve args...] -> SL_URL SL_PID
  local name=$1; shift
  mkdir -p "$RUN/$name/data"
  "$SLUICE" serve --listen 127.0.0.1:0 --data-dir "$RUN/$name/data" --jwt-secret "$SECRET" "$@" \
    >"$RUN/$name/stdout" 2>"$RUN/$name/stderr" &
  SL_PID=$!; PIDS+=("$SL_PID")
  SL_URL=$(wait_url "$RUN/$name/stdout" "$SL_PID" 'http://127\.0\.0\.1:[0-9]*')
}
start_redis() { # name -> RD_PORT RD_PID
  mkdir -p "$RUN/$1"
  RD_PORT=$(free_port)
  redis-server --bind 127.0.0.1 --port "$RD_PORT" --save '' --appendonly no --dir "$RUN/$1" \
    >"$RUN/$1/log" 2>&1 &
  RD_PID=$!; PIDS+=("$RD_PID")
  for _ in $(seq 100); do
    [[ $(redis-cli -p "$RD_PORT" ping 2>/dev/null) == PONG ]] && return 0
    sleep 0.1
  done
  echo "redis-server did not start: $(tail -3 "$RUN/$1/log")" >&2; return 1
}
stop_pid() {
  kill "$1" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
}

# Targets: protocol, URL and the server processes whose CPU and memory count.
declare -A KIND URL SPIDS
LABELS=()
add_target() { KIND[$1]=$2; URL[$1]=$3; SPIDS[$1]=$4; LABELS+=("$1"); }
note() { "$BENCH" note --json-out "$RES" --scenario "$1" --target "$2" --status "$3" --detail "${4:-}" "${@:5}"; }

# --- Servers ------------------------------------------------------------------------------------
log "starting servers in $RUN"
TOKEN=$("$SLUICE" token --jwt-secret "$SECRET" --tenant bench --ttl-seconds 7200 \
  --scopes "queues:manage messages:send messages:consume")
export SLUICE_BENCH_TOKEN=$TOKEN

start_sluice sluice-embedded
add_target sluice-embedded sluice "$SL_URL" "$SL_PID"
echo "Sluice (embedded): $SL_URL"

HAS_REDIS_ENGINE=0
if "$SLUICE" serve --help | grep -q -- '--store'; then HAS_REDIS_ENGINE=1; fi
if [[ $HAS_REDIS_ENGINE == 1 ]]; then
  start_redis redis-engine
  start_sluice sluice-redis --store "redis://127.0.0.1:$RD_PORT"
  add_target sluice-redis sluice "$SL_URL" "$SL_PID $RD_PID"
  echo "Sluice (Redis): $SL_URL on redis-server :$RD_PORT"
else
  echo "Sluice (Redis): not available (this build's 'sluice serve' has no --store)"
  for s in a b c d e f; do note "$s" sluice-redis "not available" "this build of sluice has no --store (Redis engine)"; done
fi

start_rabbitmq() {
  local dir=$RUN/rabbitmq
  mkdir -p "$dir"
  RABBIT_PORT=$(free_port)
  RABBIT_ENV=$dir/env.sh
  # A private node: own name, ports, epmd, data, logs, config and cookie (HOME), loopback only.
  cat >"$RABBIT_ENV" <<EOF
export HOME=$dir
export RABBITMQ_NODENAME=sluicebench$$@localhost
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
export RABBITMQ_NODE_PORT=$RABBIT_PORT
export RABBITMQ_DIST_PORT=$(free_port)
export ERL_EPMD_PORT=$(free_port)
export ERL_EPMD_ADDRESS=127.0.0.1
export RABBITMQ_MNESIA_BASE=$dir/mnesia
export RABBITMQ_LOG_BASE=$dir/log
export RABBITMQ_PID_FILE=$dir/rabbit.pid
export RABBITMQ_CONFIG_FILE=$dir/rabbitmq
export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
EOF
  echo '[].' >"$dir/enabled_plugins"
  : >"$dir/rabbitmq.conf"
  (source "$RABBIT_ENV"
   # Run as root directly: Debian's wrapper would switch to the rabbitmq user, who cannot
   # write this private folder.
   /usr/lib/rabbitmq/bin/rabbitmq-server -detached &&
   timeout 90 /usr/lib/rabbitmq/bin/rabbitmqctl -n "$RABBITMQ_NODENAME" wait "$RABBITMQ_PID_FILE" \
     --timeout 80 >/dev/null) || return 1
  [[ -s $dir/rabbit.pid ]] || return 1
  RABBIT_PID=$(cat "$dir/rabbit.pid")
}
RABBIT_VERSION="not available"
if start_rabbitmq; then
  add_target rabbitmq amqp "amqp://guest:guest@127.0.0.1:$RABBIT_PORT/%2f" "$RABBIT_PID"
  RABBIT_VERSION="RabbitMQ $(source "$RABBIT_ENV"; /usr/lib/rabbitmq/bin/rabbitmqctl -n "$RABBITMQ_NODENAME" version 2>/dev/null) (Erlang/OTP $(erl -noshell -eval 'io:fwrite("~s", [erlang:system_info(otp_release)]), halt().'))"
  echo "RabbitMQ: 127.0.0.1:$RABBIT_PORT (pid $RABBIT_PID)"
else
  echo "RabbitMQ did not start; see $RUN/rabbitmq/log" >&2
  for s in a b c d e f; do note "$s" rabbitmq "not available" "rabbitmq-server did not start (log: $RUN/rabbitmq/log)"; done
fi

"$VENV/bin/moto_server" -H 127.0.0.1 -p 0 >"$RUN/moto.log" 2>&1 &
MOTO_PID=$!; PIDS+=("$MOTO_PID")
MOTO_URL=$(wait_url "$RUN/moto.log" "$MOTO_PID" 'http://127\.0\.0\.1:[0-9]*')
add_target moto sqs "$MOTO_URL" "$MOTO_PID"
echo "moto: $MOTO_URL"

"$BENCH" noop-server --listen 127.0.0.1:0 >"$RUN/noop.log" 2>&1 &
NOOP_PID=$!; PIDS+=("$NOOP_PID")
NOOP_URL=$(wait_url "$RUN/noop.log" "$NOOP_PID" 'http://127\.0\.0\.1:[0-9]*')
add_target http-noop noop "$NOOP_URL" "$NOOP_PID"
echo "no-op HTTP: $NOOP_URL"

# --- Running one measurement ---------------------------------------------------------------------
# load SCENARIO LABEL REP MAX_SECONDS [sluice-bench load args...]
# A failure is recorded and the matrix goes on; exit code 3 means "not available".
load() {
  local scenario=$1 label=$2 rep=$3 max=$4; shift 4
  local pids=() p
  for p in ${SPIDS[$label]}; do pids+=(--server-pid "$p"); done
  local out=$RUN/logs/$scenario-$label-r$rep.log rc=0
  : >"$out"
  echo "-- ($scenario) $label, repetition $rep"
  timeout -k 10 $((max + 60)) "$BENCH" load --target "${KIND[$label]}" --url "${URL[$label]}" \
    --label "$label" --scenario "$scenario" --rep "$rep" --max-seconds "$max" \
    --json-out "$RES" "${pids[@]}" "$@" >"$out" 2>&1 &
  local job=$!
  tail -n +1 -f --pid="$job" "$out" 2>/dev/null || true
  wait "$job" || rc=$?
  LAST_RC=$rc
  case $rc in
    0) ;;
    3) note "$scenario" "$label" "not available" "$(grep -m1 '^not available: ' "$out" | cut -c16-300)" ;;
    *) note "$scenario" "$label" failed "exit $rc: $(grep -m1 '^error' "$out" | cut -c1-300)" ;;
  esac
  return 0
}
has() { [[ -n ${KIND[$1]:-} ]]; }
# The targets in a different order each repetition, so none always runs first or last.
rotated() { local n=${#LABELS[@]} i; for ((i = 0; i < n; i++)); do echo "${LABELS[$(((i + $1) % n))]}"; done; }

# --- (a), (b): throughput -------------------------------------------------------------------------
for s in a b; do
  want $s || continue
  batch=10; [[ $s == b ]] && batch=1
  log "($s) throughput, batches of $batch, $REPS x ${DUR}s"
  for rep in $(seq "$REPS"); do
    for label in $(rotated "$rep"); do
      load $s "$label" "$rep" $((DUR + DRAIN + 60)) "${COMMON[@]}" --batch $batch \
        --duration "$DUR" --drain-timeout "$DRAIN"
    done
  done
done

# --- (c): latency at a fixed rate -------------------------------------------------------------------
if want c; then
  log "(c) latency at 1,000 msgs/s, ${C_DUR}s"
  # The disk's own floor for one durable write, measured now, next to the services' latencies.
  "$BENCH" fsync-probe --dir "$RUN" --duration 3 --json-out "$RES" || true
  # Repeated like (a) and (b): a p99 over a few seconds moves with the disk's neighbours. moto
  # runs once: it cannot send 1,000 msgs/s, and one run shows that.
  for rep in $(seq "$REPS"); do
    for label in $(rotated "$rep"); do
      [[ $label == http-noop ]] && continue
      [[ $label == moto && $rep -gt 1 ]] && continue
      load c "$label" "$rep" $((C_DUR + DRAIN + 60)) "${COMMON[@]}" --batch 1 --receive-batch 10 \
        --rate 1000 --duration "$C_DUR" --drain-timeout "$DRAIN"
    done
  done
fi

# --- (d): FIFO with 100 groups ---------------------------------------------------------------------
if want d; then
  log "(d) FIFO, 100 groups"
  load d sluice-embedded 1 $((DUR + DRAIN + 60)) "${COMMON[@]}" --batch 10 --fifo-groups 100 \
    --duration "$DUR" --drain-timeout "$DRAIN"
  if [[ $LAST_RC == 3 ]]; then
    for label in "${LABELS[@]}"; do
      [[ $label == sluice-embedded || $label == sluice-redis ]] && continue
      note d "$label" skipped "no Sluice FIFO queue to compare with"
    done
    has sluice-redis && note d sluice-redis "not available" "FIFO queues answer 400 (not built yet)"
  else
    note d http-noop skipped "the HTTP traffic of (a) plus two short fields per message"
    for rep in $(seq "$REPS"); do
      for label in $(rotated "$rep"); do
        [[ $label == sluice-embedded && $rep == 1 ]] && continue
        [[ $label == http-noop ]] && continue
        load d "$label" "$rep" $((DUR + DRAIN + 60)) "${COMMON[@]}" --batch 10 --fifo-groups 100 \
          --duration "$DUR" --drain-timeout "$DRAIN"
      done
    done
  fi
fi

# --- Raw Redis ceiling --------------------------------------------------------------------------------
if want a || want b; then
  log "raw Redis ceiling (redis-benchmark)"
  start_redis redis-ceiling
  for pipeline in 1 16; do
    csv=$(redis-benchmark -h 127.0.0.1 -p "$RD_PORT" -t set,lpush,lpop -n "$RB_N" -c 16 -d 1024 \
      -P "$pipeline" --csv 2>/dev/null | tr -d '"')
    echo "$csv"
    values=()
    while IFS=, read -r test rps _; do
      [[ $test == SET || $test == LPUSH || $test == LPOP ]] && values+=(--value "$test ops/s=$rps")
    done <<<"$csv"
    note ceiling "raw Redis, redis-benchmark -c 16 -d 1024 -P $pipeline" ok \
      "$RB_N requests per command" "${values[@]}"
  done
  stop_pid "$RD_PID"
fi

# The shared Sluice servers are done; (e) and (f) use fresh ones so memory starts from scratch.
stop_pid "${SPIDS[sluice-embedded]}"
if has sluice-redis; then for p in ${SPIDS[sluice-redis]}; do stop_pid "$p"; done; fi

fresh_sluice() { # label -> updates URL/SPIDS of label
  if [[ $1 == sluice-embedded ]]; then
    start_sluice "$1-$2"
    URL[$1]=$SL_URL SPIDS[$1]=$SL_PID
  else
    start_redis "redis-$2"
    local rd=$RD_PID
    start_sluice "$1-$2" --store "redis://127.0.0.1:$RD_PORT"
    URL[$1]=$SL_URL SPIDS[$1]="$SL_PID $rd"
  fi
}

# --- (e): many idle queues ------------------------------------------------------------------------------
if want e; then
  log "(e) $E_COUNT queues with 2 messages each"
  for label in "${LABELS[@]}"; do
    count=$E_COUNT cleanup=()
    case $label in
      http-noop) continue ;;
      sluice-*) fresh_sluice "$label" e ;;
      rabbitmq) cleanup=(--cleanup) ;;
      moto) count=$E_MOTO cleanup=(--cleanup) ;;   # moto creates queues slowly
    esac
    pids=(); for p in ${SPIDS[$label]}; do pids+=(--server-pid "$p"); done
    echo "-- (e) $label"
    rc=0
    timeout -k 10 400 "$BENCH" queues --target "${KIND[$label]}" --url "${URL[$label]}" \
      --label "$label" --scenario e --count "$count" --per-queue 2 --max-seconds 150 \
      --json-out "$RES" "${pids[@]}" "${cleanup[@]}" 2>&1 | tee "$RUN/logs/e-$label.log" || rc=$?
    [[ $rc == 0 ]] || note e "$label" failed "exit $rc: $(grep -m1 '^error' "$RUN/logs/e-$label.log" | cut -c1-300)"
    if [[ $label == sluice-* ]]; then for p in ${SPIDS[$label]}; do stop_pid "$p"; done; fi
  done
fi

# --- (f): backlog ---------------------------------------------------------------------------------------
if want f; then
  log "(f) backlog of $F_MSGS messages"
  for label in sluice-embedded sluice-redis rabbitmq; do
    has "$label" || continue
    messages=$F_MSGS
    if [[ $label == rabbitmq ]]; then
      # Smaller, to keep the run within 15 minutes: RabbitMQ fills and drains more slowly.
      [[ $F_RABBIT == 0 ]] && { note f rabbitmq skipped "quick mode"; continue; }
      # It takes about 2 minutes; skip it rather than overrun the 15 minutes on a busy machine.
      if (($(date +%s) - T_BUILT > 12 * 60)); then
        note f rabbitmq skipped "the run had used 12 of its 15 minutes"
        continue
      fi
      messages=$F_RABBIT
    fi
    [[ $label == sluice-* ]] && fresh_sluice "$label" f
    load f "$label" 1 900 "${COMMON[@]}" --batch 10 --backlog --messages "$messages" \
      --drain-timeout 400 --progress 5
    if [[ $label == sluice-* ]]; then for p in ${SPIDS[$label]}; do stop_pid "$p"; done; fi
  done
  note f moto skipped "an in-memory Python emulator: a backlog measures nothing durable"
fi

# --- Report -------------------------------------------------------------------------------------------------
ELAPSED=$(($(date +%s) - T_BUILT))
log "done: ${ELAPSED}s after the build, $((T_BUILT - T0))s of installing and building before"
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
MEM=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain 2>/dev/null | head -1) ]] || REV="$REV + uncommitted changes"
REDIS_NOTE="not available (no --store in this build)"
[[ $HAS_REDIS_ENGINE == 1 ]] && REDIS_NOTE="redis-server $(redis-server --version | grep -o 'v=[0-9.]*' | cut -c3-) with --save '' --appendonly no: no persistence at all, unlike the embedded engine and RabbitMQ"
META=(
  --meta "Date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  --meta "Command=\`tests/bench/run.sh$([[ $QUICK == 1 ]] && echo ' --quick')\` ($MODE mode: $REPS alternating repetition(s) of ${DUR} s windows for (a)/(b), ${C_DUR} s at 1,000 msgs/s for (c), $E_COUNT queues for (e), $F_MSGS messages for (f)); the whole run took ${ELAPSED} s after the build"
  --meta "Machine=$(nproc) vCPUs ($CPU), $MEM, kernel $(uname -r); data on $FS; load generator and servers share the machine"
  --meta "Load average=$(cut -d' ' -f1-3 /proc/loadavg) at the end (other people's builds share this machine)"
  --meta "Sluice=$REV, release build, $(rustc --version | cut -d' ' -f1-2)"
  --meta "Durability=Sluice (embedded): group-committed fsync before every 2xx. RabbitMQ: durable classic queue, persistent messages, publisher confirms (sent after its fsync), manual acks, prefetch 20, clients on 2 shared connections (a channel each). moto: in memory. Sluice (Redis): $REDIS_NOTE"
  --meta "Peers=$RABBIT_VERSION; moto $("$VENV/bin/python" -c 'import moto; print(moto.__version__)') (moto_server, werkzeug); $(redis-server --version | cut -d' ' -f1-3)"
)
if [[ $REPORT == 1 ]]; then
  MD=$ROOT/BENCHMARKS.md
  if [[ $WRITE == 0 ]]; then cp "$MD" "$RUN/BENCHMARKS.md"; MD=$RUN/BENCHMARKS.md; fi
  "$BENCH" report --results "$RES" --markdown "$MD" "${META[@]}"
  echo "report: $MD"
  sed -n '/<!-- peers:start -->/,/<!-- peers:end -->/p' "$MD" | sed -n '/### Ratios/,/### (a)/p'
fi
echo "records and logs: $RUN"
