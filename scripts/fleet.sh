#!/usr/bin/env bash
# `make fleet`: a three-replica fleet on this machine, on loopback, over real
# servers the script starts itself (no system service needed):
#   - PostgreSQL (Debian's server, run as `postgres`), the metadata database
#   - Redis (Debian's redis-server), the registry
#   - an S3 server (npm s3rver behind tests/s3server's SigV4 front), the
#     object store for templates and snapshots
#   - replicas 1 and 2 of one profile, replica 3 of another profile hash
# Everything lives under STATE (default ./state-fleet); the database and the
# sandboxes survive a restart. Prints the URLs and the token, then waits;
# Ctrl-C (or SIGTERM) stops everything it started.
#
# Usage: scripts/fleet.sh BUILD STATE BASE_PORT
#   replicas on BASE_PORT+1..+3, PostgreSQL on BASE_PORT+10, Redis +11, S3 +12
set -euo pipefail
build="$(cd "$1" && pwd)" state="$2" base="${3:-18080}"
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$state"
state="$(cd "$state" && pwd)"
pg_port=$((base + 10)) redis_port=$((base + 11)) s3_port=$((base + 12))
pids=()

say() { printf 'fleet: %s\n' "$*"; }
fail() { say "$*" >&2; exit 1; }

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$pgbin" ] || fail "PostgreSQL is not installed (make deps installs it)"
command -v redis-server >/dev/null || fail "redis-server is not installed (make deps)"
command -v node >/dev/null || fail "node is not installed"

# One token for the fleet, kept (0600) so a restart keeps it.
if [ ! -s "$state/token" ]; then
    (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$state/token")
fi
token="$(cat "$state/token")"
if [ ! -s "$state/db-password" ]; then
    (umask 077; head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$state/db-password")
fi
dbpw="$(cat "$state/db-password")"

stop() {
    trap - INT TERM EXIT
    say "stopping"
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -TERM "${pids[i]}" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    runuser -u postgres -- "$pgbin/pg_ctl" -D "$state/pg/data" -m fast -w stop >/dev/null 2>&1 || true
    say "stopped"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# PostgreSQL: a cluster of its own under STATE, made once.
mkdir -p "$state/pg"
chown postgres: "$state/pg"
if [ ! -d "$state/pg/data" ]; then
    printf '%s\n' "$dbpw" > "$state/pg/pw" && chown postgres: "$state/pg/pw"
    runuser -u postgres -- "$pgbin/initdb" -D "$state/pg/data" -U sandloom --pwfile="$state/pg/pw" \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$state/pg/initdb.log" 2>&1 ||
        fail "initdb failed: $(cat "$state/pg/initdb.log")"
    rm -f "$state/pg/pw"
    fresh_db=1
fi
runuser -u postgres -- "$pgbin/pg_ctl" -D "$state/pg/data" -l "$state/pg/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $state/pg" start >/dev/null ||
    fail "PostgreSQL did not start: $(tail -5 "$state/pg/server.log")"
if [ -n "${fresh_db:-}" ]; then
    runuser -u postgres -- "$pgbin/createdb" -h "$state/pg" -p "$pg_port" -U sandloom sandloom
fi

# Redis: the registry, nothing to keep.
mkdir -p "$state/redis"
redis-server --bind 127.0.0.1 --port "$redis_port" --requirepass "$token" --save "" \
    --appendonly no --dir "$state/redis" --logfile "$state/redis/server.log" </dev/null &
pids+=($!)

# S3: the pinned s3rver behind the SigV4 front (installed on first use).
if [ ! -f "$root/tests/s3server/node_modules/s3rver/package.json" ]; then
    (cd "$root/tests/s3server" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
        fail "cannot install s3rver (npm ci in tests/s3server)"
fi
mkdir -p "$state/s3"
rm -f "$state/s3/port"
node "$root/tests/s3server/sigv4-front.js" --dir "$state/s3/data" --ready-file "$state/s3/port" \
    --port "$s3_port" >"$state/s3/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do [ -s "$state/s3/port" ] && break; sleep 0.1; done
[ -s "$state/s3/port" ] || fail "the S3 server did not start: $(tail -5 "$state/s3/server.log")"

# Every replica draws sandbox uids from one range: a uid is the fleet's,
# unique through the database, whichever replica resolved it.
replica() {
    local n="$1" hash="$2"
    local port=$((base + n))
    mkdir -p "$state/replica-$n"
    env -i PATH="$PATH" \
        SANDBOX_HOST=127.0.0.1 SANDBOX_PORT="$port" SANDBOX_ADVERTISE_HOST=127.0.0.1 \
        SANDBOX_INTERNAL_TOKEN="$token" \
        SANDBOX_LOCAL_ROOT="$state/replica-$n/sandboxes" \
        SANDBOX_STARTUP_LOG_PATH="$state/replica-$n/startup.log" \
        SANDBOX_UID_START=300000 SANDBOX_UID_END=399999 \
        SANDBOX_DATABASE_URL="postgresql://sandloom:$dbpw@127.0.0.1:$pg_port/sandloom" \
        SANDBOX_DATABASE_AUTO_DDL=true \
        SANDBOX_REGISTRY_BACKEND=redis SANDBOX_REDIS_URL="redis://:$token@127.0.0.1:$redis_port/0" \
        SANDBOX_BLOBSTORE_ENDPOINT="http://127.0.0.1:$s3_port" SANDBOX_BLOBSTORE_BUCKET=sandloom \
        BLOBSTORE_ACCESS_KEY=S3RVER BLOBSTORE_SECRET_KEY=S3RVER \
        ${hash:+SANDBOX_PROFILE_HASH="$hash"} \
        "$build/sandloomd" >"$state/replica-$n/stdout.log" 2>"$state/replica-$n/stderr.log" &
    pids+=($!)
}
replica 1 ""
replica 2 ""
replica 3 "fleet-pool-b"
for n in 1 2 3; do
    port=$((base + n))
    for _ in $(seq 200); do
        curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        sleep 0.1
    done
    curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 ||
        fail "replica $n did not start: $(tail -5 "$state/replica-$n/stderr.log")"
done

say "three replicas over PostgreSQL 127.0.0.1:$pg_port, Redis 127.0.0.1:$redis_port, S3 http://127.0.0.1:$s3_port"
for n in 1 2 3; do
    say "replica $n: http://127.0.0.1:$((base + n))$([ "$n" = 3 ] && echo ' (profile hash fleet-pool-b)')"
done
say "token: $token"
say "try: curl -H \"Authorization: Bearer $token\" http://127.0.0.1:$((base + 1))/api/v1/sandboxes/diagnostics/runtime"
say "ready (Ctrl-C stops the fleet; logs and data under $state)"
# Wait for a signal, or for any process of the fleet to end.
while :; do
    for p in "${pids[@]}"; do
        kill -0 "$p" 2>/dev/null || fail "a process of the fleet ended (pid $p): see the logs under $state"
    done
    sleep 1 &
    wait $! || true
done
