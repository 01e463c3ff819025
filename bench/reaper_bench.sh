#!/usr/bin/env bash
# The maintenance cycle with many dormant sandboxes on one worker (issue:
# "10,000 suspended sandboxes on one worker: the maintenance cycle's duration
# and memory are measured and stay bounded", FLEET.md §6, §7.1).
#
#   bench/reaper_bench.sh [BUILD_DIR]        (root; BUILD_DIR: build)
#
# 1. Set-up: a throwaway sandloomd (free loopback port, fresh state directory,
#    random token) creates the schema and its worker row; one sandbox is
#    resolved, connected and suspended through the API, so its route and its
#    workspace directory are the daemon's own. The daemon stops.
# 2. For each run, a copy of that database gets N SUSPENDED routes owned by
#    that worker id, cloned from the template row in one transaction (every
#    column as the daemon wrote it, timestamps shifted, a uid of each from
#    SANDBOX_UID_START up), and N workspace directories cloned from the
#    template's. Not measured (bench/reaper_bench_helper.py prepare).
# 3. sandloomd restarts on that database (same port: same worker id) with
#    SANDBOX_MAINTENANCE_INTERVAL_SECONDS=1 and is watched from its spawn:
#    VmRSS every 100 ms (10 ms until the maintenance thread starts), /healthz
#    worker.orphan_reaper every 250 ms, one record per pass.
#      (a) idle     retention 2592000 s, routes suspended ~1 h ago: 10 passes
#                   that find nothing to do
#      (b) expired  retention 1 s, routes suspended 40 days ago: passes until
#                   every route is released (at most the batch size a pass)
#    Each with REAPER_BENCH_N (10000) routes and, as the baseline of the same
#    run, REAPER_BENCH_BASELINE (100) routes: the table shows big / baseline.
#    Afterwards the database and the workspace root are checked (all still
#    SUSPENDED / all RELEASED with SUSPEND_EXPIRED, directories kept / gone).
#
# Exit status: 0; 1 when a request failed, the reaper counted a failure or a
# check did not hold; 2 when a daemon did not come up or a tool is missing.
# The daemons are stopped (SIGTERM) and the state directory removed on the
# way out, whatever happens.
set -euo pipefail

BUILD=${1:-build}
DAEMON=$BUILD/sandloomd
HELPER=$(dirname "$0")/reaper_bench_helper.py
PY=${PYTHON:-python3}
N_BIG=${REAPER_BENCH_N:-10000}
N_SMALL=${REAPER_BENCH_BASELINE:-100}
BATCH=100    # SANDBOX_ORPHAN_REAPER_BATCH_SIZE, the shipped default
INTERVAL=1   # SANDBOX_MAINTENANCE_INTERVAL_SECONDS
# A uid range of its own, outside the default range (20000-59999) of any
# daemon running beside it and the test daemons' blocks (100000-199999):
# sandbox cgroups are named by uid, and the startup sweep kills by uid.
# The routes take uids from the start.
UID_START=300000
UID_END=319999
TEMPLATE_ID=reaper-bench-template

for f in "$DAEMON" "$BUILD/sandloom-init"; do
    [[ -x $f ]] || { echo "reaper_bench.sh: $f missing: build first (ninja -C $BUILD)" >&2; exit 2; }
done
[[ $(id -u) = 0 ]] || { echo "reaper_bench.sh: needs root (the daemon runs sandboxes)" >&2; exit 2; }
# The interpreter itself, not a version manager's shim (a shim costs ~0.3 s a call).
PY=$("$PY" -c 'import sqlite3, sys; print(sys.executable)' 2>/dev/null) ||
    { echo "reaper_bench.sh: needs ${PYTHON:-python3} with sqlite3" >&2; exit 2; }

STATE=$(mktemp -d /tmp/sandloom-reaperbench-XXXXXX)
chmod 0711 "$STATE" # like /var/lib: traversable by the sandbox uids, not listable
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
PID=
SPAWNED=
WATCHER=

stop() {
    if [[ -n $PID ]] && kill -0 "$PID" 2>/dev/null; then
        kill -TERM "$PID"
        for _ in $(seq 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$PID" 2>/dev/null && kill -KILL "$PID"
        wait "$PID" 2>/dev/null || true
    fi
    PID=
}
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    if [[ -n $WATCHER ]] && kill -0 "$WATCHER" 2>/dev/null; then
        kill -TERM "$WATCHER"
        wait "$WATCHER" 2>/dev/null || true
    fi
    stop
    rm -rf "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

new_port() {
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 30000))
        port_free "$p" && { echo "$p"; return; }
    done
    echo "reaper_bench.sh: no free port found" >&2
    exit 2
}

# spawn DIR PORT RETENTION_SECONDS: a daemon on DIR/sandloom.db, DIR/sandboxes.
spawn() {
    local dir=$1 port=$2 retention=$3
    rm -f "$dir/startup.log"
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        SANDBOX_HOST=127.0.0.1 SANDBOX_PORT="$port" SANDBOX_ADVERTISE_HOST=127.0.0.1 \
        SANDBOX_LOCAL_ROOT="$dir/sandboxes" \
        SANDBOX_DATABASE_URL="sqlite:///$dir/sandloom.db" \
        SANDBOX_STARTUP_LOG_PATH="$dir/startup.log" \
        SANDBOX_INTERNAL_TOKEN="$TOKEN" \
        SANDBOX_UID_START=$UID_START SANDBOX_UID_END=$UID_END \
        SANDBOX_WORKER_CAPACITY=100000 \
        SANDBOX_MAINTENANCE_INTERVAL_SECONDS=$INTERVAL \
        SANDBOX_ORPHAN_REAPER_BATCH_SIZE=$BATCH \
        SANDBOX_SUSPENDED_RETENTION_SECONDS="$retention" \
        setsid "$DAEMON" </dev/null >"$dir/daemon.stdout" 2>"$dir/daemon.stderr" &
    PID=$!
    SPAWNED=$(date +%s.%N)
}

