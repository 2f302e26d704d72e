#!/usr/bin/env bash
# Runs every test of the workspace on a fresh Debian machine with the Rust toolchain: installs
# the system tools the tests use when they are missing (openssl, python3, curl, redis-server),
# then unit tests, the conformance suite on every engine (embedded, Redis, Redis Cluster), the
# property tests, the end-to-end tests against the real binary, the schemathesis run, and the
# generated Python and TypeScript clients (tests/clients/run.sh), the dashboard in a headless
# Chromium (tests/dashboard/run.sh) and the Terraform modules (tests/terraform/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

need_packages=()
command -v openssl >/dev/null 2>&1 || need_packages+=(openssl)
command -v python3 >/dev/null 2>&1 || need_packages+=(python3)
command -v curl >/dev/null 2>&1 || need_packages+=(curl)
command -v cc >/dev/null 2>&1 || need_packages+=(build-essential)
command -v redis-server >/dev/null 2>&1 || need_packages+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_packages+=(redis-tools)
if [ ${#need_packages[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "tests/run.sh: please install: ${need_packages[*]}" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_packages[@]}" >/dev/null
fi
# The tests start their own redis-server processes on free ports; a packaged instance that
# the install may have started is not used.

# boto3 and the aws CLI for the AWS-compatible endpoint's e2e tests (tests/e2e/aws_*.rs), and
# moto's S3-compatible server for the payload tests (services/payload/tests,
# tests/e2e/payloads.rs), in a virtual environment of our own as tests/api_fuzz.sh makes its;
# the tests run them from
# SLUICE_TEST_AWS_BIN. Without it (no venv, no PyPI) the tests fall back to tools on the PATH.
awstools=target/awstools
if [ ! -x "$awstools/bin/aws" ] || [ ! -x "$awstools/bin/moto_server" ]; then
  { python3 -m venv "$awstools" 2>/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null \
           && rm -rf "$awstools" && python3 -m venv "$awstools"; }; } \
    && "$awstools/bin/pip" install --quiet --disable-pip-version-check 'boto3>=1.34,<2' 'awscli>=1.32,<2' 'moto[server]>=5,<6' \
    || echo "tests/run.sh: no boto3/aws CLI venv; the e2e test uses the PATH's" >&2
fi
if [ -x "$awstools/bin/aws" ]; then
  SLUICE_TEST_AWS_BIN="$(pwd)/$awstools/bin"
  export SLUICE_TEST_AWS_BIN
fi

# An older boto3 whose botocore (< 1.31) speaks SQS's Query protocol (form requests, XML
# answers), as SDKs and tools from before 2023 do, in a virtual environment of its own: the
# SQS e2e test runs its boto3 checks with it from SLUICE_TEST_AWS_QUERY_BIN (and skips them
# without it).
awsquery=target/awstools-query
if [ ! -x "$awsquery/bin/python3" ] || ! "$awsquery/bin/python3" -c 'import boto3' 2>/dev/null; then
  { python3 -m venv "$awsquery" 2>/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null \
           && rm -rf "$awsquery" && python3 -m venv "$awsquery"; }; } \
    && "$awsquery/bin/pip" install --quiet --disable-pip-version-check 'boto3==1.26.165' 'botocore==1.29.165' \
    || echo "tests/run.sh: no Query-protocol boto3 venv; the e2e test skips those checks" >&2
fi
if "$awsquery/bin/python3" -c 'import boto3' 2>/dev/null; then
  SLUICE_TEST_AWS_QUERY_BIN="$(pwd)/$awsquery/bin"
  export SLUICE_TEST_AWS_QUERY_BIN
fi

# --- dashboard tests: Debian's chromium and npm playwright-core (tests/dashboard/run.sh) -------
# The browser comes from Debian (no browser download); playwright-core is pinned by
# tests/dashboard/package-lock.json and installed once under target/dashboard-tests.
if ! command -v chromium >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "tests/run.sh: please install chromium, nodejs and npm for the dashboard tests" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium nodejs npm >/dev/null
fi
dashboard_tools=target/dashboard-tests
if ! cmp -s tests/dashboard/package-lock.json "$dashboard_tools/package-lock.json" \
    || [ ! -d "$dashboard_tools/node_modules/playwright-core" ]; then
  mkdir -p "$dashboard_tools"
  cp tests/dashboard/package.json tests/dashboard/package-lock.json "$dashboard_tools/"
  (cd "$dashboard_tools" && npm ci --no-audit --no-fund --loglevel=error)
fi

# Backtraces make a failure in CI readable without a rerun.
export RUST_BACKTRACE=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# --no-fail-fast: one failing test binary does not hide the results of the others.
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log"

# Generated requests against the real binary: no 5xx, answers as the OpenAPI spec says.
tests/api_fuzz.sh
tests/infra/check.sh 2>&1 | tee -a "$log"

# The spec validated and linted, and clients generated from it driving the real binary; its
# checks print cargo-style "test result:" lines, counted below.
tests/clients/run.sh 2>&1 | tee -a "$log"

# The dashboard in a real headless Chromium against the real binary.
tests/dashboard/run.sh 2>&1 | tee -a "$log"

# The Terraform modules of infra/terraform applied, re-planned and destroyed against a real
# server with Terraform's AWS provider (it installs its Terraform once under target/terraform).
tests/terraform/run.sh 2>&1 | tee -a "$log"

# One closing line for the whole run (the last cargo summary is the doc tests' alone).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed;/) p += $(i-1); if ($i ~ /^failed;/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
