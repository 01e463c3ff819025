"""Generation fencing and route lookups: API.md §2.2, §3.5–§3.8, §3.14."""

import os
import signal
import threading
import time
import uuid

from sandloom_client import API, Sandbox, assert_error


def file_calls(sb, generation):
    """Every file route with the given generation."""
    return {
        "write": sb.write("/workspace/f.txt", b"x", generation=generation),
        "read": sb.read("/workspace/f.txt", generation=generation),
        "list": sb.list("/workspace", generation=generation),
        "mkdir": sb.mkdir("/workspace/d", generation=generation),
        "delete": sb.rm("/workspace/f.txt", generation=generation),
        "move": sb.move("/workspace/f.txt", "/workspace/g.txt", generation=generation),
    }


def test_stale_generation_is_refused(ready_sandbox):
    sb = ready_sandbox
    assert sb.generation == 1
    assert sb.write("/workspace/f.txt", b"keep").status == 200

    assert_error(sb.exec(["true"], generation=2), 409, "STALE_SANDBOX_ROUTE")
    for name, r in file_calls(sb, 2).items():
        assert r.status == 409, f"{name}: {r!r}"
        assert_error(r, 409, "STALE_SANDBOX_ROUTE")
    assert_error(sb.connect(generation=2), 409, "STALE_SANDBOX_ROUTE")
    # Nothing happened: the file is intact and no d/ or g.txt appeared.
    assert sb.read_bytes("/workspace/f.txt") == b"keep"
    names = [e["name"] for e in sb.list("/workspace").body["entries"]]
    assert names == ["f.txt"], names


