#!/usr/bin/env bash
# The dashboard in a real headless Chromium: starts the real `sluice` binary (tests/serve.sh),
# mints the tokens the tests sign in with, and runs tests/dashboard/dashboard.test.mjs with
# node's test runner and playwright-core driving Debian's chromium. Prints a cargo-style
# `test result:` line (tests/run.sh counts it) and exits non-zero on failure.
#
# Needs Debian's `chromium`, node and npm, and playwright-core under
# target/dashboard-tests/node_modules: tests/run.sh installs them (its dashboard block).
# `tests/dashboard/run.sh --screenshots` instead regenerates docs/screenshots/.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools=target/dashboard-tests
chromium=${CHROMIUM:-$(command -v chromium || true)}
if [ -z "$chromium" ] || [ ! -d "$tools/node_modules/playwright-core" ]; then
  echo "tests/dashboard/run.sh: needs chromium and $tools/node_modules (run tests/run.sh, which installs them)" >&2
  echo "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out (dashboard: tools missing)"
  exit 1
fi
export CHROMIUM=$chromium
# The test files import playwright-core: run them from the tools folder so node finds it.
cp tests/dashboard/*.mjs "$tools/"

. tests/serve.sh
start_sluice dashboard-secret-0123456789abcdef0123456789
SLUICE_URL=$base
TENANT_TOKEN=$(mint_token --tenant dash --scopes "queues:manage messages:send messages:consume topics:manage topics:publish")
SEND_TOKEN=$(mint_token --tenant dash --scopes "messages:send")
ADMIN_TOKEN=$(mint_token --scopes admin)
export SLUICE_URL TENANT_TOKEN SEND_TOKEN ADMIN_TOKEN

if [ "${1:-}" = "--screenshots" ]; then
  node "$tools/screenshots.mjs" "$(pwd)/docs/screenshots"
  exit
fi

set +e
# DASHBOARD_TESTS=<regex> runs only the tests whose names match.
(cd "$tools" && node --test --test-reporter=tap --test-concurrency=1 \
  ${DASHBOARD_TESTS:+--test-name-pattern="$DASHBOARD_TESTS"} dashboard.test.mjs) | tee "$tools/tap.txt"
status=${PIPESTATUS[0]}
set -e
passed=$(sed -n 's/^# pass //p' "$tools/tap.txt")
failed=$(sed -n 's/^# fail //p' "$tools/tap.txt")
passed=${passed:-0}
failed=${failed:-0}
[ "$status" -eq 0 ] || [ "$failed" -gt 0 ] || failed=1
result=ok
[ "$failed" -eq 0 ] || result=FAILED
echo "test result: $result. $passed passed; $failed failed; 0 ignored; 0 measured; 0 filtered out (dashboard in chromium)"
[ "$failed" -eq 0 ]
