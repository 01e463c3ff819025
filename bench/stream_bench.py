#!/usr/bin/env python3
"""Streamed output (GET/POST …/exec … stream) against its baselines, in one
run, on a throwaway sandloomd (free loopback port, fresh state directory,
SQLite, a uid range of its own; stopped and removed on the way out).

  1. time to first byte: POST exec {"stream": true} of `echo hi` until the
     first stdout event has arrived, beside the same command's synchronous
     answer (POST exec, whole response), alternating, N each: medians and
     the ratio.
  2. throughput: `yes | head -c SIZE` streamed to curl (a C client reading
     as fast as it can), its payload bytes counted from the events, beside
     the same bytes through a local pipe on the host (`yes | head -c SIZE |
     wc -c`) and the command run in the sandbox into its own pipe (`… | wc
     -c`, synchronous): MiB/s, the ratio to the host pipe (goal >= 50%), and
     what was delivered (the end event's stdout_skipped: a reader that
     falls behind pauses the command instead, so it should be 0); then the
     raw form (?format=raw: one stream's bytes, no events), timed from the
     byte on its stdin that starts the command once the reader is attached.
  3. 1000 open streams: STREAMS streams (on sleeping background commands,
     PER_SANDBOX per sandbox) opened by raw sockets; the daemon's VmRSS and
     thread count before and after: KiB per stream (goal <= 64 KiB) and
     threads added (goal: none per stream).

    bench/stream_bench.py [BUILD_DIR] [--runs N] [--mib SIZE] [--streams S]
                          (root; BUILD_DIR: build)

Prints figures; asserts nothing about time. Exit 1 when a request failed.
"""
import argparse
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

PER_SANDBOX = 50


def start_daemon(build, state, streams):
    return Daemon(build, state, 240000, SANDBOX_NETWORK_MODE="isolated",
                  SANDBOX_MAX_STREAMS=str(max(2048, streams + 16)),
                  SANDBOX_MAX_STREAMS_PER_SANDBOX=str(PER_SANDBOX))


def exec_body(gen, argv, **extra):
    return {"exec_id": "b-" + uuid.uuid4().hex, "generation": gen, "argv": argv, **extra}


