#!/usr/bin/env python3
"""Print "<passed> <failed>" for one test tier.

    count-results.py meson BUILD/meson-logs/testlog.json
    count-results.py junit FILE.xml

meson: sums cmocka's "[  PASSED  ] N test(s)" / "[  FAILED  ] N test(s)"
lines; a binary that crashed or was skipped counts as one failure, never as
a pass. junit: pytest's counts; skipped tests count as failures (a check
that did not run is not a pass)."""
import json
import re
import sys
import xml.etree.ElementTree as ET


def meson(path):
    passed = failed = 0
    for line in open(path):
        t = json.loads(line)
        out = t.get("stdout", "") + t.get("stderr", "")
        p = sum(int(m) for m in re.findall(r"\[  PASSED  \] (\d+) test", out))
        f = sum(int(m) for m in re.findall(r"\[  FAILED  \] (\d+) test", out))
        if t.get("result") != "OK" and f == 0:
            f = 1
        passed += p
        failed += f
    return passed, failed


def junit(path):
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    tests = sum(int(s.get("tests", 0)) for s in suites)
    bad = sum(int(s.get(k, 0)) for s in suites for k in ("failures", "errors", "skipped"))
    return tests - bad, bad


if __name__ == "__main__":
    try:
        p, f = {"meson": meson, "junit": junit}[sys.argv[1]](sys.argv[2])
    except Exception:  # no log at all: the tier did not run
        p, f = 0, 1
    print(p, f)
