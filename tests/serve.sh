# Sourced by the scripts that drive the real binary over HTTP (tests/api_fuzz.sh,
# tests/clients/run.sh): finds or builds `sluice`, starts it on a free port with a fresh data
# directory and a JWT secret, and mints tokens with its own CLI.
#
# After `start_sluice`: $binary, $base (http://127.0.0.1:PORT), $secret, $work (a temporary
# folder removed on exit, with the server's data and logs), and `mint_token ARGS...` (the
# arguments of `sluice token` other than the secret). The server is stopped on exit.

start_sluice() {
  local target_dir
  target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  binary=${SLUICE_BIN:-$target_dir/debug/sluice}
  [ -x "$binary" ] || cargo build --locked --bin sluice
  work=$(mktemp -d)
  secret=${1:-test-secret-0123456789abcdef0123456789}
  "$binary" serve --listen 127.0.0.1:0 --data-dir "$work/data" --jwt-secret "$secret" \
    >"$work/out" 2>"$work/err" &
  server=$!
  trap 'kill $server 2>/dev/null || true; rm -rf "$work"' EXIT
  # The server prints its address once it accepts connections.
  for _ in $(seq 1 100); do
    grep -q 'listening on' "$work/out" 2>/dev/null && break
    kill -0 $server 2>/dev/null || break
    sleep 0.1
  done
  base=$(sed -n 's/^sluice listening on //p' "$work/out")
  if [ -z "$base" ]; then
    echo "sluice did not start:" >&2
    cat "$work/err" >&2
    return 1
  fi
}

mint_token() {
  "$binary" token --jwt-secret "$secret" "$@"
}
