"""Hardening issue, fault 7: a refusal happens before the record exists.

Under load 0.05% of executions came back as FAILED records with stderr
"RuntimeError: SANDBOX_SHARED_WORKSPACE_LOCKED": admitted by the database
(the previous command's record said it had finished), then refused by the
sandbox's lock, which that command still held for a moment. Such an
exec_id could never be used again. The locks are now taken right after
admission, with a short wait for exactly that moment, and a conflict that
outlasts it withdraws the admission and answers 409.
"""
import fcntl
import os
import threading
import uuid

from sandloom_client import Sandbox, assert_error


def ready(d, prefix):
    sb = Sandbox(d.client(), f"{prefix}-{uuid.uuid4().hex[:10]}", "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    return sb


def test_a_busy_lock_is_a_409_and_the_exec_id_stays_usable(daemon_factory):
    d = daemon_factory()
    sb = ready(d, "locked")
    assert sb.exec(["true"]).status == 200  # the lock files exist now
    # Someone holds the sandbox's workspace lock (as a long file call does).
    path = d.sandbox_root / sb.id / ".exec-locks" / "global.lock"
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        exec_id = "x-" + uuid.uuid4().hex
        r = sb.exec(["echo", "hi"], exec_id=exec_id)  # unscoped: needs it exclusively
        assert_error(r, 409, "SANDBOX_SHARED_WORKSPACE_LOCKED")
        assert_error(sb.c.get(f"{sb.path}/exec/{exec_id}",
                              params={"generation": sb.generation}), 404, "EXEC_NOT_FOUND")
        route = sb.route().body
        assert route["status"] == "READY", route
    finally:
        os.close(fd)
    r = sb.exec(["echo", "hi"], exec_id=exec_id)
    assert r.status == 200 and r.body["status"] == "SUCCEEDED" and r.body["stdout"] == "hi\n", r


def test_back_to_back_commands_in_one_scope_never_burn_an_id(daemon_factory):
    d = daemon_factory()
    sb = ready(d, "race")
    outcomes, bad = {}, []
    lock = threading.Lock()

    def worker(n):
        for i in range(40):
            r = sb.exec(["true"], exec_id=f"race-{n}-{i}-{uuid.uuid4().hex[:6]}",
                        exec_scope="shared")
            key = r.body["status"] if r.status == 200 else r.body["detail"]["code"]
            with lock:
                outcomes[key] = outcomes.get(key, 0) + 1
                if r.status == 200 and r.body["status"] != "SUCCEEDED":
                    bad.append(r.body)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not bad, f"commands recorded FAILED instead of refused: {bad[:3]} ({outcomes})"
    assert outcomes.get("SUCCEEDED", 0) > 0, outcomes
    assert set(outcomes) <= {"SUCCEEDED", "SANDBOX_EXEC_SCOPE_BUSY",
                             "SANDBOX_SHARED_WORKSPACE_LOCKED"}, outcomes
