#!/usr/bin/env python3
"""The gVisor backend beside the native one (issue 18), in one run: two
throwaway sandloomd (bench_daemon.py), SANDBOX_EXECUTION_BACKEND=native and
=gvisor, both in the isolated network mode (the one in which gVisor keeps
memory), measured alternately where the figure is a latency:

  1. warm exec: POST /exec of `true` on a sandbox whose session runs,
     p50/p90 over --rounds (goal <= 10 ms under gVisor; seed 2: 35.7 ms);
  2. session cold start: a new sandbox's first exec (the session is made
     for it), p50 over --sandboxes (goal <= 300 ms; seed 2: 2.5 s a pod);
  3. memory of an idle session: PSS of every host process of it (gVisor:
     the Sentry, the gofer and the platform's stubs; native: init), median
     over 5 sessions;
  4. suspend with memory and resume against resident memory (a Python
     process holding 10 MB, 100 MB, 1 GB of random bytes): the suspend
     call and the resume call, and the image's size (E2B: about 4 s per
     GB to pause, about 1 s to resume);
  5. fork of a sandbox running a server into 10 (gVisor: processes and
     files; native: files only).

    bench/gvisor_bench.py [BUILD_DIR] [--rounds N] [--sandboxes N] [--sizes 10,100,1024]
                                                                     (root)

Prints figures; asserts nothing about time. Exit 1 when a step failed.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_daemon import Daemon  # noqa: E402

HOLD = """import os, sys, time
n = int(sys.argv[1]) << 20
# Random bytes: what an image of them takes is what the memory takes
# (runsc compresses its images; untouched or zero pages cost nothing).
b = bytearray(os.urandom(n))
open('/workspace/held', 'w').write('ok')
while True:
    time.sleep(3600)
"""
SERVER = """import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b'up')
    def log_message(self, *a):
        pass
