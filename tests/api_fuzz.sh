#!/usr/bin/env bash
# Property-based API check with schemathesis: thousands of generated requests (valid and
# invalid) against a real server; no answer may be a 5xx, and every answer must match the
# OpenAPI spec (status codes, content types, schemas). A fixed seed keeps CI reproducible.
set -euo pipefail
cd "$(dirname "$0")/.."

# A virtual environment of our own: works with any python3, and Debian's system Python refuses
# global pip installs. Debian needs python3-venv for it.
venv=target/pytools
if [ ! -x "$venv/bin/schemathesis" ]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$venv" && python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'schemathesis>=4,<5'
fi
schemathesis=$venv/bin/schemathesis
. tests/serve.sh
start_sluice api-fuzz-secret-0123456789abcdef0123456789
tenant=$(mint_token --tenant fuzz --scopes "queues:manage messages:send messages:consume topics:manage topics:publish")
admin=$(mint_token --scopes admin)

checks=not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance
"$schemathesis" run "$base/openapi.json" --no-color --seed 1 --max-examples 40 --checks "$checks" \
  -H "Authorization: Bearer $tenant" --exclude-path-regex '^/v1/admin'
"$schemathesis" run "$base/openapi.json" --no-color --seed 1 --max-examples 40 --checks "$checks" \
  -H "Authorization: Bearer $admin" --include-path-regex '^/v1/admin'