def ttfb(d, sid, gen, runs):
    stream, sync = [], []
    path = f"/api/v1/sandboxes/{sid}/exec"
    for _ in range(runs):
        # The synchronous answer, whole.
        t0 = time.perf_counter()
        d.json("POST", path, exec_body(gen, ["echo", "hi"]))
        sync.append(time.perf_counter() - t0)
        # The stream, until its first stdout event is in.
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
        t0 = time.perf_counter()
        c.request("POST", path, body=json.dumps(exec_body(gen, ["echo", "hi"], stream=True)),
                  headers={"Authorization": "Bearer " + TOKEN,
                           "Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            sys.exit(f"stream_bench: stream answered {r.status}")
        while True:
            line = r.readline()
            if not line:
                sys.exit("stream_bench: the stream ended before its output")
            if line.startswith(b"event: stdout"):
                r.readline()  # its data line
                stream.append(time.perf_counter() - t0)
                break
        r.read()
        c.close()
    return statistics.median(stream), statistics.median(sync)


def host_pipe(size):
    t0 = time.perf_counter()
    out = subprocess.run(["sh", "-c", f"yes | head -c {size} | wc -c"], capture_output=True,
                         check=True).stdout
    assert int(out) == size
    return time.perf_counter() - t0


def streamed(d, sid, gen, size):
    body = json.dumps(exec_body(gen, ["sh", "-c", f"yes | head -c {size}"], stream=True,
                                timeout_seconds=600))
    t0 = time.perf_counter()
    # curl reads as fast as it can; tail keeps the end event, which says
    # how many bytes the command produced and how many this stream skipped.
    curl = subprocess.Popen(["curl", "-sN", "-X", "POST", "-H", "Authorization: Bearer " + TOKEN,
                             "-H", "Content-Type: application/json", "--data-binary", body,
                             f"http://127.0.0.1:{d.port}/api/v1/sandboxes/{sid}/exec"],
                            stdout=subprocess.PIPE)
    last = subprocess.run(["tail", "-c", "4096"], stdin=curl.stdout, capture_output=True).stdout
    curl.wait()
    elapsed = time.perf_counter() - t0
    end = json.loads(last.split(b"event: end\ndata: ")[-1].split(b"\n")[0])
    if end["stdout_bytes"] != size:
        sys.exit(f"stream_bench: the end event counts {end['stdout_bytes']} bytes, not {size}")
    return elapsed, end["stdout_bytes"], end["stdout_skipped"]


def raw_streamed(d, sid, gen, size):
    """The raw form (?format=raw) of the same output, read by curl. The
    command waits for a byte on its stdin, sent once the reader is attached
    (and holds it back), so the time runs from that byte to curl's last."""
    eid = "raw-" + uuid.uuid4().hex[:8]
    d.json("POST", f"/api/v1/sandboxes/{sid}/exec",
           exec_body(gen, ["sh", "-c", f"head -c 1 >/dev/null; yes | head -c {size}"],
                     background=True, stdin=True, timeout_seconds=600) | {"exec_id": eid})
    curl = subprocess.Popen(["curl", "-s", "-o", "/dev/null", "-w", "%{size_download}",
                             "-H", "Authorization: Bearer " + TOKEN,
                             f"http://127.0.0.1:{d.port}/api/v1/sandboxes/{sid}/exec/{eid}/stream"
                             f"?generation={gen}&format=raw"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)  # attached by then
    t0 = time.perf_counter()
    d.json("POST", f"/api/v1/sandboxes/{sid}/exec/{eid}/stdin?generation={gen}",
           {"generation": gen, "data": "x", "close": True})
    got = curl.communicate()[0]
    elapsed = time.perf_counter() - t0
    if int(got) != size:
        sys.exit(f"stream_bench: the raw stream carried {got} bytes, not {size}")
    return elapsed


def sandbox_pipe(d, sid, gen, size):
    t0 = time.perf_counter()
    r = d.json("POST", f"/api/v1/sandboxes/{sid}/exec",
               exec_body(gen, ["sh", "-c", f"yes | head -c {size} | wc -c"], timeout_seconds=600))
    assert int(r["stdout"]) == size, r
    return time.perf_counter() - t0


def open_streams(d, n):
    """n streams by raw sockets (headers read, body left unread)."""
    sandboxes = []
    for _ in range((n + PER_SANDBOX - 1) // PER_SANDBOX):
        sid, gen = d.sandbox()
        eid = "sleep-" + uuid.uuid4().hex[:8]
        d.json("POST", f"/api/v1/sandboxes/{sid}/exec",
               exec_body(gen, ["sleep", "600"], background=True) | {"exec_id": eid})
        sandboxes.append((sid, gen, eid))
    time.sleep(0.5)
    rss0, threads0 = d.rss_kib(), d.threads()
    socks = []
    for i in range(n):
        sid, gen, eid = sandboxes[i // PER_SANDBOX]
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall((f"GET /api/v1/sandboxes/{sid}/exec/{eid}/stream?generation={gen} HTTP/1.1\r\n"
                   f"Host: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n").encode())
        socks.append(s)
    for s in socks:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                sys.exit("stream_bench: a stream closed at once")
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            sys.exit(f"stream_bench: a stream was refused: {head[:200]!r}")
    time.sleep(1)
    rss1, threads1 = d.rss_kib(), d.threads()
    for s in socks:
        s.close()
    for sid, gen, eid in sandboxes:
        d.json("POST", f"/api/v1/sandboxes/{sid}/exec/{eid}/cancel?generation={gen}")
    return rss0, rss1, threads0, threads1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--streams", type=int, default=1000)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("stream_bench: needs root (the daemon runs sandboxes)")
    if not shutil.which("curl"):
        sys.exit("stream_bench: needs curl")
    state = tempfile.mkdtemp(prefix="sandloom-streambench-")
    os.chmod(state, 0o711)
    d = start_daemon(os.path.abspath(a.build), state, a.streams)
    try:
        sid, gen = d.sandbox()
        d.json("POST", f"/api/v1/sandboxes/{sid}/exec", exec_body(gen, ["true"]))  # warm
        s_med, y_med = ttfb(d, sid, gen, a.runs)
        print(f"time to first byte (echo hi, median of {a.runs}): stream {s_med * 1000:.2f} ms,"
              f" synchronous answer {y_med * 1000:.2f} ms, ratio {s_med / y_med:.2f}")
        size = a.mib << 20
        host = [host_pipe(size) for _ in range(3)]
        inbox = [sandbox_pipe(d, sid, gen, size) for _ in range(3)]
        runs = [streamed(d, sid, gen, size) for _ in range(3)]
        raws = [raw_streamed(d, sid, gen, size) for _ in range(3)]
        mib = size / (1 << 20)
        h = mib / statistics.median(host)
        b = mib / statistics.median(inbox)
        el = statistics.median(r[0] for r in runs)
        delivered = statistics.median(r[1] - r[2] for r in runs)
        s = mib / el
        print(f"throughput (yes | head -c {a.mib}M, median of 3): host pipe {h:.0f} MiB/s, "
              f"sandbox pipe {b:.0f} MiB/s, streamed {s:.0f} MiB/s "
              f"({s / h * 100:.0f}% of the host pipe, goal >= 50%); "
              f"delivered {delivered / size * 100:.1f}% of the bytes "
              f"(gaps {[r[2] for r in runs]})")
        rw = mib / statistics.median(raws)
        print(f"raw form (?format=raw, the bytes as they are, median of 3): {rw:.0f} MiB/s "
              f"({rw / h * 100:.0f}% of the host pipe, goal >= 50%), every byte delivered")
        rss0, rss1, t0, t1 = open_streams(d, a.streams)
        per = (rss1 - rss0) / a.streams
        print(f"{a.streams} open streams: daemon RSS {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB "
              f"({per:.1f} KiB per stream, goal <= 64), threads {t0} -> {t1}")
    finally:
        d.stop()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
