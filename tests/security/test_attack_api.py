"""Attacks on the service's own API from inside a sandbox (host network mode,
the default, where a sandbox reaches the daemon's port on 127.0.0.1).

Hardening issue, attack 16: token guessing ran at 2,000-3,400 tries/s from
inside a sandbox, unlogged. Now failures are counted per peer, a peer that
keeps failing gets its 401s late, the operator sees a bounded number of log
lines (never the token), and a client with the right token is never slowed.
"""
import re
import secrets
import threading
import time

from sec_helpers import probe

GUESS_SECONDS = 4
GUESS_THREADS = 4


def test_token_guessing_from_a_sandbox_is_slowed_and_logged(daemon_factory, make_sandbox):
    # The default throttle (the harness lifts it for the other suites).
    daemon = daemon_factory(unset=("SANDBOX_AUTH_FAILURES_PER_MINUTE",))
    sb = make_sandbox(daemon)
    marker = "guess-" + secrets.token_hex(8)
    log_before = daemon.stderr()
    host = daemon.client()
    host_latencies = []
    stop = threading.Event()

    def legit():
        while not stop.is_set():
            t0 = time.monotonic()
            r = host.get("/healthz")
            host_latencies.append((time.monotonic() - t0, r.status))
            time.sleep(0.2)

    watcher = threading.Thread(target=legit, daemon=True)
    watcher.start()
    try:
        R, _ = probe(sb, r'''
            import http.client, threading, time
            port, marker, seconds, nthreads = P["port"], P["marker"], P["seconds"], P["threads"]
            counts, other = [0] * nthreads, []
            def guess(i):
                end = time.monotonic() + seconds
                n = 0
                while time.monotonic() < end:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=seconds + 5)
                    try:
                        c.request("GET", "/api/v1/admin/overview",
                                  headers={"Authorization": f"Bearer {marker}-{i}-{n}"})
                        status = c.getresponse().status
                        if status == 401:
                            counts[i] += 1
                        else:
                            other.append(status)
                    except OSError as e:
                        other.append(type(e).__name__)
                    finally:
                        c.close()
                    n += 1
            ts = [threading.Thread(target=guess, args=(i,)) for i in range(nthreads)]
            t0 = time.monotonic()
            for t in ts: t.start()
            for t in ts: t.join()
            R["elapsed"] = time.monotonic() - t0
            R["answered"] = sum(counts)
            R["other"] = other[:20]
            ''', {"port": daemon.port, "marker": marker, "seconds": GUESS_SECONDS,
                  "threads": GUESS_THREADS}, timeout_seconds=60)
    finally:
        stop.set()
        watcher.join(5)
    rate = R["answered"] / R["elapsed"]
    print(f"\ntoken guessing from a sandbox: {R['answered']} answers in {R['elapsed']:.1f} s ({rate:.1f}/s)")
    # 10 free failures a minute, then one answer per second per connection.
    bound = 10 + GUESS_THREADS * (GUESS_SECONDS + 2)
    assert R["answered"] <= bound, \
        f"{R['answered']} guesses answered in {R['elapsed']:.1f} s ({rate:.0f}/s): not slowed"
    assert R["answered"] >= 10, R  # the first ones are answered at once
    assert not R["other"], R
    # The right token from the same address (the host's clients) was never slowed.
    assert host_latencies and all(s == 200 for _, s in host_latencies), host_latencies
    assert max(t for t, _ in host_latencies) < 1.0, host_latencies
    # Logged, at a bounded rate, without any of the tokens tried.
    time.sleep(0.2)
    log = daemon.stderr()[len(log_before):]
    lines = [l for l in log.splitlines() if "failed authentication" in l]
    assert 1 <= len(lines) <= GUESS_SECONDS // 10 + 2, lines
    assert re.search(r"from 127\.0\.0\.1", lines[0]), lines
    assert marker not in log, "a guessed token reached the log"
