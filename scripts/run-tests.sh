#!/usr/bin/env bash
# Runs every test tier against the build in $1 (default: build):
#   1. C unit tests (cmocka, through meson test; the runtime tests need root)
#   2. end-to-end tests (pytest: real sandloomd on loopback, real namespaces)
#   3. the escape suite (pytest: attacks from inside real sandboxes)
#   4. release build only: the escape suite again with every daemon at the
#      `basic` isolation level (SANDLOOM_TEST_LEVEL=basic), its own tier
#   5. release build only: the end-to-end tests and the escape suite again
#      with every daemon's sandboxes on a workspace image (SANDLOOM_TEST_IMAGE)
#   6. release build only: the end-to-end tests again with every daemon's
#      metadata on a real PostgreSQL server, then on a real MariaDB server
#      (tests/db/run-with-*.sh start them), and the server-database suite
#      (tests/db) on each
# and, when $2 names an ASan+UBSan build, tiers 1-3 again against it.
# Ends with one line "total: N passed, N failed".
set -uo pipefail
build="${1:-build}"
asan_build="${2:-}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# Debian's interpreter, which has pytest (a pyenv shim on PATH may not).
py=/usr/bin/python3

status=0
total_pass=0
total_fail=0

# run_tier BUILD LABEL
run_tier() {
    local dir="$1" label="$2" counts unit_pass unit_fail e2e_pass e2e_fail sec_pass sec_fail
    echo "== $label: unit tests"
    meson test -C "$dir" --suite unit --print-errorlogs || status=1
    counts=$($py scripts/count-results.py meson "$dir/meson-logs/testlog.json")
    read -r unit_pass unit_fail <<<"$counts"

    echo "== $label: end-to-end tests"
    rm -f "$dir/e2e-junit.xml"
    SANDLOOMD="$root/$dir/sandloomd" $py -m pytest -q -p no:cacheprovider \
        --junitxml="$dir/e2e-junit.xml" tests/e2e || status=1
    counts=$($py scripts/count-results.py junit "$dir/e2e-junit.xml")
    read -r e2e_pass e2e_fail <<<"$counts"

    echo "== $label: escape suite"
    rm -f "$dir/security-junit.xml"
    SANDLOOMD="$root/$dir/sandloomd" $py -m pytest -q -p no:cacheprovider \
        --junitxml="$dir/security-junit.xml" tests/security || status=1
    counts=$($py scripts/count-results.py junit "$dir/security-junit.xml")
    read -r sec_pass sec_fail <<<"$counts"

    echo "$label unit: $unit_pass passed, $unit_fail failed"
    echo "$label e2e: $e2e_pass passed, $e2e_fail failed"
    echo "$label security: $sec_pass passed, $sec_fail failed"
    total_pass=$((total_pass + unit_pass + e2e_pass + sec_pass))
    total_fail=$((total_fail + unit_fail + e2e_fail + sec_fail))
}

# run_variant BUILD LABEL NAME DIR VAR=VALUE: one pytest suite again with
# one variable set for every daemon it starts, own junit file and counts.
#   security@basic: SANDLOOM_TEST_LEVEL=basic, the `basic` isolation level
#     (no PID namespace, no /proc inside: RUNTIME.md §3)
#   security@warm, e2e@warm-network, e2e@warm-e2b: SANDLOOM_TEST_WARM_POOL=2,
#     every daemon with a warm pool of 2 (service/warm.c)
#   e2e@image, security@image: SANDLOOM_TEST_IMAGE=<bytes>, the sandboxes
#     and templates of every default-layout daemon on a workspace image
#     (workspace/image.h: btrfs subvolumes on a loop device)
#   e2e@gvisor, security@gvisor: SANDLOOM_TEST_BACKEND=gvisor, every
#     daemon's sandboxes under runsc (runtime/gvisor.c)
# SUITE may name several paths, space-separated. The gVisor backend's own
# cases (marker gvisor_cases) start daemons of their own and run in the
# main tiers only.
run_variant() {
    local dir="$1" label="$2" name="$3" suite="$4" setting="$5" counts v_pass v_fail
    local junit="$dir/${name/@/-}-junit.xml"
    echo "== $label: $name ($setting)"
    rm -f "$junit"
    env "$setting" SANDLOOMD="$root/$dir/sandloomd" $py -m pytest -q -p no:cacheprovider \
        -o junit_suite_name="$name" --junitxml="$junit" -m "not gvisor_cases" $suite || status=1
    counts=$($py scripts/count-results.py junit "$junit")
    read -r v_pass v_fail <<<"$counts"
    echo "$label $name: $v_pass passed, $v_fail failed"
    total_pass=$((total_pass + v_pass))
    total_fail=$((total_fail + v_fail))
}

