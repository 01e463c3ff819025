"""Hardening issue, fault 4: a full or read-only filesystem under the
database degrades the service to refusals, never to a crash.

With the state directory on a small btrfs, one sandbox filling it made
sandloomd die in the middle of a command without a log line: SIGBUS, from
SQLite's memory-mapped WAL index, whose pages a copy-on-write filesystem
cannot back once it is full. The index is now created without
copy-on-write. Run on btrfs, ext4 and tmpfs, each made here on a loop
device (tmpfs: a size-limited mount), with the database and the sandboxes
on it:
  * a sandbox fills the filesystem; the daemon stays up, /healthz answers
    (degraded), further calls answer (a record or a 503), nothing crashes;
  * space freed: /healthz is ok again and commands run, without a restart;
  * the database's files made read-only (immutable, on ext4: a filesystem
    cannot be remounted read-only under open writers): refusals (503),
    /healthz degraded; writable again: back by itself.
"""
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from fs_helpers import wait_until
from sandloom_client import Sandbox

MiB = 1024 * 1024


@pytest.fixture(params=["btrfs", "ext4", "tmpfs"])
def small_fs(request):
    kind = request.param
    work = Path(tempfile.mkdtemp(prefix=f"sandloom-{kind}-"))
    os.chmod(work, 0o711)
    mnt = work / "mnt"
    mnt.mkdir()
    img = work / "fs.img"
    if kind == "tmpfs":
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m,mode=0711", "tmpfs", str(mnt)],
                       check=True)
    else:
        mkfs = shutil.which(f"mkfs.{kind}")
        if not mkfs:
            pytest.fail(f"mkfs.{kind} is missing (scripts/install-deps.sh installs it)",
                        pytrace=False)
        with open(img, "wb") as f:
            f.truncate(192 * MiB)
        subprocess.run([mkfs, "-q", *(["-F"] if kind == "ext4" else []), str(img)],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True)
    os.chmod(mnt, 0o711)
    try:
        yield kind, mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(work, ignore_errors=True)


def healthz(d):
    return d.client().get("/healthz").body


def test_a_full_or_read_only_state_filesystem_degrades_without_a_crash(daemon_factory, small_fs):
    kind, mnt = small_fs
    state = mnt / "state"
    state.mkdir(mode=0o711)
    d = daemon_factory({"SANDBOX_DATABASE_URL": f"sqlite:///{state}/sandloom.db",
                        "SANDBOX_LOCAL_ROOT": str(state / "sandboxes"),
                        "SANDBOX_MIN_FREE_BYTES": str(MiB),
                        "SANDBOX_DISK_HIGH_WATERMARK_PERCENT": "99",
                        "SANDBOX_DATABASE_LOCK_TIMEOUT_SECONDS": "1",
                        "SANDBOX_HEARTBEAT_INTERVAL_SECONDS": "1",
                        "SANDBOX_HEARTBEAT_TTL_SECONDS": "30"})
    sb = Sandbox(d.client(), f"fill-{uuid.uuid4().hex[:8]}", "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200

    # Fill it from inside, with output to record, several times over.
    answers = []
    for i in range(4):
        r = sb.exec(["sh", "-c", f"head -c 300M /dev/urandom > /workspace/fill{i} 2>/dev/null; "
                                 "sync; seq 1 20000"], exec_scope=f"fill-{i}", timeout=120)
        answers.append(r.status)
        assert d.proc.poll() is None, f"sandloomd died ({d.proc.returncode}):\n{d.stderr()[-2000:]}"
    assert set(answers) <= {200, 503}, answers
    hz = healthz(d)
    assert hz["status"] == "degraded", hz
    assert "fatal" not in d.stderr()

    # Space back: no restart needed.
    for f in (state / "sandboxes" / sb.id / "workspace").glob("fill*"):
        f.unlink()
    subprocess.run(["sync"], check=False)
    assert wait_until(lambda: healthz(d)["status"] == "ok", 15), healthz(d)
    r = sb.exec(["echo", "back"], exec_scope="after")
    assert r.status == 200 and r.body["stdout"] == "back\n", r

    # Read-only under the daemon: a filesystem cannot be remounted read-only
    # while the daemon holds the database open for writing, so the
    # database and its WAL are made immutable, which ext4 enforces on open
    # descriptors too (btrfs does not, tmpfs has no such flag): refusals,
    # then back by itself.
    if kind == "ext4":
        files = [p for p in state.glob("sandloom.db*") if not p.name.endswith("-shm")]
        subprocess.run(["chattr", "+i", *map(str, files)], check=True)
        try:
            r = sb.exec(["true"], exec_scope="readonly")
            assert r.status == 503 and r.body["detail"]["code"] == "SANDBOX_METADATA_UNAVAILABLE", r
            assert wait_until(lambda: healthz(d)["db"]["writable"] is False, 5), healthz(d)["db"]
            assert d.proc.poll() is None
        finally:
            subprocess.run(["chattr", "-i", *map(str, files)], check=True)
        assert wait_until(lambda: healthz(d)["status"] == "ok", 15), healthz(d)
    r = sb.exec(["echo", "rw"], exec_scope="readwrite")
    assert r.status == 200 and r.body["stdout"] == "rw\n", r
