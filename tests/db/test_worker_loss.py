"""A sandbox of a lost worker comes back with its files on another worker
when it has a snapshot in the object store (FLEET.md §6, §7.2): suspended on
its owner (archived to S3), the owner killed, resumed through the survivor,
which restores it from the snapshot."""
import os
import signal
import uuid

from s3_server import s3  # noqa: F401  (the module-scoped S3 server fixture)
from e2e_harness import unique_id
from sandloom_client import Sandbox
from test_forwarding import owned_elsewhere
from test_registry_fleet import fleet_env, wait_for, workers_seen
from test_server_database import fresh_database


def test_a_suspended_sandbox_of_a_killed_worker_resumes_elsewhere_from_its_snapshot(
        daemon_factory, s3):
    _, url = fresh_database()
    ns = unique_id("ns")
    token = unique_id("fleet-token") + "-0123456789abcdef"
    env = dict(fleet_env(url, ns), SANDBOX_BLOBSTORE_ENDPOINT=s3,
               SANDBOX_BLOBSTORE_BUCKET="loss-" + uuid.uuid4().hex[:10],
               BLOBSTORE_ACCESS_KEY="S3RVER", BLOBSTORE_SECRET_KEY="S3RVER")
    ds = [daemon_factory(env, token=token) for _ in range(2)]
    ids = sorted(d.worker_id for d in ds)
    for d in ds:
        assert wait_for(lambda: workers_seen(d) == ids, 5), workers_seen(d)
    via, owner, other = owned_elsewhere(ds, "snap")
    assert via.write("/workspace/work.txt", "survives its worker").status == 200
    r = via.c.post(f"/api/v1/sandboxes/{via.id}/suspend", json={"generation": via.generation})
    assert r.status == 200 and r.body["status"] == "SUSPENDED" and r.body["snapshot"] is True, r
    os.kill(owner.proc.pid, signal.SIGKILL)
    owner.proc.wait(10)
    assert wait_for(lambda: workers_seen(other) == [other.worker_id], 10), workers_seen(other)
    r = via.c.post(f"/api/v1/sandboxes/{via.id}/resume")
    assert r.status == 200 and r.body["status"] == "READY", r
    assert r.body["workspace_source"] == "restored", r  # from the snapshot
    via.generation = r.body["generation"]
    assert via.route().body["worker_id"] == other.worker_id
    r = via.exec(["cat", "/workspace/work.txt"])
    assert r.status == 200 and r.body["stdout"] == "survives its worker", r
