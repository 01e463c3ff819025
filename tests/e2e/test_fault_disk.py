"""Hardening issue: what a full disk does to the service.

Fault 6: ENOSPC/EDQUOT from the file API answers 507 SANDBOX_DISK_FULL with
a sentence of its own (was 400 "workspace operation could not be
completed"), a write that cannot fit is refused before it fills the disk,
and the disk-pressure guard reads a fresh statvfs before it admits a new
sandbox (a new sandbox was created on a 100% full filesystem from the
heartbeat's cached reading).
"""
import base64
import threading
import time
import uuid

import pytest

from fs_helpers import tmpfs
from sandloom_client import Sandbox, assert_error

MiB = 1024 * 1024


@pytest.fixture
def small_disk():
    with tmpfs("32m", "sandloom-fulldisk-") as mnt:
        yield mnt


def ready(c, prefix):
    sb = Sandbox(c, f"{prefix}-{uuid.uuid4().hex[:10]}", "scope")
    r = sb.resolve()
    assert r.status == 200, r
    return sb, sb.connect()


def test_a_full_disk_is_a_clear_answer(daemon_factory, small_disk):
    # A heartbeat far apart, so only a fresh reading can see the disk fill.
    d = daemon_factory({"SANDBOX_LOCAL_ROOT": str(small_disk / "sandboxes"),
                        "SANDBOX_HEARTBEAT_INTERVAL_SECONDS": "60",
                        "SANDBOX_HEARTBEAT_TTL_SECONDS": "180",
                        "SANDBOX_MIN_FREE_BYTES": str(MiB)})
    c = d.client()
    sb, r = ready(c, "full")
    assert r.status == 200, r
    small = sb.write("/workspace/small.txt", b"x" * 1000)
    assert small.status == 200, small

    # The sandbox fills its filesystem to the last block.
    r = sb.exec(["sh", "-c", "cat /dev/zero > /workspace/fill 2>/dev/null; "
                             "df -k /workspace | tail -1"])
    assert r.status == 200, r

    # A write through the API: its own code and sentence, nothing half-written.
    r = sb.write("/workspace/big.bin", b"y" * (2 * MiB))
    assert_error(r, 507, "SANDBOX_DISK_FULL", "no space left on the sandbox's disk")
    assert not (small_disk / "sandboxes" / sb.id / "workspace" / "big.bin").exists()
    names = [e["name"] for e in sb.list("/workspace").body["entries"]]
    assert not any(n.startswith(".sandbox-write-") for n in names), names
    # Even a small one that the disk cannot take.
    r = sb.write("/workspace/small.txt", b"z" * 64 * 1024)
    assert_error(r, 507, "SANDBOX_DISK_FULL")
    assert sb.read("/workspace/small.txt").body["content_base64"] == \
        base64.b64encode(b"x" * 1000).decode()

    # A new sandbox is refused at once, from a fresh reading.
    other = Sandbox(c, "full-new-" + uuid.uuid4().hex[:8], "scope")
    assert other.resolve().status == 200
    assert_error(other.connect(), 503, "SANDBOX_WORKER_DISK_PRESSURE")
    assert not (small_disk / "sandboxes" / other.id).exists()

    # Space freed: both work again, without a restart.
    assert sb.rm("/workspace/fill").status == 200
    assert sb.write("/workspace/big.bin", b"y" * (2 * MiB)).status == 200
    assert other.connect().status == 200


@pytest.fixture
def db_disk():
    with tmpfs("8m", "sandloom-dbdisk-") as mnt:
        yield mnt


def fill(path):
    """Fill the filesystem of `path` to its last block (returns the filler)."""
    filler = path / ".filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_a_failed_completion_write_is_retried_and_unwedges_the_sandbox(daemon_factory, db_disk):
    """Fault 2: the database write at a command's end fails (its disk is
    full). The client's answer is what ran; the record is written again every
    second, and once space is back the record lands and the sandbox takes
    commands and suspends again, without a restart (before: RUNNING forever,
    every later exec and suspend busy)."""
    d = daemon_factory({"SANDBOX_DATABASE_URL": f"sqlite:///{db_disk}/sandloom.db"})
    c = d.client()
    sb, r = ready(c, "dbfull")
    assert r.status == 200, r
    # The disk fills while the command runs (it signals its start with a
    # file); its 256 KiB of output then need pages the database cannot get.
    def fill_once_started():
        if wait_file(d, sb, "go"):
            fill(db_disk)

    filler = threading.Thread(target=fill_once_started)
    filler.start()
    exec_id = "x-" + uuid.uuid4().hex
    r = sb.exec(["sh", "-c", "touch /workspace/go; sleep 1.5; head -c 262144 /dev/zero | tr '\\0' a"],
                exec_id=exec_id, exec_scope="one", timeout=60)
    filler.join(30)
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    assert len(r.body["stdout"]) == 262144
    # The stored record could not be written: it still says RUNNING.
    poll = sb.c.get(f"{sb.path}/exec/{exec_id}", params={"generation": sb.generation})
    assert poll.status == 200 and poll.body["status"] == "RUNNING", poll
    hz = c.get("/healthz").body
    assert hz["status"] == "degraded" and hz["db"]["results_waiting"] == 1, hz["db"]

    # Space back: within a few seconds the record lands and the route is free.
    (db_disk / ".filler").unlink()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        poll = sb.c.get(f"{sb.path}/exec/{exec_id}", params={"generation": sb.generation})
        if poll.status == 200 and poll.body["status"] == "SUCCEEDED":
            break
        time.sleep(0.2)
    assert poll.body["status"] == "SUCCEEDED" and len(poll.body["stdout"]) == 262144, poll
    r = sb.exec(["echo", "again"], exec_scope="one")
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = sb.c.post(f"{sb.path}/suspend", json={"generation": sb.generation})
    assert r.status == 200, r
    assert c.get("/healthz").body["db"]["results_waiting"] == 0


def wait_file(d, sb, name, timeout=10):
    path = d.sandbox_root / sb.id / "workspace" / name
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.01)
    return False
