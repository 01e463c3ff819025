#!/usr/bin/env bash
# Runs COMMAND with a real S3 server on loopback:
#   tests/s3server/run-with-s3rver.sh COMMAND [ARGS...]
# Installs the pinned s3rver (npm ci into tests/s3server/node_modules) when
# needed, starts it behind the SigV4-verifying front (sigv4-front.js) on a
# free port with a fresh data directory, exports
#   SANDLOOM_TEST_S3_ENDPOINT=http://127.0.0.1:<port>
# runs COMMAND, stops the server and exits with COMMAND's status.
# If the server cannot be installed or started, the reason is printed and
# the exit status is 1: a test that needs S3 fails, it is never skipped.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
fi

fail() {
    echo "run-with-s3rver: S3 test server unavailable: $*" >&2
    exit 1
}

command -v node >/dev/null 2>&1 || fail "node is not installed"
command -v npm >/dev/null 2>&1 || fail "npm is not installed"

# Reinstall when the lock file changed since the last install.
stamp="$here/node_modules/.sandloom-lock.sha256"
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [ ! -f "$here/node_modules/s3rver/package.json" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    # Two test runs may start at once; one installs, the other waits.
    exec 9>"${TMPDIR:-/tmp}/sandloom-s3rver-install.lock"
    flock 9
    if [ ! -f "$here/node_modules/s3rver/package.json" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        if ! out="$(cd "$here" && npm ci --no-audit --no-fund --loglevel=error 2>&1)"; then
            fail "npm ci failed in $here: $out"
        fi
        echo "$want" >"$stamp"
    fi
    flock -u 9
    exec 9>&-
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/sandloom-s3.XXXXXX")" || fail "mktemp failed"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill -TERM "$server_pid" 2>/dev/null
        for _ in $(seq 50); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$server_pid" 2>/dev/null
        wait "$server_pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

node "$here/sigv4-front.js" --dir "$tmp/data" --ready-file "$tmp/port" \
    >"$tmp/server.log" 2>&1 &
server_pid=$!

for _ in $(seq 300); do
    [ -s "$tmp/port" ] && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
        wait "$server_pid"
        fail "the server exited with status $? before listening: $(cat "$tmp/server.log")"
    fi
    sleep 0.1
done
[ -s "$tmp/port" ] || fail "the server did not listen within 30 s: $(cat "$tmp/server.log")"

port="$(cat "$tmp/port")"
export SANDLOOM_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
"$@"
status=$?
if [ "$status" -ne 0 ] && [ -s "$tmp/server.log" ]; then
    echo "--- S3 test server log ---" >&2
    tail -n 50 "$tmp/server.log" >&2
fi
exit "$status"
