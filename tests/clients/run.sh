#!/usr/bin/env bash
# Checks the committed OpenAPI spec the way a tenant uses it: validates it
# (openapi-spec-validator), lints it with Redocly's recommended rules, then generates a Python
# client (openapi-python-client) and a TypeScript one (openapi-typescript + openapi-fetch) fresh
# from it and drives a real `sluice serve` with each, through every tag. The examples of
# docs/clients.md run too. Tools are pinned (requirements.txt, package-lock.json) and installed
# once under target/clients/. Each check prints a `test result:` line in cargo's format, which
# tests/run.sh adds to its total; any failure exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/../.."
spec=openapi/openapi.json
tools=target/clients
passed=0
failed=0

run() {
  echo "+ $*" >&2
  "$@"
}

# One check: its name, then the command; counted, and the run goes on to report the rest.
check() {
  local name=$1
  shift
  echo "--- $name" >&2
  if "$@"; then
    passed=$((passed + 1))
    echo "check $name ... ok"
  else
    failed=$((failed + 1))
    echo "check $name ... FAILED"
  fi
}

# Runners' own summaries, restated in cargo's format so tests/run.sh counts them.
report() {
  local status=ok
  [ "$2" -eq 0 ] || status=FAILED
  echo "test result: $status. $1 passed; $2 failed; 0 ignored; 0 measured; 0 filtered out ($3)"
}

# --- tools ---------------------------------------------------------------------------------
venv=$tools/venv
if ! cmp -s tests/clients/requirements.txt "$venv/requirements.txt"; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$venv" && python3 -m venv "$venv"
  fi
  run "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/clients/requirements.txt
  cp tests/clients/requirements.txt "$venv/requirements.txt"
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "tests/clients/run.sh: please install node and npm" >&2
    exit 1
  fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
node_dir=$tools/node
if ! cmp -s tests/clients/package-lock.json "$node_dir/package-lock.json" || [ ! -d "$node_dir/node_modules" ]; then
  mkdir -p "$node_dir"
  cp tests/clients/package.json tests/clients/package-lock.json "$node_dir/"
  (cd "$node_dir" && run npm ci --no-audit --no-fund --loglevel=error)
fi
bin=$node_dir/node_modules/.bin
# Redocly would otherwise ask its servers for telemetry and update notices.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true

# --- the spec itself -------------------------------------------------------------------------
check openapi-spec-validator run "$venv/bin/openapi-spec-validator" "$spec"
# Warnings fail too: the recommended set warns on things as real as an operation with no 4xx.
redocly_lint() {
  local out status=0
  out=$(run "$bin/redocly" lint --config tests/clients/redocly.yaml --format stylish "$spec" 2>&1) || status=$?
  echo "$out"
  [ "$status" -eq 0 ] && ! grep -qi 'warning' <<<"$out"
}
check redocly-lint redocly_lint

# --- a real server ---------------------------------------------------------------------------
. tests/serve.sh
start_sluice clients-secret-0123456789abcdef0123456789
SLUICE_URL=$base
SLUICE_ADMIN_TOKEN=$(mint_token --scopes admin)
# The docs' examples work as a tenant would, with a token minted by the CLI.
SLUICE_TOKEN=$(mint_token --tenant docs --scopes "queues:manage messages:send messages:consume topics:manage topics:publish")
export SLUICE_URL SLUICE_ADMIN_TOKEN SLUICE_TOKEN

served_is_committed() {
  python3 - "$base/openapi.json" "$spec" <<'PY'
import json, sys, urllib.request
served = json.load(urllib.request.urlopen(sys.argv[1]))
if served != json.load(open(sys.argv[2])):
    sys.exit(f"{sys.argv[1]} differs from {sys.argv[2]}: the binary is stale or the spec is")
PY
}
check served-spec-is-committed served_is_committed

# The examples of docs/clients.md, by language: every fenced block tagged python or ts.
extract_blocks() {
  python3 - docs/clients.md "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"^```" + re.escape(sys.argv[2]) + r"\n(.*?)^```$", text, re.S | re.M)
if not blocks:
    sys.exit(f"no {sys.argv[2]} example in {sys.argv[1]}")
print("\n".join(blocks))
PY
}

# --- Python ----------------------------------------------------------------------------------
py=$tools/python
rm -rf "$py" && mkdir -p "$py"
printf 'package_name_override: sluice_client\npost_hooks: []\n' >"$py/config.yaml"  # as in docs/clients.md
# Any warning from the generator means part of the spec did not make it into the client.
generate_python() {
  run "$venv/bin/openapi-python-client" generate --path "$spec" --config "$py/config.yaml" \
    --meta none --output-path "$py/sluice_client" --fail-on-warning
}
check python-generate generate_python
python_docs() {
  extract_blocks python >"$py/docs_example.py"
  (cd "$py" && run env PYTHONPATH=. "$OLDPWD/$venv/bin/python" docs_example.py)
}
check python-docs-example python_docs
set +e
PYTHONPATH=$py run "$venv/bin/pytest" -q -p no:cacheprovider --junitxml="$py/junit.xml" tests/clients/python
pytest_status=$?
set -e
read -r py_passed py_failed < <(python3 - "$py/junit.xml" <<'PY' || echo "0 1"
import sys, xml.etree.ElementTree as ET
suite = ET.parse(sys.argv[1]).getroot()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
total, bad = int(suite.get("tests")), int(suite.get("failures")) + int(suite.get("errors"))
print(total - bad - int(suite.get("skipped")), bad)
PY
)
[ "$pytest_status" -eq 0 ] || [ "$py_failed" -gt 0 ] || py_failed=1
report "$py_passed" "$py_failed" "python client"

# --- TypeScript ------------------------------------------------------------------------------
# Built inside the tools folder so that imports find its node_modules.
ts=$node_dir/work
rm -rf "$ts" && mkdir -p "$ts"
cp tests/clients/ts/scenario.test.ts tests/clients/ts/tsconfig.json "$ts/"
typescript_build() {
  run "$bin/openapi-typescript" "$spec" --output "$ts/schema.d.ts" &&
    extract_blocks ts >"$ts/docs-example.ts" &&
    run "$bin/tsc" -p "$ts/tsconfig.json"
}
check typescript-generate-and-typecheck typescript_build
check typescript-docs-example run node "$ts/out/docs-example.js"
set +e
(cd "$ts/out" && run node --test --test-reporter=tap scenario.test.js) | tee "$ts/tap.txt"
node_status=${PIPESTATUS[0]}
set -e
ts_passed=$(sed -n 's/^# pass //p' "$ts/tap.txt")
ts_failed=$(sed -n 's/^# fail //p' "$ts/tap.txt")
ts_passed=${ts_passed:-0}
ts_failed=${ts_failed:-0}
[ "$node_status" -eq 0 ] || [ "$ts_failed" -gt 0 ] || ts_failed=1
report "$ts_passed" "$ts_failed" "typescript client"

report "$passed" "$failed" "spec and generation checks"
[ "$failed" -eq 0 ] && [ "$py_failed" -eq 0 ] && [ "$ts_failed" -eq 0 ]
