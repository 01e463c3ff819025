#!/usr/bin/env python3
"""What the workspace image (SANDBOX_WORKSPACE_IMAGE_BYTES) costs a start:
the time from exec to `GET /health` answering `ok`, on a fresh state
directory (the image is reserved and made) and on a restart of the same
one, beside the same two starts without an image (the baseline), in one
run. Prints medians; never asserts on time.

    bench/startup_bench.py [BUILD_DIR] [RUNS]     (root; BUILD_DIR: build, RUNS: 5)
"""
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

IMAGE_BYTES = 1 << 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_once(daemon, state, port, image):
    """Seconds from exec to a healthy answer; the daemon is stopped after."""
    env = dict(os.environ, SANDBOX_HOST="127.0.0.1", SANDBOX_PORT=str(port),
               SANDBOX_ADVERTISE_HOST="127.0.0.1", SANDBOX_LOCAL_ROOT=f"{state}/sandboxes",
               SANDBOX_DATABASE_URL=f"sqlite:///{state}/db.sqlite",
               SANDBOX_STARTUP_LOG_PATH=f"{state}/startup.log",
               SANDBOX_INTERNAL_TOKEN="bench-0123456789abcdef0123456789abcdef",
               SANDBOX_UID_START="230000", SANDBOX_UID_END="230999",
               SANDBOX_WORKSPACE_IMAGE_BYTES=str(IMAGE_BYTES if image else 0))
    t0 = time.monotonic()
    p = subprocess.Popen([daemon], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if p.poll() is not None:
                sys.exit(f"sandloomd exited with {p.returncode} (state in {state})")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.read() == b"ok":
                        return time.monotonic() - t0
            except OSError:
                time.sleep(0.002)
    finally:
        p.terminate()
        p.wait(timeout=30)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    daemon = os.path.abspath(os.path.join(build, "sandloomd"))
    if os.geteuid() != 0:
        sys.exit("startup_bench: needs root (the daemon runs sandboxes, the image is a mount)")
    port = free_port()
    rows = {}
    # Alternate the two configurations so noise hits both alike.
    for i in range(runs):
        for image in (False, True):
            state = tempfile.mkdtemp(prefix="sandloom-startbench-")
            os.chmod(state, 0o711)
            try:
                first = start_once(daemon, state, port, image)
                again = start_once(daemon, state, port, image)
            finally:
                shutil.rmtree(state, ignore_errors=True)
            rows.setdefault(image, ([], []))
            rows[image][0].append(first)
            rows[image][1].append(again)
    base_first = statistics.median(rows[False][0])
    base_again = statistics.median(rows[False][1])
    print(f"start to /health, medians of {runs} (image: {IMAGE_BYTES >> 20} MiB)")
    print(f"{'':28} {'first start':>12} {'restart':>10}")
    for image, label in ((False, "plain directories (base)"), (True, "workspace image")):
        f, a = statistics.median(rows[image][0]), statistics.median(rows[image][1])
        print(f"{label:28} {f * 1000:9.0f} ms {a * 1000:7.0f} ms   "
              f"({f / base_first:.2f}x, {a / base_again:.2f}x)")


if __name__ == "__main__":
    main()
