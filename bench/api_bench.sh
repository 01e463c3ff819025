#!/usr/bin/env bash
# Runs api_bench against a throwaway sandloomd: a free loopback port, a fresh
# state directory (SQLite, local workspaces), a random token. Stops the daemon
# (SIGTERM) and removes the state directory on the way out, whatever happens.
#
# bench/fleet_bench.sh sets, for its rows:
#   BENCH_DATABASE_URL  another metadata database (default: SQLite in the state)
#   BENCH_DAEMON_ENV    more VAR=value settings for every daemon started
#   BENCH_FRONT_ENV     start a second daemon with these settings too, and send
#                       the requests to it (the forwarded row: it owns nothing)
#
#   bench/api_bench.sh [BUILD_DIR] [api_bench options...]   (root; BUILD_DIR: build)
#
# Exit status: api_bench's (1 when any request failed), 2 if the daemon did
# not come up.
set -euo pipefail

BUILD=build
if [[ $# -gt 0 && $1 != -* ]]; then
    BUILD=$1
    shift
fi
DAEMON=$BUILD/sandloomd
BENCH=$BUILD/bench/api_bench
for f in "$DAEMON" "$BENCH" "$BUILD/sandloom-init"; do
    [[ -x $f ]] || { echo "api_bench.sh: $f missing: build first (ninja -C $BUILD)" >&2; exit 2; }
done
[[ $(id -u) = 0 ]] || { echo "api_bench.sh: needs root (the daemon runs sandboxes)" >&2; exit 2; }

STATE=$(mktemp -d /tmp/sandloom-apibench-XXXXXX)
chmod 0711 "$STATE" # like /var/lib: traversable by the sandbox uids, not listable
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
PID=
FRONT_PID=
DB_URL=${BENCH_DATABASE_URL:-sqlite:///$STATE/sandloom.db}
# shellcheck disable=SC2206 # word-split on purpose: VAR=value items
EXTRA=(${BENCH_DAEMON_ENV:-})

stop() {
    if [[ -n $FRONT_PID ]] && kill -0 "$FRONT_PID" 2>/dev/null; then
        kill -TERM "$FRONT_PID"
        wait "$FRONT_PID" 2>/dev/null || true
    fi
    FRONT_PID=
    if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then
        kill -TERM "$PID"
        for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$PID" 2>/dev/null && kill -KILL "$PID"
        wait "$PID" 2>/dev/null || true
    fi
    PID=
}
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    stop
    rm -rf "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

health() {
    local answer
    { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
    printf 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
    answer=$(timeout 2 cat <&3 || true)
    exec 3>&-
    [[ $answer == *$'\r\n\r\nok' ]]
}

port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A free port: random candidates; a port taken between the check and the
# bind makes the daemon exit at startup, and the next candidate is tried.
for attempt in 1 2 3 4 5; do
    PORT=$((20000 + RANDOM % 30000))
    port_free "$PORT" || continue
    # A uid range of its own: daemons started by other tests share this
    # cgroup and name sandbox cgroups by uid.
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        SANDBOX_HOST=127.0.0.1 SANDBOX_PORT="$PORT" SANDBOX_ADVERTISE_HOST=127.0.0.1 \
        SANDBOX_LOCAL_ROOT="$STATE/sandboxes" \
        SANDBOX_DATABASE_URL="$DB_URL" "${EXTRA[@]}" \
        SANDBOX_STARTUP_LOG_PATH="$STATE/startup.log" \
        SANDBOX_INTERNAL_TOKEN="$TOKEN" \
        SANDBOX_UID_START=62000 SANDBOX_UID_END=65999 \
        SANDBOX_WORKER_CAPACITY=100000 \
        setsid "$DAEMON" </dev/null >"$STATE/daemon.stdout" 2>"$STATE/daemon.stderr" &
    PID=$!
    for _ in $(seq 200); do
        kill -0 "$PID" 2>/dev/null || break
        health "$PORT" && break
        sleep 0.1
    done
    if kill -0 "$PID" 2>/dev/null && health "$PORT"; then
        break
    fi
    echo "api_bench.sh: sandloomd did not come up on port $PORT (attempt $attempt):" >&2
    tail -n 20 "$STATE/daemon.stderr" >&2 || true
    stop
done
[[ -n $PID ]] || { echo "api_bench.sh: no daemon, giving up" >&2; exit 2; }

URL_PORT=$PORT
if [[ -n ${BENCH_FRONT_ENV:-} ]]; then
    # shellcheck disable=SC2206
    FRONT=(${BENCH_FRONT_ENV})
    FPORT=$((PORT + 1))
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        SANDBOX_HOST=127.0.0.1 SANDBOX_PORT="$FPORT" SANDBOX_ADVERTISE_HOST=127.0.0.1 \
        SANDBOX_LOCAL_ROOT="$STATE/front-sandboxes" \
        SANDBOX_DATABASE_URL="$DB_URL" "${EXTRA[@]}" "${FRONT[@]}" \
        SANDBOX_STARTUP_LOG_PATH="$STATE/front-startup.log" \
        SANDBOX_INTERNAL_TOKEN="$TOKEN" \
        SANDBOX_UID_START=62000 SANDBOX_UID_END=65999 \
        setsid "$DAEMON" </dev/null >"$STATE/front.stdout" 2>"$STATE/front.stderr" &
    FRONT_PID=$!
    for _ in $(seq 200); do
        health "$FPORT" && break
        sleep 0.1
    done
    health "$FPORT" || { echo "api_bench.sh: the front daemon did not come up:" >&2
                         tail -n 20 "$STATE/front.stderr" >&2; exit 2; }
    sleep 1 # both heartbeats published: the front sees the owner
    URL_PORT=$FPORT
fi

rc=0
SANDBOX_INTERNAL_TOKEN=$TOKEN "$BENCH" --url "http://127.0.0.1:$URL_PORT" --daemon-pid "$PID" "$@" || rc=$?
if [[ $rc -ne 0 ]]; then
    echo "--- sandloomd stderr (last 20 lines) ---" >&2
    tail -n 20 "$STATE/daemon.stderr" >&2 || true
fi
exit "$rc"
