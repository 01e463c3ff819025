#!/usr/bin/env python3
"""The ports route and terminals against their baselines, in one run, on
throwaway sandloomds (free loopback port, fresh state directory, SQLite, a
uid range of their own; stopped and removed on the way out).

  1. port-forward overhead: a small HTTP server inside a sandbox (Python's
     http.server answering 2 bytes) asked N times through
     /api/v1/sandboxes/{id}/ports/{port}/ (one kept-alive client
     connection to the daemon, as a browser holds one), beside the same
     request straight to the server on the host's loopback, each on a new
     connection as the route makes one (host network mode, where the
     server listens on the host's loopback), alternating: medians, p95 and
     the ratio (goal <= 2x). Then the route in private mode (the server in
     the sandbox's own network namespace), beside the same host-mode
     direct baseline.
  2. terminal round trip: a keystroke's echo (`printf` of a byte, its echo
     back over the WebSocket), median of N, beside a synchronous exec of
     `true` on the same sandbox.

    bench/ports_bench.py [BUILD_DIR] [--runs N]   (root; BUILD_DIR: build)

Prints figures; asserts nothing about time. Exit 1 when a request failed.
"""
import argparse
import asyncio
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_daemon import TOKEN, Daemon  # noqa: E402

SERVER_PORT = 18931

SERVER = r'''
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def start_daemon(build, state, mode, uid):
    return Daemon(build, state, uid, uids=100, SANDBOX_NETWORK_MODE=mode)


def run_exec(d, sid, gen, argv):
    return d.json("POST", f"/api/v1/sandboxes/{sid}/exec",
                  {"exec_id": "b-" + uuid.uuid4().hex, "generation": gen, "argv": argv})


def start_server(d, sid, gen):
    d.json("PUT", f"/api/v1/sandboxes/{sid}/files",
           {"generation": gen, "path": "/workspace/srv.py",
            "content_base64": __import__("base64").b64encode(SERVER.encode()).decode()})
    run_exec(d, sid, gen, ["sh", "-c", f"nohup python3 /workspace/srv.py {SERVER_PORT} "
                                  f">/dev/null 2>&1 &"])
    path = f"/api/v1/sandboxes/{sid}/ports/{SERVER_PORT}/"
    for _ in range(200):
        if d.request("GET", path)[0] == 200:
            return path
        time.sleep(0.05)
    sys.exit("ports_bench: the server in the sandbox did not come up")


def via_route(d, conn, path):
    t0 = time.perf_counter()
    conn.request("GET", path, headers={"Authorization": "Bearer " + TOKEN})
    r = conn.getresponse()
    body = r.read()
    dt = time.perf_counter() - t0
    if r.status != 200 or body != b"ok":
        sys.exit(f"ports_bench: through the route: {r.status} {body[:200]!r}")
    return dt


def direct():
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", SERVER_PORT, timeout=30)
    c.request("GET", "/")
    r = c.getresponse()
    body = r.read()
    c.close()
    dt = time.perf_counter() - t0
    if r.status != 200 or body != b"ok":
        sys.exit(f"ports_bench: direct: {r.status}")
    return dt


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * q))]


async def keystrokes(d, sid, gen, runs):
    import websockets
    url = (f"ws://127.0.0.1:{d.port}/api/v1/sandboxes/{sid}/terminal?generation={gen}")
    out = []
    async with websockets.connect(url, extra_headers={"Authorization": "Bearer " + TOKEN},
                                  ping_interval=None) as ws:
        await ws.recv()  # ready
        await ws.send(b"stty -echo; echo armed\n")
        buf = b""
        while b"armed\r\n" not in buf:
            m = await ws.recv()
            buf += m if isinstance(m, bytes) else b""
        # cat echoes each byte back (raw mode: no line buffering).
        await ws.send(b"stty raw; cat\n")
        await asyncio.sleep(0.5)
        try:
            while True:
                await asyncio.wait_for(ws.recv(), 0.2)
        except asyncio.TimeoutError:
            pass
        for i in range(runs):
            ch = bytes([ord("a") + i % 26])
            t0 = time.perf_counter()
            await ws.send(ch)
            got = b""
            while ch not in got:
                m = await ws.recv()
                got += m if isinstance(m, bytes) else b""
            out.append(time.perf_counter() - t0)
        await ws.send(b"\x03")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--runs", type=int, default=300)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("ports_bench: needs root (the daemon runs sandboxes)")
    state = tempfile.mkdtemp(prefix="sandloom-portsbench-")
    os.chmod(state, 0o711)
    build = os.path.abspath(a.build)
    host = start_daemon(build, f"{state}/host", "host", 241000)
    try:
        sid, gen = host.sandbox()
        path = start_server(host, sid, gen)
        conn = http.client.HTTPConnection("127.0.0.1", host.port, timeout=30)
        route, base = [], []
        for _ in range(20):  # warm both
            via_route(host, conn, path)
            direct()
        for _ in range(a.runs):
            route.append(via_route(host, conn, path))
            base.append(direct())
        r50, b50 = statistics.median(route), statistics.median(base)
        print(f"port forward (GET of 2 bytes, host mode, {a.runs} each, alternating): "
              f"through the route p50 {r50 * 1000:.3f} ms p95 {pct(route, .95) * 1000:.3f} ms, "
              f"direct to the server p50 {b50 * 1000:.3f} ms p95 {pct(base, .95) * 1000:.3f} ms, "
              f"ratio {r50 / b50:.2f} (goal <= 2)")
        strokes = asyncio.run(keystrokes(host, sid, gen, min(a.runs, 200)))
        execs = []
        for _ in range(min(a.runs, 200)):
            t0 = time.perf_counter()
            run_exec(host, sid, gen, ["true"])
            execs.append(time.perf_counter() - t0)
        print(f"terminal keystroke echo (median of {len(strokes)}): "
              f"{statistics.median(strokes) * 1000:.3f} ms, beside a synchronous exec of true "
              f"{statistics.median(execs) * 1000:.3f} ms")
    finally:
        host.stop()
    priv = start_daemon(build, f"{state}/private", "private", 242000)
    try:
        sid, gen = priv.sandbox()
        path = start_server(priv, sid, gen)
        conn = http.client.HTTPConnection("127.0.0.1", priv.port, timeout=30)
        for _ in range(20):
            via_route(priv, conn, path)
        route = [via_route(priv, conn, path) for _ in range(a.runs)]
        r50 = statistics.median(route)
        print(f"port forward (private mode, through the sandbox's network namespace, "
              f"{a.runs}): p50 {r50 * 1000:.3f} ms p95 {pct(route, .95) * 1000:.3f} ms, "
              f"{r50 / b50:.2f}x the host-mode direct request above")
    finally:
        priv.stop()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