def test_old_generation_after_release_and_reresolve(ready_sandbox):
    sb = ready_sandbox
    assert sb.release().status == 200
    # Released route, its current generation (2): still stale.
    assert_error(sb.exec(["true"], generation=2), 409, "STALE_SANDBOX_ROUTE")
    assert_error(sb.read("/workspace/f.txt", generation=2), 409, "STALE_SANDBOX_ROUTE")
    assert_error(sb.connect(generation=2), 409, "STALE_SANDBOX_ROUTE")

    r = sb.resolve()
    assert r.status == 200 and r.body["generation"] == 3, r
    assert sb.connect().status == 200
    assert_error(sb.exec(["true"], generation=1), 409, "STALE_SANDBOX_ROUTE")
    for name, r in file_calls(sb, 1).items():
        assert r.status == 409, f"{name}: {r!r}"
        assert_error(r, 409, "STALE_SANDBOX_ROUTE")
    r = sb.exec(["true"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r


def test_file_call_before_connect_is_stale_generation(new_sandbox):
    sb = new_sandbox()
    assert sb.resolve().status == 200
    assert_error(sb.read("/workspace/x"), 409, "STALE_SANDBOX_GENERATION")
    assert_error(sb.write("/workspace/x", b"1"), 409, "STALE_SANDBOX_GENERATION")


def test_scope_mismatch(new_sandbox):
    sb = new_sandbox()
    assert sb.resolve().status == 200
    other = Sandbox(sb.c, sb.id, "another-scope-" + uuid.uuid4().hex[:8])
    assert_error(other.resolve(), 409, "SANDBOX_SCOPE_MISMATCH")
    # The route is unchanged.
    r = sb.route()
    assert r.status == 200 and r.body["workspace_scope_id"] == sb.scope
    assert r.body["generation"] == 1


def test_profile_unavailable(new_sandbox):
    sb = new_sandbox()
    assert_error(sb.resolve(profile="gpu-large"), 503, "SANDBOX_PROFILE_UNAVAILABLE")
    assert_error(sb.route(), 404, "SANDBOX_NOT_FOUND")  # nothing was created
    r = sb.resolve(profile="coding-default")
    assert r.status == 200 and r.body["generation"] == 1, r


def test_unknown_sandbox(client):
    sid = "nosuch-" + uuid.uuid4().hex
    assert_error(client.get(f"{API}/{sid}"), 404, "SANDBOX_NOT_FOUND")
    assert_error(client.get(f"{API}/{sid}/audit"), 404, "SANDBOX_NOT_FOUND")
    assert_error(client.post(f"{API}/{sid}", json={"generation": 1}), 409, "STALE_SANDBOX_ROUTE")
    sb = Sandbox(client, sid, "scope")
    assert_error(sb.exec(["true"], generation=1), 409, "STALE_SANDBOX_ROUTE")
    assert_error(sb.read("/workspace/x", generation=1), 409, "STALE_SANDBOX_ROUTE")
    r = client.delete(f"{API}/{sid}")
    assert r.status == 200 and r.body == {"status": "RELEASED"}, r
    assert_error(client.get(f"{API}/{sid}"), 404, "SANDBOX_NOT_FOUND")  # DELETE created nothing


def test_release_ignores_generation_query(ready_sandbox):
    sb = ready_sandbox
    r = sb.c.delete(sb.path, params={"generation": 99})
    assert r.status == 200 and r.body == {"status": "RELEASED"}, r
    r = sb.route()
    assert r.body["status"] == "RELEASED" and r.body["generation"] == 2, r


def test_reserved_sandbox_ids_never_reach_the_disk(daemon, client):
    """.trash and .staging are service directories under the workspace root
    (RUNTIME.md §9): refused at resolve, or at connect at the latest."""
    # Dot-names under the workspace root are the service's own (.trash,
    # .staging, .probe-*): this build refuses every one of them.
    for sid in (".trash", ".staging", "...", ".hidden"):
        sb = Sandbox(client, sid, "scope-" + uuid.uuid4().hex[:6])
        r = sb.resolve()
        if r.status == 200:
            r = sb.connect()
        assert_error(r, 400, "SANDBOX_INVALID_ARGUMENT", "sandbox id uses a reserved name")
        p = daemon.sandbox_root / sid
        assert not (p / "workspace").exists(), f"a sandbox tree was created in {p}"


def test_concurrent_resolves(client):
    """Racing resolves of one new id agree on one route; different ids get
    different uids (API.md §3.5 step 2)."""
    sid = "race-" + uuid.uuid4().hex[:10]
    answers = []

    def go(target, i):
        answers.append((target, client.post(f"{API}/resolve", json={
            "sandbox_id": target, "workspace_scope_id": "race-scope"})))

    threads = [threading.Thread(target=go, args=(sid, i)) for i in range(8)]
    others = [f"race-{uuid.uuid4().hex[:10]}" for _ in range(12)]
    threads += [threading.Thread(target=go, args=(o, 0)) for o in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(answers) == 20
    for _, r in answers:
        assert r.status == 200, r
    same = [r.body for target, r in answers if target == sid]
    assert all(b == same[0] for b in same), f"racing resolves disagree: {same}"
    assert same[0]["generation"] == 1
    uids = {r.body["sandbox_uid"] for target, r in answers if target != sid}
    uids.add(same[0]["sandbox_uid"])
    assert len(uids) == 13, "every sandbox id gets its own uid"
    for target in {sid, *others}:
        client.delete(f"{API}/{target}")


def test_daemon_crash_mid_exec_then_restart(daemon_factory):
    """kill -9 while a command runs; restart on the same state and port (the
    same worker id, a new epoch): the old generation is refused with 409
    STALE_SANDBOX_ROUTE, release succeeds although the route was left
    RUNNING, and the id can be resolved again (generation moves on)."""
    d1 = daemon_factory()
    sb = Sandbox(d1.client(), "crash-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    gen = sb.generation
    def doomed_exec():
        try:
            sb.exec(["sleep", "30"], timeout=60)
        except OSError:
            pass  # the daemon dies under it: the connection drops

    t = threading.Thread(target=doomed_exec)
    t.start()
    deadline = time.monotonic() + 10
    while sb.route().body["status"] != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sb.route().body["status"] == "RUNNING"
    os.killpg(d1.proc.pid, signal.SIGKILL)
    d1.proc.wait(10)
    t.join(30)

    d2 = daemon_factory(state_dir=d1.state, token=d1.token, port=d1.port)
    sb2 = Sandbox(d2.client(), sb.id, "scope")
    sb2.generation = gen
    # The old epoch is gone: stale for every sandbox-scoped call.
    assert_error(sb2.exec(["true"]), 409, "STALE_SANDBOX_ROUTE")
    assert sb2.route().body["status"] == "RUNNING"
    # The running execution of the dead worker was marked lost at startup.
    rows = d1.sql("SELECT status FROM agent_sandbox_exec WHERE sandbox_id = ?", (sb.id,))
    assert rows == [("WORKER_LOST",)], rows
    r = sb2.release()
    assert r.status == 200 and r.body == {"status": "RELEASED"}, r
    route = sb2.route().body
    assert route["status"] == "RELEASED" and route["generation"] == gen + 1, route
    r = sb2.resolve()
    assert r.status == 200 and r.body["generation"] == gen + 2, r
    assert sb2.connect().status == 200
    r = sb2.exec(["sh", "-c", "ls -A /workspace | wc -l"])
    assert r.status == 200 and r.body["stdout"].strip() == "0", r


def test_restart_reassigns_with_history(daemon_factory):
    """A worker restart (same id, new epoch) makes resolve reassign the
    route: generation + 1, status ASSIGNED, a WORKER_REASSIGNED history entry
    by system:route-reassign; a changed profile hash reassigns with
    PROFILE_UPGRADE (API.md §3.5 steps 6 and 8)."""
    d1 = daemon_factory()
    sb = Sandbox(d1.client(), "re-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    gen = sb.generation
    d1.stop()

    d2 = daemon_factory(state_dir=d1.state, token=d1.token, port=d1.port)
    sb2 = Sandbox(d2.client(), sb.id, "scope")
    r = sb2.resolve()
    assert r.status == 200, r
    assert r.body["generation"] == gen + 1 and r.body["status"] == "ASSIGNED", r
    audit = d2.client().get(f"{API}/{sb.id}/audit").body
    last = audit["history"][-1]
    assert last["release_reason"] == "WORKER_REASSIGNED", audit
    assert last["released_by"] == "system:route-reassign", audit
    assert last["generation"] == gen, audit
    assert audit["lifecycle_count"] == 2, audit
    assert sb2.connect().status == 200
    d2.stop()

    d3 = daemon_factory({"SANDBOX_PROFILE_HASH": "bubblewrap-0.11.2-generic-v13"},
                        state_dir=d1.state, token=d1.token, port=d1.port)
    sb3 = Sandbox(d3.client(), sb.id, "scope")
    r = sb3.resolve()
    assert r.status == 200 and r.body["generation"] == gen + 2, r
    route = d3.client().get(f"{API}/{sb.id}").body
    assert route["profile_hash"].startswith("bubblewrap-0.11.2-generic-v13-"), route
    assert route["lifecycle_history"][-1]["release_reason"] == "PROFILE_UPGRADE", route
