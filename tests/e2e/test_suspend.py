"""Suspend and resume on one worker (API.md §3.15, §3.16, §7): a suspended
sandbox has no process and no capacity slot but keeps every file; commands
and file calls are refused with 409 SANDBOX_SUSPENDED; resume (or resolve)
wakes it in place; both calls are idempotent."""
import time
import uuid

from sandloom_client import Sandbox, assert_error
from test_sessions import sandbox_processes, wait_for

API = "/api/v1/sandboxes"


def new_ready(client, prefix="sus"):
    sb = Sandbox(client, f"{prefix}-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200
    return sb


def suspend(sb, generation=None):
    return sb.c.post(f"{sb.path}/suspend",
                     json={"generation": sb.generation if generation is None else generation})


def resume(sb):
    return sb.c.post(f"{sb.path}/resume")


def running_sessions(client):
    return client.get("/healthz").body["worker"]["running_sessions"]


def test_suspend_refusals(client):
    sb = new_ready(client)
    # ASSIGNED (not connected yet) is not ready to suspend.
    assert_error(suspend(sb), 409, "SANDBOX_NOT_READY")
    assert sb.connect().status == 200
    assert_error(suspend(sb, sb.generation + 1), 409, "STALE_SANDBOX_GENERATION")
    r = client.post(f"{API}/nope-{uuid.uuid4().hex[:6]}/suspend", json={"generation": 1})
    assert_error(r, 404, "SANDBOX_NOT_FOUND")
    assert_error(client.post(f"{API}/nope-{uuid.uuid4().hex[:6]}/resume"), 404,
                 "SANDBOX_NOT_FOUND")
    assert suspend(sb, 0).status == 422
    # Busy while a command runs; the route stays READY/RUNNING and usable.
    r = sb.exec(["sleep", "2"], exec_id="sus-busy", background=True)
    assert r.status == 200
    assert_error(suspend(sb), 409, "SANDBOX_SUSPEND_BUSY")
    assert wait_for(lambda: sb.route().body["status"] == "READY", 10)
    assert suspend(sb).status == 200
    assert sb.release().status == 200


def test_suspend_stops_everything_keeps_files_and_resume_wakes(client):
    sb = new_ready(client)
    assert sb.connect().status == 200
    r = sb.exec(["sh", "-c", "echo kept > /workspace/f; setsid sleep 300 > /dev/null 2>&1 &"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    assert wait_for(lambda: sandbox_processes(sb.uid), 5)
    before = running_sessions(client)
    r = suspend(sb)
    assert r.status == 200, r
    b = r.body
    assert b == {"sandbox_id": sb.id, "generation": sb.generation, "status": "SUSPENDED",
                 "snapshot": False, "memory": False, "suspended": True,
                 "retained_until": b["retained_until"]}
    assert b["retained_until"] and b["retained_until"].endswith("Z")
    # No process, no slot.
    assert wait_for(lambda: not sandbox_processes(sb.uid), 5), sandbox_processes(sb.uid)
    assert running_sessions(client) == before - 1
    assert sb.route().body["status"] == "SUSPENDED"
    # Idempotent: nothing changes, suspended false.
    again = suspend(sb)
    assert again.status == 200 and again.body["suspended"] is False
    assert again.body["retained_until"] == b["retained_until"]
    # Commands and file calls are refused while dormant.
    assert_error(sb.exec(["true"]), 409, "SANDBOX_SUSPENDED")
    assert_error(sb.read("/workspace/f"), 409, "SANDBOX_SUSPENDED")
    # Resume wakes it in place, same generation (same worker, same epoch).
    r = resume(sb)
    assert r.status == 200, r
    assert r.body["resumed"] is True and r.body["workspace_source"] == "reused", r
    assert r.body["status"] == "READY" and r.body["generation"] == sb.generation, r
    assert set(r.body) == {"sandbox_id", "worker_id", "worker_epoch", "worker_endpoint",
                           "generation", "sandbox_uid", "status", "storage_mode", "resumed",
                           "workspace_source", "memory"}
    assert r.body["memory"] is False, r
    r = resume(sb)
    assert r.status == 200 and r.body["resumed"] is False and \
        r.body["workspace_source"] == "active", r
    r = sb.exec(["cat", "/workspace/f"])
    assert r.status == 200 and r.body["stdout"] == "kept\n", r
    assert sb.release().status == 200


def test_resolve_wakes_a_suspended_sandbox(client):
    sb = new_ready(client)
    assert sb.connect().status == 200
    assert sb.write("/workspace/w.txt", "w").status == 200
    assert suspend(sb).status == 200
    r = sb.resolve()
    assert r.status == 200 and r.body["status"] == "READY", r
    assert set(r.body) == {"sandbox_id", "worker_id", "worker_epoch", "worker_endpoint",
                           "generation", "sandbox_uid", "status", "storage_mode"}
    assert sb.read("/workspace/w.txt").status == 200
    # A suspended sandbox can be released directly.
    assert suspend(sb).status == 200
    assert sb.release().status == 200
    assert_error(resume(sb), 409, "STALE_SANDBOX_ROUTE")


def test_resume_after_a_restart_moves_the_generation_and_keeps_the_files(daemon_factory):
    d1 = daemon_factory()
    sb = new_ready(d1.client())
    assert sb.connect().status == 200
    assert sb.write("/workspace/survivor.txt", "still here").status == 200
    assert suspend(sb).status == 200
    gen = sb.generation
    d1.stop()
    d2 = daemon_factory(state_dir=d1.state, token=d1.token, port=d1.port)
    sb2 = Sandbox(d2.client(), sb.id, "scope")
    r = sb2.c.post(f"{sb2.path}/resume")
    assert r.status == 200, r
    assert r.body["generation"] == gen + 1 and r.body["workspace_source"] == "reused", r
    sb2.generation = r.body["generation"]
    r = sb2.exec(["cat", "/workspace/survivor.txt"])
    assert r.status == 200 and r.body["stdout"] == "still here", r
    assert sb2.release().status == 200


def test_the_native_backend_refuses_to_keep_memory(daemon_factory):
    """Suspend with memory needs a backend that can checkpoint (gVisor):
    the native one says so, and the sandbox stays awake and usable."""
    client = daemon_factory({"SANDBOX_EXECUTION_BACKEND": "native"}).client()
    sb = new_ready(client)
    assert sb.connect().status == 200
    assert client.get("/healthz").body["worker"]["capabilities"]["execution_backend"][
        "name"] == "native"
    r = sb.exec(["sh", "-c", "setsid sleep 300 > /dev/null 2>&1 &"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = sb.c.post(f"{sb.path}/suspend", json={"generation": sb.generation, "memory": True})
    assert_error(r, 501, "SANDBOX_MEMORY_SUSPEND_UNSUPPORTED")
    assert "gvisor" in r.body["detail"]["message"], r.body
    assert sb.route().body["status"] == "READY"
    assert sb.exec(["true"]).body["status"] == "SUCCEEDED"
    assert_error(sb.c.post(f"{sb.path}/suspend",
                           json={"generation": sb.generation, "memory": "yes"}), 422,
                 "SANDBOX_INVALID_REQUEST")
    assert sb.release().status == 200
