"""Fork (ours, issue 18): POST /api/v1/sandboxes/{id}/fork makes new
sandboxes from one, each with its own route (generation 1), uid and a copy
of the source's files; the copies then diverge. Under gVisor a running
source's processes are copied too (tests/e2e/test_gvisor.py); a source
that runs nothing, as here, is forked by its files on every backend."""
import uuid

from sandloom_client import Sandbox, assert_error
from test_sessions import ready, wait_for


def sh(sb, script):
    r = sb.exec(["sh", "-c", script])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    return r.body["stdout"]


def fork(sb, **body):
    return sb.c.post(f"{sb.path}/fork", json=body)


def copy_of(client, record):
    sb = Sandbox(client, record["sandbox_id"], record["sandbox_id"])
    sb.generation, sb.uid = record["generation"], record["sandbox_uid"]
    return sb


def test_fork_copies_the_files_into_new_sandboxes_that_diverge(daemon, client):
    src = ready(client, "fk")
    sh(src, "mkdir -p /workspace/src && echo source > /workspace/src/who && "
            "echo rc > /home/sandbox/.rc && ln -s src/who /workspace/link && "
            "chmod 750 /workspace/src")
    names = [f"fkc-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    r = fork(src, count=2, sandbox_ids=names)
    assert r.status == 200, r
    b = r.body
    assert b["sandbox_id"] == src.id and b["memory"] is False, b
    assert b["files"] in ("reflink", "copy"), b
    assert [f["sandbox_id"] for f in b["forks"]] == names, b
    uids = {f["sandbox_uid"] for f in b["forks"]}
    assert len(uids) == 2 and src.uid not in uids, b
    copies = [copy_of(client, f) for f in b["forks"]]
    for i, c in enumerate(copies):
        assert c.generation == 1 and c.route().body["status"] == "READY"
        assert sh(c, "cat /workspace/src/who /home/sandbox/.rc; readlink /workspace/link; "
                     "stat -c %a /workspace/src") == "source\nrc\nsrc/who\n750\n"
        # Its files are its own uid's on the host.
        who = daemon.sandbox_root / c.id / "workspace" / "src" / "who"
        assert who.stat().st_uid == c.uid
        sh(c, f"echo copy{i} > /workspace/src/who")
    # Each copy diverges on its own; the source is untouched.
    assert [sh(c, "cat /workspace/src/who") for c in copies] == ["copy0\n", "copy1\n"]
    assert sh(src, "cat /workspace/src/who") == "source\n"
    # Default names, one copy.
    r = fork(src)
    assert r.status == 200 and len(r.body["forks"]) == 1, r
    assert r.body["forks"][0]["sandbox_id"].startswith(src.id + "-fork-"), r
    copies.append(copy_of(client, r.body["forks"][0]))
    for c in copies + [src]:
        assert c.release().status == 200


def test_fork_refusals_lose_nothing(client):
    src = ready(client, "fk")
    assert_error(fork(src, count=0), 422, "SANDBOX_INVALID_REQUEST")
    assert_error(fork(src, count=17), 422, "SANDBOX_INVALID_REQUEST")
    assert_error(fork(src, count=2, sandbox_ids=["fka-1"]), 422, "SANDBOX_INVALID_REQUEST")
    assert_error(fork(src, sandbox_ids=["ok-name", "ok-name"]), 422, "SANDBOX_INVALID_REQUEST")
    assert_error(fork(src, sandbox_ids=["a/b"]), 422, "SANDBOX_INVALID_REQUEST")
    assert_error(client.post(f"/api/v1/sandboxes/nope-{uuid.uuid4().hex[:6]}/fork", json={}),
                 404, "SANDBOX_NOT_FOUND")
    # A name that exists: nothing is made, not even the copies before it.
    other = ready(client, "fk")
    first = f"fkn-{uuid.uuid4().hex[:8]}"
    r = fork(src, sandbox_ids=[first, other.id])
    assert_error(r, 409, "SANDBOX_FORK_TARGET_EXISTS")
    r = client.get(f"/api/v1/sandboxes/{first}")
    assert r.status == 404 or r.body["status"] == "RELEASED", r
    # Busy while a command runs.
    assert src.exec(["sleep", "3"], exec_id="fk-busy", background=True).status == 200
    assert_error(fork(src), 409, "SANDBOX_FORK_BUSY")
    assert wait_for(lambda: src.route().body["status"] == "READY", 15)
    for sb in (src, other):
        assert sb.release().status == 200
    assert_error(fork(src), 409, "STALE_SANDBOX_ROUTE")