# run_db BUILD LABEL NAME SERVER PYTEST-ARGS...: pytest under a database
# server and a Redis of its own (tests/db/run-with-SERVER.sh,
# run-with-redis.sh), own junit file and counts.
run_db() {
    local dir="$1" label="$2" name="$3" server="$4" counts v_pass v_fail
    shift 4
    local junit="$dir/${name/@/-}-junit.xml"
    echo "== $label: $name"
    rm -f "$junit"
    SANDLOOMD="$root/$dir/sandloomd" tests/db/run-with-"$server".sh \
        tests/db/run-with-redis.sh $py -m pytest -q \
        -p no:cacheprovider -o junit_suite_name="$name" --junitxml="$junit" "$@" || status=1
    counts=$($py scripts/count-results.py junit "$junit")
    read -r v_pass v_fail <<<"$counts"
    echo "$label $name: $v_pass passed, $v_fail failed"
    total_pass=$((total_pass + v_pass))
    total_fail=$((total_fail + v_fail))
}

image_bytes=$((1 << 30))
run_tier "$build" "release"
run_variant "$build" release security@basic tests/security SANDLOOM_TEST_LEVEL=basic
run_variant "$build" release e2e@image tests/e2e SANDLOOM_TEST_IMAGE=$image_bytes
# The isolation suite, the private network's and E2B's once more on sandboxes
# a warm pool prepared before their create (service/warm.c).
run_variant "$build" release security@warm tests/security SANDLOOM_TEST_WARM_POOL=2
run_variant "$build" release e2e@warm-network tests/e2e/test_network_private.py \
    SANDLOOM_TEST_WARM_POOL=2
run_variant "$build" release e2e@warm-e2b tests/e2e/test_e2b_sdk.py SANDLOOM_TEST_WARM_POOL=2
run_variant "$build" release security@image tests/security SANDLOOM_TEST_IMAGE=$image_bytes
# The suites of the contract once more with every sandbox under gVisor (its
# own cases, memory suspend and fork, are in tests/e2e/test_gvisor.py).
gvisor_suites="tests/e2e/test_lifecycle.py tests/e2e/test_exec.py tests/e2e/test_files_security.py
    tests/e2e/test_templates.py tests/e2e/test_suspend.py tests/e2e/test_fork.py
    tests/e2e/test_network_private.py"
run_variant "$build" release e2e@gvisor "$gvisor_suites" SANDLOOM_TEST_BACKEND=gvisor
run_variant "$build" release security@gvisor tests/security SANDLOOM_TEST_BACKEND=gvisor
# The tests marked sqlite_file work on the SQLite file itself; tests/db
# covers what they cover on the servers. The gVisor cases keep SQLite.
run_db "$build" release e2e@postgresql postgres -m "not sqlite_file and not gvisor_cases" tests/e2e
run_db "$build" release db@postgresql postgres tests/db
run_db "$build" release e2e@mariadb mariadb -m "not sqlite_file and not gvisor_cases" tests/e2e
run_db "$build" release db@mariadb mariadb tests/db
if [ -n "$asan_build" ]; then
    export ASAN_OPTIONS=detect_leaks=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    run_tier "$asan_build" "asan+ubsan"
fi
[ "$total_fail" -gt 0 ] && status=1
echo "total: $total_pass passed, $total_fail failed"
exit $status
