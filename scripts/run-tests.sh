#!/usr/bin/env bash
# Runs every test tier against the build in $1 (default: build):
#   1. C unit tests (cmocka, through meson test)
#   2. end-to-end tests (pytest, real sandloomd on loopback, real namespaces)
# and prints one closing line "total: N passed, N failed".
set -uo pipefail
build="${1:-build}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
# Debian's interpreter, which has pytest (a pyenv shim on PATH may not).
py=/usr/bin/python3

status=0
echo "== unit tests"
meson test -C "$build" --suite unit --print-errorlogs || status=1
unit_counts=$($py - "$build/meson-logs/testlog.json" <<'PYEOF'
import json, re, sys
passed = failed = 0
for line in open(sys.argv[1]):
    t = json.loads(line)
    out = t.get("stdout", "") + t.get("stderr", "")
    p = sum(int(m) for m in re.findall(r"\[  PASSED  \] (\d+) test", out))
    f = sum(int(m) for m in re.findall(r"\[  FAILED  \] (\d+) test", out))
    if t.get("result") != "OK" and f == 0:
        f = 1  # a crashed or skipped binary counts as a failure, never as a pass
    passed += p; failed += f
print(passed, failed)
PYEOF
)
read -r unit_pass unit_fail <<<"$unit_counts"

echo "== end-to-end tests"
junit="$build/e2e-junit.xml"
SANDLOOMD="$root/$build/sandloomd" $py -m pytest -q -p no:cacheprovider \
    --junitxml="$junit" tests/e2e || status=1
e2e_counts=$($py - "$junit" <<'PYEOF'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print(0, 1); sys.exit()
suites = [root] if root.tag == "testsuite" else list(root)
tests = sum(int(s.get("tests", 0)) for s in suites)
bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) + int(s.get("skipped", 0)) for s in suites)
print(tests - bad, bad)
PYEOF
)
read -r e2e_pass e2e_fail <<<"$e2e_counts"

echo "unit: $unit_pass passed, $unit_fail failed"
echo "e2e: $e2e_pass passed, $e2e_fail failed"
total_fail=$((unit_fail + e2e_fail))
[ "$total_fail" -gt 0 ] && status=1
echo "total: $((unit_pass + e2e_pass)) passed, $total_fail failed"
exit $status
