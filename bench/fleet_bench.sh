#!/usr/bin/env bash
# The API benchmark with a backend column (issue 13): the same api_bench rows
# on one worker over SQLite, PostgreSQL and MariaDB, and a forwarded row
# (client -> replica B -> owner A over PostgreSQL + Redis: B owns nothing,
# every request is forwarded). Real servers, started for this run by the test
# wrappers (tests/db/run-with-*.sh). Each api_bench run prints its own
# baselines (fork+exec of /bin/true, serial and 32-way) measured in the same
# run; the summary at the end puts the rows side by side, with each row's
# ratio to SQLite's and to its own run's baseline.
#
#   bench/fleet_bench.sh [BUILD_DIR] [api_bench options...]   (root)
#   FLEET_BENCH_ROWS="postgresql forwarded" bench/fleet_bench.sh ...   (some rows only)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
BUILD=build
if [[ $# -gt 0 && $1 != -* ]]; then
    BUILD=$1
    shift
fi
BUILD="$(cd "$BUILD" && pwd)"

if [[ ${1:-} != --inner ]]; then
    # Outside the servers: start them, then run this script inside them.
    # (The PostgreSQL URL is kept before the MariaDB wrapper sets its own.)
    exec "$root/tests/db/run-with-postgres.sh" bash -c \
        'export BENCH_PG_URL=$SANDLOOM_TEST_DATABASE_URL BENCH_PG_ADMIN=$SANDLOOM_TEST_PG_ADMIN
         exec "$0" "$1" "$2" "$3" --inner "${@:4}"' \
        "$root/tests/db/run-with-mariadb.sh" "$root/tests/db/run-with-redis.sh" \
        "$here/fleet_bench.sh" "$BUILD" "$@"
fi
shift
OPTS=("$@")
[[ ${#OPTS[@]} -gt 0 ]] || OPTS=(--commands 3000 --serial 400 --new 150 --rounds 3)
MY_URL=$SANDLOOM_TEST_DATABASE_URL
out=$(mktemp -d /tmp/sandloom-fleetbench-XXXXXX)
trap 'rm -rf "$out"' EXIT

pg_db() {
    local name="bench_$1"
    psql "$BENCH_PG_ADMIN" -X -q -c "CREATE DATABASE $name" >/dev/null
    echo "${BENCH_PG_URL%/*}/$name"
}
my_db() {
    local name="bench_$1"
    # shellcheck disable=SC2086
    mariadb $SANDLOOM_TEST_MYSQL_ADMIN -e "CREATE DATABASE $name"
    echo "${MY_URL%/*}/$name"
}

run() {
    local label="$1"
    shift
    echo
    echo "=== $label"
    env "$@" "$here/api_bench.sh" "$BUILD" "${OPTS[@]}" | tee "$out/$label.txt"
}

auto="SANDBOX_DATABASE_AUTO_DDL=true"
ROWS=" ${FLEET_BENCH_ROWS:-sqlite postgresql mariadb forwarded} "
want() { [[ $ROWS == *" $1 "* ]]; }
for r in $ROWS; do
    case $r in
    sqlite | postgresql | mariadb | forwarded) ;;
    *) echo "fleet_bench.sh: FLEET_BENCH_ROWS: no row '$r' (sqlite postgresql mariadb forwarded)" >&2
       exit 2 ;;
    esac
done
want sqlite && run sqlite BENCH_DAEMON_ENV=""
want postgresql && run postgresql BENCH_DATABASE_URL="$(pg_db direct)" BENCH_DAEMON_ENV="$auto"
want mariadb && run mariadb BENCH_DATABASE_URL="$(my_db direct)" BENCH_DAEMON_ENV="$auto"
# The front cannot take sandboxes (its disk is "full": DRAINING), so
# placement puts every one on the owner and each request is forwarded.
fleet="$auto SANDBOX_REGISTRY_BACKEND=redis SANDBOX_REDIS_URL=$SANDLOOM_TEST_REDIS_URL"
fleet="$fleet SANDBOX_REGISTRY_NAMESPACE=bench SANDBOX_HEARTBEAT_INTERVAL_SECONDS=0.5"
! want forwarded || run forwarded BENCH_DATABASE_URL="$(pg_db forwarded)" BENCH_DAEMON_ENV="$fleet" \
    BENCH_FRONT_ENV="SANDBOX_MIN_FREE_BYTES=1000000000000000"

# The summary: p50 ms, per s and p99 ms of each row, each backend.
/usr/bin/python3 - "$out" <<'PY'
import re, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = [("serial exec", r"HTTP exec /bin/true, serial"),
        ("32-way exec (unscoped)", r"HTTP exec, \d+ clients / \d+ sandboxes, unscoped"),
        ("resolve + connect, serial", r"resolve \+ connect new sandbox, serial"),
        ("resolve + connect, 32-way", r"resolve \+ connect new sandbox, \d+-way"),
        ("baseline A (fork+exec, serial)", r"baseline A"),
        ("baseline B (fork+exec, 32 workers)", r"baseline B"),
        ("HTTP floor (GET /health, serial)", r"HTTP floor")]
def cells(text, pat):
    for line in text.splitlines():
        if line.startswith("|") and re.search(pat, line):
            c = [x.strip() for x in line.strip("|").split("|")]
            return {"p50": float(c[2]), "p99": float(c[4]), "rate": float(c[5])}
    return None
data = {b: (out / f"{b}.txt").read_text() for b in ("sqlite", "postgresql", "mariadb", "forwarded")
        if (out / f"{b}.txt").exists()}
def row(b, i):
    return cells(data[b], rows[i][1]) if b in data else None
print("\nSummary (one run; medians and ratios, the machine is shared):\n")
print(f"| {'row':34} | {'backend':10} | {'p50 ms':>7} | {'p99 ms':>7} | {'per s':>8} | {'p50/sqlite':>10} | {'rate/sqlite':>11} |")
print(f"|{'-'*36}|{'-'*12}|{'-'*9}|{'-'*9}|{'-'*10}|{'-'*12}|{'-'*13}|")
for name, pat in rows:
    base = cells(data["sqlite"], pat) if "sqlite" in data else None
    for b, text in data.items():
        c = cells(text, pat)
        if not c:
            continue
        r50 = f"{c['p50'] / base['p50']:.2f}x" if base and base["p50"] else ""
        rr = f"{c['rate'] / base['rate']:.2f}x" if base and base["rate"] else ""
        print(f"| {name:34} | {b:10} | {c['p50']:7.2f} | {c['p99']:7.2f} | {c['rate']:8.1f} | {r50:>10} | {rr:>11} |")
s, f, p = row("sqlite", 0), row("forwarded", 0), row("postgresql", 0)
a, floor = row("sqlite", 4), row("sqlite", 6)
pg32, sq32 = row("postgresql", 1), row("sqlite", 1)
pgB = row("postgresql", 5)
print()
if s and a:
    print(f"- serial exec on SQLite / its baseline A: {s['p50'] / a['p50']:.2f}x (target <= 1.25x);"
          f" the daemon's own share: {s['p50'] - a['p50']:.2f} ms a command"
          + (f", {floor['p50']:.2f} ms of it the HTTP floor" if floor else ""))
if pg32 and sq32:
    print(f"- PostgreSQL 32-way throughput / SQLite's: {pg32['rate'] / sq32['rate']:.2f} (target >= 0.80)")
if f and p:
    print(f"- forwarded serial p50 - direct p50 over the same database (PostgreSQL):"
          f" {f['p50'] - p['p50']:+.2f} ms (target <= +0.5 ms)")
if f and s:
    print(f"- forwarded serial p50 - direct SQLite p50: {f['p50'] - s['p50']:+.2f} ms")
if pg32 and pgB:
    print(f"- PostgreSQL 32-way p99 / its baseline B p99: {pg32['p99'] / pgB['p99']:.2f} (target <= 1)")
PY
