"""File watching (ours): GET …/files/watch streams what changes under a
workspace directory (create, modify, delete, move), recursive or not, with
the file API's path rules, bounded per sandbox and worker."""
import time

import pytest

from conftest import Daemon
from sse_client import Events

PER_SANDBOX = 2


@pytest.fixture(scope="module")
def daemon(sandloomd_binary):
    d = Daemon(sandloomd_binary, {"SANDBOX_MAX_WATCHES_PER_SANDBOX": str(PER_SANDBOX),
                                  "SANDBOX_STREAM_KEEPALIVE_SECONDS": "1"}).spawn()
    try:
        d.wait_healthy()
        yield d
    finally:
        d.cleanup()


def watch(daemon, sb, path="/workspace", recursive=None):
    q = f"path={path}&generation={sb.generation}"
    if recursive is not None:
        q += f"&recursive={recursive}"
    return Events(daemon, "GET", f"{sb.path}/files/watch?{q}")


def fs_events(ev, until, timeout=15):
    """fs events (type, path, from) until `until` (a path) has been seen."""
    got = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        e = ev.next()
        assert e is not None, got
        name, eid, data = e
        if name == "end":
            got.append(("end", data["reason"], None))
            break
        if name == "fs":
            got.append((data["type"], data["path"], data.get("from")))
            if data["path"] == until:
                break
    return got


def test_a_build_is_seen_as_it_happens(daemon, ready_sandbox):
    sb = ready_sandbox
    ev = watch(daemon, sb, recursive="true")
    assert ev.status == 200
    script = ("mkdir -p /workspace/build/obj && echo a > /workspace/build/obj/a.o && "
              "echo int > /workspace/main.c && echo more >> /workspace/main.c && "
              "mv /workspace/build/obj/a.o /workspace/build/app && rm /workspace/main.c && "
              "touch /workspace/done")
    r = sb.exec(["sh", "-c", script])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    got = fs_events(ev, "/workspace/done")
    ev.close()
    kinds = [(t, p, f) for t, p, f in got]
    assert ("create", "/workspace/build", None) in kinds
    assert ("create", "/workspace/build/obj", None) in kinds or \
        ("create", "/workspace/build/obj/a.o", None) in kinds
    assert ("create", "/workspace/main.c", None) in kinds
    assert ("modify", "/workspace/main.c", None) in kinds
    assert ("move", "/workspace/build/app", "/workspace/build/obj/a.o") in kinds
    assert ("delete", "/workspace/main.c", None) in kinds
    # In the order they happened.
    order = [kinds.index(k) for k in [("create", "/workspace/main.c", None),
                                      ("delete", "/workspace/main.c", None),
                                      ("create", "/workspace/done", None)]]
    assert order == sorted(order)


def test_not_recursive_sees_only_its_own_entries_and_a_deleted_root_ends(daemon, ready_sandbox):
    sb = ready_sandbox
    assert sb.exec(["mkdir", "-p", "/workspace/top/sub"]).status == 200
    ev = watch(daemon, sb, "/workspace/top")
    assert ev.status == 200
    assert sb.exec(["sh", "-c", "touch /workspace/top/sub/deep; touch /workspace/top/here"]) \
        .status == 200
    got = fs_events(ev, "/workspace/top/here")
    assert ("create", "/workspace/top/sub/deep", None) not in got
    assert ("create", "/workspace/top/here", None) in got
    assert sb.exec(["rm", "-rf", "/workspace/top"]).status == 200
    got = fs_events(ev, None)
    assert got[-1] == ("end", "deleted", None), got
    assert ev.next() is None


def test_paths_follow_the_file_api_rules_and_no_symlink_is_followed(daemon, ready_sandbox):
    sb = ready_sandbox
    assert sb.exec(["sh", "-c", "ln -s /etc /workspace/etc-link; mkdir -p /workspace/real; "
                    "ln -s /workspace/real /workspace/real-link"]).status == 200
    for path in ("/workspace/etc-link", "/workspace/real-link", "/workspace/nope",
                 "/workspace/../etc", "/etc"):
        ev = watch(daemon, sb, path)
        assert ev.status in (400, 422), (path, ev.status)
        body = ev.error()
        assert body["detail"]["code"] in ("SANDBOX_INVALID_ARGUMENT", "SANDBOX_INVALID_REQUEST")
    ev = watch(daemon, sb, "/workspace", recursive="maybe")
    assert ev.status == 422
    # A recursive watch does not enter a symlinked directory either.
    ev = watch(daemon, sb, recursive="true")
    assert ev.status == 200
    assert sb.exec(["sh", "-c", "touch /workspace/real/x; touch /workspace/mark"]).status == 200
    got = fs_events(ev, "/workspace/mark")
    paths = [p for t, p, f in got]
    assert "/workspace/real/x" in paths
    assert not any(p.startswith("/workspace/etc-link/") for p in paths)
    ev.close()


def test_watches_are_bounded_and_a_silent_one_gets_keepalives(daemon, ready_sandbox):
    sb = ready_sandbox
    open_ = [watch(daemon, sb) for _ in range(PER_SANDBOX)]
    assert all(e.status == 200 for e in open_)
    over = watch(daemon, sb)
    assert over.status == 429 and over.error()["detail"]["code"] == "SANDBOX_WATCH_LIMIT"
    # Keepalives come while nothing changes (SANDBOX_STREAM_KEEPALIVE_SECONDS=1).
    open_[0].conn.sock.settimeout(5)
    line = open_[0].resp.readline()
    assert line.startswith(b": keepalive"), line
    for e in open_:
        e.close()
    deadline = time.time() + 5
    while True:
        again = watch(daemon, sb)
        if again.status == 200 or time.time() > deadline:
            break
        time.sleep(0.3)
    assert again.status == 200
    again.close()