health() {
    local answer
    { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
    printf 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3
    answer=$(timeout 2 cat <&3 || true)
    exec 3>&-
    [[ $answer == *$'\r\n\r\nok' ]]
}

daemon_log() {
    echo "--- sandloomd stderr ($1, last 20 lines) ---" >&2
    tail -n 20 "$1/daemon.stderr" >&2 || true
}

# ---- 1. set-up: schema, worker row, one real suspended sandbox -------------
SETUP=$STATE/setup
mkdir -p "$SETUP"
PORT=
for attempt in 1 2 3 4 5; do
    PORT=$(new_port)
    spawn "$SETUP" "$PORT" 2592000
    for _ in $(seq 200); do
        kill -0 "$PID" 2>/dev/null || break
        health "$PORT" && break
        sleep 0.1
    done
    kill -0 "$PID" 2>/dev/null && health "$PORT" && break
    echo "reaper_bench.sh: sandloomd did not come up on port $PORT (attempt $attempt):" >&2
    daemon_log "$SETUP"
    stop
    PORT=
done
[[ -n $PORT ]] || { echo "reaper_bench.sh: no daemon, giving up" >&2; exit 2; }
if ! "$PY" "$HELPER" template --port "$PORT" --token "$TOKEN" --sandbox-id "$TEMPLATE_ID"; then
    daemon_log "$SETUP"
    exit 1
fi
stop

# ---- 2./3. the runs -----------------------------------------------------------
RESULTS=()
RC=0

# run SCENARIO N RETENTION_SECONDS
run() {
    local scenario=$1 n=$2 retention=$3 dir worker rc
    dir=$STATE/$scenario-$n
    mkdir -p "$dir"
    echo "reaper_bench.sh: ($scenario, $n routes) preparing the database and directories" >&2
    worker=$("$PY" "$HELPER" prepare --setup-db "$SETUP/sandloom.db" --setup-root "$SETUP/sandboxes" \
        --template-id "$TEMPLATE_ID" --db "$dir/sandloom.db" --root "$dir/sandboxes" \
        --n "$n" --scenario "$scenario" --uid-start $UID_START --uid-end $UID_END)
    # The worker id is <advertise host>-<port>: the routes stay this worker's
    # only on the set-up port; should that one be taken meanwhile, another
    # port and the routes follow it.
    for attempt in 1 2 3 4 5; do
        if ! port_free "$PORT"; then
            PORT=$(new_port)
            worker=127.0.0.1-$PORT
            "$PY" "$HELPER" owner --db "$dir/sandloom.db" --worker-id "$worker"
        fi
        echo "reaper_bench.sh: ($scenario, $n routes) measuring sandloomd on worker $worker" >&2
        # The watcher first (it samples the daemon's startup), then the daemon.
        rm -f "$dir/ready" "$dir/pid" "$dir/pid.tmp"
        "$PY" "$HELPER" measure --pid-file "$dir/pid" --ready-file "$dir/ready" \
            --port "$PORT" --token "$TOKEN" --startup-log "$dir/startup.log" \
            --db "$dir/sandloom.db" --root "$dir/sandboxes" --worker-id "$worker" --n "$n" \
            --scenario "$scenario" --batch $BATCH --interval $INTERVAL \
            --out "$dir/result.json" &
        WATCHER=$!
        for _ in $(seq 3000); do
            [[ -e $dir/ready ]] || ! kill -0 "$WATCHER" 2>/dev/null && break
            sleep 0.01
        done
        spawn "$dir" "$PORT" "$retention"
        echo "$PID $SPAWNED" >"$dir/pid.tmp" && mv "$dir/pid.tmp" "$dir/pid"
        rc=0
        wait "$WATCHER" || rc=$?
        WATCHER=
        [[ $rc -eq 3 ]] || break # 3: exited during startup (the port, most likely)
        daemon_log "$dir"
        stop
        PORT=$(new_port)
        worker=127.0.0.1-$PORT
        "$PY" "$HELPER" owner --db "$dir/sandloom.db" --worker-id "$worker"
    done
    [[ $rc -eq 0 ]] || daemon_log "$dir"
    stop
    [[ $rc -le $RC ]] || RC=$rc
    [[ -f $dir/result.json ]] && RESULTS+=("$dir/result.json")
    rm -rf "$dir/sandboxes" "$dir/templates" # 10,000 directories: not kept longer than needed
}

# Baseline and measured row of each scenario back to back.
run idle "$N_SMALL" 2592000
run idle "$N_BIG" 2592000
run expired "$N_SMALL" 1
run expired "$N_BIG" 1

FS=$(df -PT "$STATE" | awk 'NR == 2 { print $2 }')
rc=0
if [[ ${#RESULTS[@]} -gt 0 ]]; then
    "$PY" "$HELPER" report --small "$N_SMALL" --big "$N_BIG" --fs "$FS" "${RESULTS[@]}" || rc=$?
else
    rc=1
fi
[[ $rc -le $RC ]] || RC=$rc
exit "$RC"