http.server.HTTPServer(('127.0.0.1', 8000), H).serve_forever()
"""


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def exec_(d, sid, gen, argv, timeout=120):
    t = time.monotonic()
    r = d.json("POST", f"/api/v1/sandboxes/{sid}/exec",
               {"exec_id": "b-" + uuid.uuid4().hex, "generation": gen, "argv": argv,
                "timeout_seconds": timeout})
    ms = (time.monotonic() - t) * 1000
    if r.get("status") != "SUCCEEDED":
        sys.exit(f"bench: {argv}: {r}")
    return ms, r


def pss_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next(int(l.split()[1]) for l in f if l.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
    return total


def session_pids(uid, backend):
    """Host processes of uid's session: natively its processes run as uid;
    under gVisor those whose command line names its container (sl-<uid>-)."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if backend == "native":
                with open(f"/proc/{p}/status") as f:
                    uid_line = next(l for l in f if l.startswith("Uid:"))
                if int(uid_line.split()[1]) == uid:
                    pids.append(int(p))
            else:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if f"sl-{uid}-".encode() in f.read():
                        pids.append(int(p))
                # the ptrace stubs: children of the Sentry, same cgroup
        except (OSError, StopIteration):
            pass
    if backend == "gvisor":
        children = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    children += [int(c) for c in f.read().split()]
            except OSError:
                pass
        pids += [c for c in children if c not in pids]
    return pids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--sandboxes", type=int, default=20)
    ap.add_argument("--sizes", default="10,100,1024")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    work = tempfile.mkdtemp(prefix="gvisor-bench-")
    os.chmod(work, 0o755)
    common = dict(SANDBOX_NETWORK_MODE="isolated", SANDBOX_WORKER_CAPACITY="200",
                  SANDBOX_MEMORY_LIMIT_BYTES=str(3 << 30), SANDBOX_TMPFS_BYTES=str(64 << 20))
    ds = {}
    try:
        ds["native"] = Daemon(build, f"{work}/native", 620000, SANDBOX_EXECUTION_BACKEND="native",
                              **common)
        ds["gvisor"] = Daemon(build, f"{work}/gvisor", 621000, SANDBOX_EXECUTION_BACKEND="gvisor",
                              **common)
        print(f"gvisor bench: runsc {ds['gvisor'].json('GET', '/healthz')['worker']['capabilities']['execution_backend']}")

        # 1. warm exec, alternating.
        boxes = {k: d.sandbox() for k, d in ds.items()}
        for k, d in ds.items():
            exec_(d, *boxes[k], ["true"])
        warm = {k: [] for k in ds}
        for _ in range(a.rounds):
            for k, d in ds.items():
                warm[k].append(exec_(d, *boxes[k], ["true"])[0])
        for k in ds:
            print(f"warm exec {k:6s}: p50 {statistics.median(warm[k]):6.1f} ms  "
                  f"p90 {pct(warm[k], 90):6.1f} ms  (n={a.rounds})")
        print(f"warm exec gvisor/native: {statistics.median(warm['gvisor']) / statistics.median(warm['native']):.1f}x")

        # 2. cold start: a new sandbox's first exec.
        cold = {k: [] for k in ds}
        for _ in range(a.sandboxes):
            for k, d in ds.items():
                sid, gen = d.sandbox()
                cold[k].append(exec_(d, sid, gen, ["true"])[0])
                d.request("DELETE", f"/api/v1/sandboxes/{sid}")
        for k in ds:
            print(f"cold start {k:6s}: p50 {statistics.median(cold[k]):6.1f} ms  "
                  f"p90 {pct(cold[k], 90):6.1f} ms  (n={a.sandboxes})")

        # 3. idle session memory.
        for k, d in ds.items():
            kib = []
            for _ in range(5):
                sid, gen = d.sandbox()
                _, r = exec_(d, sid, gen, ["true"])
                uid = d.json("GET", f"/api/v1/sandboxes/{sid}")["sandbox_uid"]
                time.sleep(0.5)
                kib.append(pss_kib(session_pids(uid, k)))
                d.request("DELETE", f"/api/v1/sandboxes/{sid}")
            print(f"idle session {k:6s}: {statistics.median(kib) / 1024:6.1f} MB PSS "
                  f"(median of 5)")

        # 4. suspend/resume with memory (gVisor only: native refuses).
        g = ds["gvisor"]
        for mb in [int(x) for x in a.sizes.split(",")]:
            sid, gen = g.sandbox()
            exec_(g, sid, gen, ["sh", "-c", f"cat > /workspace/hold.py <<'EOF'\n{HOLD}EOF\n"
                                            f"python3 /workspace/hold.py {mb} > /dev/null 2>&1 "
                                            "< /dev/null & while [ ! -e /workspace/held ]; do "
                                            "sleep 0.05; done"])
            t = time.monotonic()
            s = g.json("POST", f"/api/v1/sandboxes/{sid}/suspend",
                       {"generation": gen, "memory": True})
            t_s = time.monotonic() - t
            image = os.path.join(work, "gvisor", "sandboxes", sid, "memory", "checkpoint.img")
            size = os.path.getsize(image) if os.path.exists(image) else -1
            t = time.monotonic()
            r = g.json("POST", f"/api/v1/sandboxes/{sid}/resume")
            t_r = time.monotonic() - t
            _, alive = exec_(g, sid, gen, ["sh", "-c", "ps -eo args | grep -c '^python3 /workspace/hold.py'"])
            print(f"memory suspend {mb:5d} MB held: suspend {t_s:6.2f} s, resume {t_r:5.2f} s, "
                  f"image {size / 1e6:7.1f} MB, memory kept {s['memory'] and r['memory']}, "
                  f"holder alive {alive['stdout'].strip() == '1'}")
            g.request("DELETE", f"/api/v1/sandboxes/{sid}")

        # 5. fork into 10.
        for k, d in ds.items():
            sid, gen = d.sandbox()
            exec_(d, sid, gen, ["sh", "-c", f"cat > /workspace/srv.py <<'EOF'\n{SERVER}EOF\n"
                                            "head -c 10000000 /dev/urandom > /workspace/blob; "
                                            "python3 /workspace/srv.py > /dev/null 2>&1 < /dev/null & "
                                            "sleep 1"])
            t = time.monotonic()
            f = d.json("POST", f"/api/v1/sandboxes/{sid}/fork", {"count": 10})
            t_f = time.monotonic() - t
            answering = 0
            for c in f["forks"]:
                _, r = exec_(d, c["sandbox_id"], c["generation"],
                             ["python3", "-c", "import urllib.request as u; "
                              "print(u.urlopen('http://127.0.0.1:8000', timeout=3).read())"]) \
                    if f["memory"] else (0, {"stdout": ""})
                answering += "up" in r["stdout"]
                d.request("DELETE", f"/api/v1/sandboxes/{c['sandbox_id']}")
            print(f"fork into 10 {k:6s}: {t_f:6.2f} s ({t_f / 10 * 1000:.0f} ms a copy), "
                  f"memory {f['memory']}, files {f['files']}, copies whose server answers "
                  f"{answering}/10")
            d.request("DELETE", f"/api/v1/sandboxes/{sid}")
    finally:
        for d in ds.values():
            d.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
