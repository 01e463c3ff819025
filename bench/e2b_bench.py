#!/usr/bin/env python3
"""E2B's SDK against Sandloom (issue 17), in one run, on a throwaway
sandloomd (free loopback port, fresh state directory, SQLite, a uid range
of its own; stopped and removed on the way out), with the pinned npm `e2b`
of tests/e2e/e2b_sdk (npm ci into a temporary directory):

  1. Sandbox.create() to the first commands.run("true") result, measured
     in the SDK's own process, p50/p95 over N sandboxes (the figure public
     sandbox leaderboards compare: Daytona 0.11 s, E2B 0.44 s median), in
     the default private network mode, each create after a pause (--gap-ms,
     untimed): with a warm pool (SANDBOX_WARM_POOL_SIZE=4, service/warm.c)
     beside the baseline of a daemon without one, in the same run; and,
     alternating with the SDK's, the same through the native routes
     (resolve, connect, exec of the argv the SDK sends): the service's own
     part;
  2. commands.run("true") round trip on one sandbox beside the native exec
     route (a synchronous POST /api/v1/sandboxes/{id}/exec) of the same
     argv the SDK sends (/bin/bash -l -c true), from the same Node.js
     process, alternating, medians and the ratio (goal <= 1.5x); and the
     native exec of plain `true`, which shows what the login shell E2B's
     SDK asks for costs.

    bench/e2b_bench.py [BUILD_DIR] [--sandboxes N] [--rounds N]   (root)

Prints figures; asserts nothing about time. Exit 1 when a step failed.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_daemon import TOKEN, Daemon  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--sandboxes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--gap-ms", type=int, default=100)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="e2b-bench-")
    os.chmod(work, 0o755)
    d = None
    try:
        sdk = os.path.join(work, "sdk")
        os.makedirs(sdk)
        for name in ("package.json", "package-lock.json"):
            shutil.copy2(os.path.join(REPO, "tests/e2e/e2b_sdk", name), sdk)
        shutil.copy2(os.path.join(REPO, "bench/e2b_bench.mjs"), sdk)
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts",
                            "--loglevel=error"], cwd=sdk, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"bench: npm ci failed: {r.stderr[-2000:]}")

        def sdk_run(daemon, rounds):
            url = f"http://127.0.0.1:{daemon.port}"
            env = dict(os.environ, E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=TOKEN,
                       BENCH_TOKEN=TOKEN)
            r = subprocess.run(["node", "e2b_bench.mjs", str(a.sandboxes), str(rounds),
                                str(a.gap_ms)], cwd=sdk, env=env, capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"bench: the SDK run failed: {r.stderr[-3000:]}")
            return json.loads(r.stdout.strip().splitlines()[-1])

        def show(label, c):
            print(f"  {label}: p50 {statistics.median(c):.1f} ms, p95 {pct(c, 95):.1f} ms, "
                  f"min {min(c):.1f} ms, max {max(c):.1f} ms")

        # The baseline: no pool, every first command builds its sandbox.
        d = Daemon(os.path.abspath(a.build), os.path.join(work, "cold"), uid=720000, uids=4000)
        caps = json.loads(urllib.request.urlopen(
            f"http://127.0.0.1:{d.port}/healthz").read())["worker"]["capabilities"]
        favor = caps["resource_control"].get("favordynmods")
        cold = sdk_run(d, 0)["createToFirst"]
        d.stop()
        d = Daemon(os.path.abspath(a.build), os.path.join(work, "warm"), uid=724000, uids=4000,
                   SANDBOX_WARM_POOL_SIZE="4")
        time.sleep(2)  # the pool's first four
        out = sdk_run(d, a.rounds)
        c, nat_first = out["createToFirst"], out["nativeCreateToFirst"]
        print(f"E2B SDK Sandbox.create() -> first commands.run('true'), {len(c)} sandboxes each, "
              f"one every {a.gap_ms} ms + its own time (private network mode; cgroup "
              f"favordynmods {'on' if favor else 'off'}):")
        show("warm pool of 4", c)
        show("no pool (baseline)", cold)
        print(f"  ratio {statistics.median(cold) / statistics.median(c):.1f}x; goal p50 <= 20 ms; "
              f"public medians: Daytona 110 ms, E2B 440 ms")
        show("the same through the native routes (resolve, connect, exec of "
             "/bin/bash -l -c true), warm pool of 4, alternating", nat_first)
        e, n, b = out["e2b"], out["native"], out["bare"]
        me, mn, mb = statistics.median(e), statistics.median(n), statistics.median(b)
        print(f"commands.run('true') round trip, {len(e)} alternating with the native exec route "
              f"(the SDK runs /bin/bash -l -c true):")
        print(f"  E2B SDK p50 {me:.2f} ms (p95 {pct(e, 95):.2f}); native exec of the same "
              f"argv p50 {mn:.2f} ms (p95 {pct(n, 95):.2f}): ratio {me / mn:.2f}x (goal <= 1.5x)")
        print(f"  native exec of plain `true` p50 {mb:.2f} ms: the login shell costs "
              f"{mn - mb:.2f} ms of every E2B command")
    finally:
        if d:
            d.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
