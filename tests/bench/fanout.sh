#!/usr/bin/env bash
# Fan-out 1 → N queues: Sluice topics (embedded and Redis engines) against RabbitMQ's fanout
# exchange, in one run on this machine (see BENCHMARKS.md, section 8).
#
#   tests/bench/fanout.sh              # 3 alternating repetitions of 5 s windows
#   tests/bench/fanout.sh --quick      # 1 repetition of 2 s
#
# Options: --quick, --skip-build, --reps N, --duration S.
#
# Starts Sluice on its embedded store, Sluice on a throwaway redis-server (no persistence), and a
# private RabbitMQ node (as run.sh does), runs `sluice-bench fanout` against each in rotating
# order, prints the table (`sluice-bench fanout-report`), and stops everything (also on error or
# Ctrl-C). Records and logs stay in $CARGO_TARGET_DIR/bench-run/fanout-<time>/ (default
# target/). Needs rabbitmq-server and redis-server installed (run.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

REPS=3 DUR=5 BUILD=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) REPS=1 DUR=2 ;;
    --skip-build) BUILD=0 ;;
    --reps) REPS=$2; shift ;;
    --duration) DUR=$2; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

if [[ $BUILD == 1 ]]; then
  cargo build --release --bin sluice
  cargo build --release -p sluice-bench
fi
SLUICE=$TARGET_DIR/release/sluice
BENCH=$TARGET_DIR/release/sluice-bench

RUN=$TARGET_DIR/bench-run/fanout-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$RUN"
RES=$RUN/results.jsonl
: >"$RES"

PIDS=()
RABBIT_ENV=
cleanup() {
  set +e
  if [[ -n $RABBIT_ENV ]]; then
    (source "$RABBIT_ENV"
     timeout 60 /usr/lib/rabbitmq/bin/rabbitmqctl -n "$RABBITMQ_NODENAME" stop "$RABBITMQ_PID_FILE" \
       >/dev/null 2>&1
     pid=$(cat "$RABBITMQ_PID_FILE" 2>/dev/null) && kill -9 "$pid" 2>/dev/null
     for _ in 1 2 3 4 5; do epmd -kill >/dev/null 2>&1 && break; sleep 1; done)
  fi
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  wait 2>/dev/null
  rm -rf "$RUN"/*/data "$RUN/rabbitmq/mnesia"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
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

declare -A KIND URL SPIDS
LABELS=()
add_target() { KIND[$1]=$2; URL[$1]=$3; SPIDS[$1]=$4; LABELS+=("$1"); }

TOKEN=$("$SLUICE" token --jwt-secret "$SECRET" --tenant bench --ttl-seconds 7200 \
  --scopes "queues:manage messages:send messages:consume topics:manage topics:publish")
export SLUICE_BENCH_TOKEN=$TOKEN

start_sluice sluice-embedded
add_target sluice-embedded sluice "$SL_URL" "$SL_PID"

mkdir -p "$RUN/redis"
RD_PORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$RD_PORT" --save '' --appendonly no --dir "$RUN/redis" \
  >"$RUN/redis/log" 2>&1 &
RD_PID=$!; PIDS+=("$RD_PID")
for _ in $(seq 100); do [[ $(redis-cli -p "$RD_PORT" ping 2>/dev/null) == PONG ]] && break; sleep 0.1; done
start_sluice sluice-redis --store "redis://127.0.0.1:$RD_PORT"
add_target sluice-redis sluice "$SL_URL" "$SL_PID $RD_PID"

# A private RabbitMQ node, exactly as run.sh starts it.
dir=$RUN/rabbitmq
mkdir -p "$dir"
RABBIT_PORT=$(free_port)
RABBIT_ENV=$dir/env.sh
cat >"$RABBIT_ENV" <<EOF
export HOME=$dir
export RABBITMQ_NODENAME=sluicefan$$@localhost
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
if (source "$RABBIT_ENV"
    /usr/lib/rabbitmq/bin/rabbitmq-server -detached &&
    timeout 90 /usr/lib/rabbitmq/bin/rabbitmqctl -n "$RABBITMQ_NODENAME" wait "$RABBITMQ_PID_FILE" \
      --timeout 80 >/dev/null) && [[ -s $dir/rabbit.pid ]]; then
  add_target rabbitmq amqp "amqp://guest:guest@127.0.0.1:$RABBIT_PORT/%2f" "$(cat "$dir/rabbit.pid")"
else
  echo "RabbitMQ did not start; see $dir/log" >&2
fi
for label in "${LABELS[@]}"; do echo "$label: ${URL[$label]} (pids ${SPIDS[$label]})"; done

rotated() { local n=${#LABELS[@]} i; for ((i = 0; i < n; i++)); do echo "${LABELS[$(((i + $1) % n))]}"; done; }
for rep in $(seq "$REPS"); do
  for label in $(rotated "$rep"); do
    pids=(); for p in ${SPIDS[$label]}; do pids+=(--server-pid "$p"); done
    timeout -k 10 180 "$BENCH" fanout --target "${KIND[$label]}" --url "${URL[$label]}" \
      --label "$label" --rep "$rep" --duration "$DUR" --queues 10 --producers 8 --batch 10 \
      --size 1024 --max-seconds 120 --json-out "$RES" "${pids[@]}" 2>&1 | tee -a "$RUN/log" ||
      echo "($label rep $rep failed)" | tee -a "$RUN/log"
  done
done

echo
echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$BENCH" fanout-report --results "$RES" --baseline rabbitmq | tee "$RUN/table.md"
echo "records and logs: $RUN"
