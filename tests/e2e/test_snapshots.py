"""Suspend snapshots through a real S3 server (FLEET.md §7.2, §7.3, §8.3):
a suspended sandbox is archived to the object store, resumed from it when
its local directory is gone, and under disk pressure the local copies of
suspended sandboxes that have a snapshot are dropped, oldest first, until
the disk is available again."""
import shutil
import time
import uuid

import pytest

from s3_server import s3  # noqa: F401  (the module-scoped S3 server fixture)
from fs_helpers import tmpfs
from sandloom_client import Sandbox, assert_error

MiB = 1024 * 1024


def store_env(endpoint):
    return {"SANDBOX_BLOBSTORE_ENDPOINT": endpoint,
            "SANDBOX_BLOBSTORE_BUCKET": "snap-" + uuid.uuid4().hex[:10],
            "BLOBSTORE_ACCESS_KEY": "S3RVER", "BLOBSTORE_SECRET_KEY": "S3RVER"}


def ready(client, prefix):
    sb = Sandbox(client, f"{prefix}-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    return sb


def sh(sb, script):
    r = sb.exec(["sh", "-c", script])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    return r.body


def suspend(sb):
    return sb.c.post(f"{sb.path}/suspend", json={"generation": sb.generation})


def wait_for(cond, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


def test_resume_restores_from_the_snapshot_when_the_directory_is_gone(s3, daemon_factory):
    d = daemon_factory(store_env(s3))
    sb = ready(d.client(), "snap")
    sh(sb, "mkdir -p /workspace/src /envs/tool && echo code > /workspace/src/main.py && "
           "echo cfg > /home/sandbox/.rc && echo bin > /envs/tool/x && chmod 700 /workspace/src")
    r = suspend(sb)
    assert r.status == 200 and r.body["snapshot"] is True, r
    root = d.sandbox_root / sb.id
    shutil.rmtree(root)  # the local copy is lost
    r = sb.c.post(f"{sb.path}/resume")
    assert r.status == 200, r
    assert r.body["workspace_source"] == "restored" and r.body["status"] == "READY", r
    out = sh(sb, "cat /workspace/src/main.py /home/sandbox/.rc /envs/tool/x; "
                 "echo more >> /workspace/src/main.py && echo WRITABLE")
    assert out["stdout"] == "code\ncfg\nbin\nWRITABLE\n", out
    # The files belong to the sandbox again.
    assert (root / "workspace" / "src").stat().st_uid == sb.uid
    # The snapshot served: a second loss can no longer be recovered.
    assert suspend(sb).status == 200
    assert sb.c.post(f"{sb.path}/resume").body["workspace_source"] == "reused"
    assert sb.release().status == 200


def test_always_without_an_object_store_refuses_to_suspend(daemon_factory):
    d = daemon_factory({"SANDBOX_SUSPEND_SNAPSHOT": "always"})
    sb = ready(d.client(), "always")
    assert_error(suspend(sb), 501, "SANDBOX_SNAPSHOT_UNAVAILABLE")
    assert sb.route().body["status"] == "READY"
    assert sb.exec(["true"]).body["status"] == "SUCCEEDED"


@pytest.fixture
def small_disk():
    with tmpfs("64m", "sandloom-smalldisk-") as mnt:
        yield mnt


def test_disk_pressure_drops_local_copies_oldest_first(s3, daemon_factory, small_disk):
    root = small_disk / "sandboxes"
    env = dict(store_env(s3), SANDBOX_LOCAL_ROOT=str(root),
               SANDBOX_MIN_FREE_BYTES=str(40 * MiB), SANDBOX_MAINTENANCE_INTERVAL_SECONDS="1")
    d = daemon_factory(env)
    c = d.client()
    boxes = []
    for i in range(3):
        sb = ready(c, f"press{i}")
        sh(sb, f"head -c {8 * MiB} /dev/urandom > /workspace/blob")
        assert suspend(sb).status == 200
        boxes.append(sb)
        time.sleep(1.1)  # distinct suspension times: oldest first
    # Fill the disk: 64 MiB - 24 MiB of sandboxes - 10 MiB leaves 30 MiB,
    # under the 40 MiB floor. Dropping the two oldest copies gets it back.
    (small_disk / ".filler").write_bytes(b"\0" * (10 * MiB))
    dirs = [root / sb.id for sb in boxes]
    assert wait_for(lambda: not dirs[0].exists() and not dirs[1].exists(), 15), \
        [p.exists() for p in dirs]
    assert dirs[2].exists(), "the newest copy was dropped although the disk was fine again"
    for sb in boxes:
        assert sb.route().body["status"] == "SUSPENDED"
    reaper = c.get("/healthz").body["worker"]["orphan_reaper"]
    assert reaper["dormant_evicted_total"] == 2, reaper
    # A dropped copy comes back from its snapshot.
    (small_disk / ".filler").unlink()
    r = boxes[0].c.post(f"{boxes[0].path}/resume")
    assert r.status == 200 and r.body["workspace_source"] == "restored", r
    assert sh(boxes[0], "wc -c < /workspace/blob")["stdout"].strip() == str(8 * MiB)
    for sb in boxes:
        sb.release()


def test_a_restart_forgets_no_suspended_copy(s3, daemon_factory, small_disk):
    """FLEET.md §7.3 (a): the suspended copies a worker holds are found again
    after a restart (from its SUSPENDED routes, a batch a pass), so disk
    pressure still drops the ones with a snapshot."""
    root = small_disk / "sandboxes"
    env = dict(store_env(s3), SANDBOX_LOCAL_ROOT=str(root),
               SANDBOX_MIN_FREE_BYTES=str(40 * MiB), SANDBOX_MAINTENANCE_INTERVAL_SECONDS="1")
    d = daemon_factory(env)
    sb = ready(d.client(), "forgot")
    sh(sb, f"head -c {8 * MiB} /dev/urandom > /workspace/blob")
    assert suspend(sb).status == 200
    d.stop()
    d2 = daemon_factory(env, state_dir=d.state, token=d.token, port=d.port)
    # Fill the disk under the new process: 64 - 8 - 20 leaves 36 MiB < 40.
    (small_disk / ".filler").write_bytes(b"\0" * (20 * MiB))
    assert wait_for(lambda: not (root / sb.id).exists(), 15), "the restarted worker forgot it"
    sb.c = d2.client()
    assert sb.route().body["status"] == "SUSPENDED"
    (small_disk / ".filler").unlink()
    r = sb.c.post(f"{sb.path}/resume")
    assert r.status == 200 and r.body["workspace_source"] == "restored", r
    sb.release()
