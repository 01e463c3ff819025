"""The warm pool (SANDBOX_WARM_POOL_SIZE, service/warm.c): sandboxes prepared
before their create. A create takes one: its uid, its directories and its
running session become the new sandbox's, and the pool is refilled behind
it. And favordynmods (SANDBOX_CGROUP_FAVOR_DYNMODS): the host's cgroup2
superblock gets it at startup."""

import os
import uuid

from sandloom_client import Sandbox
from test_sessions import uid_processes, wait_for


def pool(client):
    r = client.get("/api/v1/sandboxes/diagnostics/runtime")
    assert r.status == 200, r
    return r.body["warm_pool"]


def init_pids(uid):
    """Host pids of the sandloom-init processes running as uid."""
    return [pid for pid, cmd in uid_processes(uid) if "--session" in cmd.split()]


def warm_uids(client):
    r = client.get("/api/v1/admin/sandboxes", params={"status": "WARM", "limit": 100})
    assert r.status == 200, r
    return {item["sandbox_uid"]: item["sandbox_id"] for item in r.body["sandboxes"]}


def test_favordynmods_is_on_for_the_hosts_cgroup2(client):
    caps = client.get("/healthz").body["worker"]["capabilities"]["resource_control"]
    with open("/proc/self/mounts") as f:
        cgroup2 = [line.split() for line in f if line.split()[2] == "cgroup2"]
    if not cgroup2:
        assert caps["favordynmods"] is False and "no cgroup2" in caps["favordynmods_note"], caps
        return
    assert caps["favordynmods"] is True, caps
    assert "favordynmods" in cgroup2[0][3].split(","), cgroup2[0]


def test_a_create_takes_a_prepared_sandbox_and_the_pool_refills(daemon_factory):
    d = daemon_factory({"SANDBOX_WARM_POOL_SIZE": "2"})
    c = d.client()
    assert wait_for(lambda: pool(c)["ready"] == 2, 30), pool(c)
    before = pool(c)
    assert before["target"] == 2 and before["made_total"] == 2, before
    warm = warm_uids(c)
    assert len(warm) == 2 and all(i.startswith(".warm-") for i in warm.values()), warm
    # A WARM route's id is not one a client can resolve, connect or run in.
    some = Sandbox(c, next(iter(warm.values())), "scope")
    r = some.resolve()
    assert r.status == 400 and "reserved" in r.body["detail"]["message"], r
    for r in (some.connect(generation=1), some.exec(["true"], generation=1)):
        assert r.status == 409, r

    sb = Sandbox(c, "pooled-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200
    assert sb.uid in warm, (sb.uid, warm)
    inits = init_pids(sb.uid)
    assert len(inits) == 1, inits  # the prepared session, running before the create
    assert sb.connect().status == 200
    # The directory the session was made on is the sandbox's now: the file
    # API and the sandbox see the same files.
    assert sb.write("/workspace/from-api.txt", "api\n").status == 200
    r = sb.exec(["sh", "-c", "cat /workspace/from-api.txt; echo sandbox > /workspace/from-sb.txt;"
                             " id -u; stat -c %u /workspace /home/user"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    lines = r.body["stdout"].split()
    assert lines[0] == "api" and lines[2:] == ["0", "0"], r.body  # the uid is root inside
    assert sb.read_bytes("/workspace/from-sb.txt") == b"sandbox\n"
    # The first command ran in the prepared session: the same init.
    assert init_pids(sb.uid) == inits, (init_pids(sb.uid), inits)
    # Prepared at the lowest priority, the sandbox runs at the normal one.
    r = sb.exec(["sh", "-c", "cut -d' ' -f19 /proc/self/stat /proc/1/stat"])
    assert r.body["stdout"].split() == ["0", "0"], r.body
    st = os.stat(os.path.join(d.sandbox_root, sb.id, "workspace"))
    assert st.st_uid == sb.uid
    assert not os.path.exists(os.path.join(d.sandbox_root, warm[sb.uid]))

    # The pool makes another behind it.
    assert wait_for(lambda: pool(c)["ready"] == 2, 30), pool(c)
    after = pool(c)
    assert after["taken_total"] == 1 and after["made_total"] == 3, after
    assert sb.uid not in warm_uids(c)

    # A second pooled sandbox has a uid of its own and sees only its files.
    other = Sandbox(c, "pooled-" + uuid.uuid4().hex[:8], "scope")
    assert other.resolve().status == 200 and other.connect().status == 200
    assert other.uid != sb.uid
    r = other.exec(["sh", "-c", "ls /workspace; cat /proc/1/status | grep ^Uid"])
    assert r.body["status"] == "SUCCEEDED" and "from-sb.txt" not in r.body["stdout"], r

    # Released, the sandbox's session ends as any does.
    assert sb.release().status == 200
    assert wait_for(lambda: not init_pids(sb.uid), 5), init_pids(sb.uid)


def test_prepared_sandboxes_of_an_earlier_run_are_taken_up(daemon_factory):
    d = daemon_factory({"SANDBOX_WARM_POOL_SIZE": "1"})
    c = d.client()
    assert wait_for(lambda: pool(c)["ready"] == 1, 30), pool(c)
    first = warm_uids(c)
    d.stop()
    d.spawn().wait_healthy()
    c = d.client()
    assert wait_for(lambda: pool(c)["ready"] == 1, 30), pool(c)
    # The same WARM route, prepared again: no uid drawn for it.
    assert warm_uids(c) == first
    assert pool(c)["made_total"] == 1
    sb = Sandbox(c, "after-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.uid in first
    assert sb.connect().status == 200
    assert sb.exec(["true"]).body["status"] == "SUCCEEDED"


def test_a_pool_that_cannot_prepare_draws_no_uid_after_uid(daemon_factory):
    # Disk pressure: no sandbox can be prepared. The pool says so and
    # reserves nothing (each failure once drew a uid for good).
    d = daemon_factory({"SANDBOX_WARM_POOL_SIZE": "2", "SANDBOX_MIN_FREE_BYTES": str(1 << 60)})
    c = d.client()
    assert wait_for(lambda: pool(c)["failures_total"] >= 1, 10), pool(c)
    assert pool(c)["ready"] == 0
    assert warm_uids(c) == {}
