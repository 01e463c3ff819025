"""Hardening issue, fault 5: database contention and failure are visible and
bounded.

With another process holding the database's write lock for 30 s, every
request (reads too) waited 28-30 s, file calls answered a misleading 409
and /healthz said ok. Now reads go through a connection of their own (in
WAL mode a reader never waits for a writer), a write waits at most
SANDBOX_DATABASE_LOCK_TIMEOUT_SECONDS and then answers 503
SANDBOX_METADATA_UNAVAILABLE, and /healthz says degraded (db.writable false)
until a write lands again, which it notices by itself.
"""
import subprocess
import sys
import time
import uuid

import pytest

from sandloom_client import Sandbox, assert_error

HOLD = 8


def timed(fn):
    t0 = time.monotonic()
    r = fn()
    return r, time.monotonic() - t0


# Another process holding the SQLite file's lock: SQLite's own failure.
pytestmark = pytest.mark.sqlite_file

def test_a_held_database_lock_slows_nothing_but_writes(daemon_factory):
    d = daemon_factory({"SANDBOX_DATABASE_LOCK_TIMEOUT_SECONDS": "2",
                        "SANDBOX_HEARTBEAT_INTERVAL_SECONDS": "1",
                        "SANDBOX_HEARTBEAT_TTL_SECONDS": "30"})
    c = d.client()
    sb = Sandbox(c, "dblock-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    assert sb.write("/workspace/a.txt", "hello").status == 200
    locker = subprocess.Popen([sys.executable, "-c", f"""
import sqlite3, sys, time
c = sqlite3.connect({str(d.db_path)!r}, isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep({HOLD})
c.execute("COMMIT")
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        t_locked = time.monotonic()
        r, took = timed(sb.route)
        assert r.status == 200 and took < 0.5, (r, took)
        r, took = timed(lambda: sb.read("/workspace/a.txt"))
        assert r.status == 200 and took < 0.5, (r, took)
        r, took = timed(lambda: sb.list("/workspace"))
        assert r.status == 200 and took < 0.5, (r, took)
        r, took = timed(lambda: c.get("/api/v1/admin/execs"))
        assert r.status == 200 and took < 0.5, (r, took)
        # A write: bounded, and a clear answer.
        r, took = timed(lambda: sb.exec(["true"]))
        assert_error(r, 503, "SANDBOX_METADATA_UNAVAILABLE")
        assert 1.5 < took < 4, took
        hz = c.get("/healthz").body
        assert hz["status"] == "degraded" and hz["db"]["writable"] is False, hz["db"]
        assert hz["db"]["error"] and "/" not in hz["db"]["error"], hz["db"]
        assert time.monotonic() - t_locked < HOLD, "the checks took longer than the lock"
    finally:
        locker.wait(HOLD + 10)
    # Recovers by itself (the heartbeat's write lands).
    deadline = time.monotonic() + 10
    hz = None
    while time.monotonic() < deadline:
        hz = c.get("/healthz").body
        if hz["status"] == "ok":
            break
        time.sleep(0.3)
    assert hz["status"] == "ok" and hz["db"]["writable"] is True, hz["db"]
    r = sb.exec(["echo", "back"])
    assert r.status == 200 and r.body["stdout"] == "back\n", r
