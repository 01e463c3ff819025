"""Credential-bound tenancy (issue 14, item 2): two tenants on one worker,
on real sandboxes. A tenant's names live in its own namespace (stored as
"<tenant_id>~<name>"), so the same name is two sandboxes, another tenant's
sandbox answers exactly as one that does not exist, and nothing is created,
started or recorded by trying."""

import base64
import uuid

import pytest

from sandloom_client import API, assert_error

ADMIN = "/api/v1/admin/tenants"


def tenant_key(client):
    tid = "tn-" + uuid.uuid4().hex[:10]
    assert client.post(ADMIN, json={"tenant_id": tid}).status == 201
    r = client.post(f"{ADMIN}/{tid}/keys", json={"name": "test"})
    assert r.status == 201, r
    return tid, r.body["api_key"]


class As:
    """The API as one credential sees it."""

    def __init__(self, client, key):
        self.c, self.key = client, key

    def req(self, method, path, **kw):
        return self.c.request(method, path, token=self.key, **kw)

    def resolve(self, name, scope="s"):
        return self.req("POST", f"{API}/resolve",
                        json_body={"sandbox_id": name, "workspace_scope_id": scope})

    def ready(self, name):
        r = self.resolve(name)
        assert r.status == 200, r
        gen = r.body["generation"]
        c = self.req("POST", f"{API}/{name}", json_body={"generation": gen})
        assert c.status == 200, c
        return gen

    def exec(self, name, gen, argv, **extra):
        return self.req("POST", f"{API}/{name}/exec",
                        json_body={"exec_id": "x-" + uuid.uuid4().hex, "generation": gen,
                                   "argv": argv, **extra})


@pytest.fixture(scope="module")
def two(client):
    (ta, ka), (tb, kb) = tenant_key(client), tenant_key(client)
    return (ta, As(client, ka)), (tb, As(client, kb))


def test_the_same_name_is_two_sandboxes_one_per_tenant(client, daemon, two):
    (ta, a), (tb, b) = two
    name = "shared-" + uuid.uuid4().hex[:8]
    ga, gb = a.ready(name), b.ready(name)
    # Two sandboxes: two uids of their own.
    assert a.resolve(name).body["sandbox_uid"] != b.resolve(name).body["sandbox_uid"]
    r = a.exec(name, ga, ["sh", "-c", "echo mine > /workspace/who"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = b.exec(name, gb, ["sh", "-c", "cat /workspace/who 2>/dev/null || echo none"])
    assert r.status == 200 and r.body["stdout"] == "none\n", r.body
    # The tenant sees its own names, not their namespace ...
    for who, t in ((a, ta), (b, tb)):
        route = who.req("GET", f"{API}/{name}")
        assert route.status == 200, route
        assert route.body["sandbox_id"] == name and route.body["workspace_scope_id"] == "s"
        audit = who.req("GET", f"{API}/{name}/audit")
        assert audit.status == 200 and audit.body["sandbox_id"] == name, audit.body
        for doc in (route.body, audit.body):
            assert f"{t}~{name}" not in repr(doc), doc
    # ... the operator sees both, each under its tenant's namespace.
    for t in (ta, tb):
        r = client.get(f"{API}/{t}~{name}")
        assert r.status == 200 and r.body["workspace_scope_id"] == f"{t}~s", r
        assert (daemon.sandbox_root / f"{t}~{name}").is_dir()


def test_another_tenants_sandbox_is_the_same_answer_as_none(client, daemon, two):
    (ta, a), (tb, b) = two
    name = "private-" + uuid.uuid4().hex[:8]
    ga = a.ready(name)
    missing = "never-" + uuid.uuid4().hex[:8]
    # Every route B can name it through answers as for a name that does not exist.
    probes = [
        ("GET", "", None, None),
        ("GET", "/audit", None, None),
        ("POST", "/exec", {"exec_id": "x-probe", "generation": ga, "argv": ["touch", "/workspace/p"]}, None),
        ("GET", "/exec/x-probe", None, {"generation": ga}),
        ("POST", "/exec/x-probe/cancel", None, {"generation": ga}),
        ("PUT", "/files", {"generation": ga, "path": "/workspace/p",
                           "content_base64": base64.b64encode(b"x").decode()}, None),
        ("GET", "/files", None, {"path": "/workspace/who", "generation": ga}),
        ("GET", "/files/list", None, {"path": "/workspace", "generation": ga}),
        ("POST", "/files/mkdir", {"generation": ga, "path": "/workspace/d"}, None),
        ("POST", "/files/delete", {"generation": ga, "path": "/workspace/who"}, None),
        ("POST", "/files/move", {"generation": ga, "source": "/workspace/a",
                                 "destination": "/workspace/b"}, None),
        ("POST", "/suspend", {"generation": ga}, None),
        ("POST", "/resume", None, None),
        ("DELETE", "", None, None),
    ]
    for method, suffix, body, params in probes:
        kw = {}
        if body is not None:
            kw["json_body"] = body
        if params is not None:
            kw["params"] = params
        theirs = b.req(method, f"{API}/{name}{suffix}", **kw)
        nobodys = b.req(method, f"{API}/{missing}{suffix}", **kw)
        assert theirs.status == nobodys.status, (method, suffix, theirs, nobodys)
        if theirs.status >= 400:
            assert theirs.body["detail"] == nobodys.body["detail"], (suffix, theirs)
        else:  # a release of a name with no sandbox is already released
            assert theirs.body == nobodys.body == {"status": "RELEASED"}, (suffix, theirs)
        # B's own namespace was looked in: nothing of A's was touched or made.
        assert not (daemon.sandbox_root / f"{tb}~{name}").exists()
    # Naming A's stored id outright is no id a tenant can use.
    for spelling in (f"{ta}~{name}", f"{ta}%7E{name}"):
        r = b.req("GET", f"{API}/{spelling}")
        assert_error(r, 404, "SANDBOX_NOT_FOUND")
    assert_error(b.resolve(f"{ta}~{name}"), 422, "SANDBOX_INVALID_REQUEST")
    # A's sandbox is as it was: nothing written, no command recorded for B.
    r = a.exec(name, ga, ["sh", "-c", "ls -A /workspace"])
    assert r.status == 200 and r.body["stdout"] == "", r.body
    execs = client.get("/api/v1/admin/execs", params={"sandbox_id": f"{ta}~{name}"})
    assert execs.status == 200, execs
    assert "x-probe" not in repr(execs.body)
    assert client.get(f"{API}/{tb}~{name}").status == 404


def test_a_tenants_whole_lifecycle_through_its_key(two):
    (ta, a), _ = two
    name = "life-" + uuid.uuid4().hex[:8]
    gen = a.ready(name)
    w = a.req("PUT", f"{API}/{name}/files", json_body={
        "generation": gen, "path": "/workspace/f.txt",
        "content_base64": base64.b64encode(b"kept").decode()})
    assert w.status == 200, w
    r = a.req("GET", f"{API}/{name}/files/list", params={"path": "/workspace", "generation": gen})
    assert r.status == 200 and [e["name"] for e in r.body["entries"]] == ["f.txt"], r
    bg = a.exec(name, gen, ["sleep", "30"], background=True)
    assert bg.status == 200 and bg.body["status"] == "RUNNING", bg
    xid = bg.body["exec_id"]
    poll = a.req("GET", f"{API}/{name}/exec/{xid}", params={"generation": gen})
    assert poll.status == 200 and poll.body["status"] == "RUNNING", poll
    cancel = a.req("POST", f"{API}/{name}/exec/{xid}/cancel", params={"generation": gen})
    assert cancel.status == 200 and cancel.body["cancelled"] is True, cancel
    import time
    for _ in range(100):
        if a.req("GET", f"{API}/{name}/exec/{xid}", params={"generation": gen}).body["status"] \
                != "RUNNING":
            break
        time.sleep(0.1)
    s = a.req("POST", f"{API}/{name}/suspend", json_body={"generation": gen})
    assert s.status == 200 and s.body["sandbox_id"] == name and s.body["status"] == "SUSPENDED", s
    res = a.req("POST", f"{API}/{name}/resume")
    assert res.status == 200 and res.body["sandbox_id"] == name, res
    gen = res.body["generation"]
    r = a.req("GET", f"{API}/{name}/files", params={"path": "/workspace/f.txt", "generation": gen})
    assert r.status == 200 and base64.b64decode(r.body["content_base64"]) == b"kept", r
    rel = a.req("DELETE", f"{API}/{name}")
    assert rel.status == 200 and rel.body == {"status": "RELEASED"}, rel
    assert a.req("GET", f"{API}/{name}").body["status"] == "RELEASED"


def test_a_tenants_names_are_bounded_by_its_namespace(two):
    (ta, a), _ = two
    room = 128 - len(ta) - 1
    ok = a.resolve("n" * room)
    assert ok.status == 200 and ok.body["sandbox_id"] == "n" * room, ok
    assert a.req("GET", f"{API}/{'n' * room}").status == 200
    assert_error(a.resolve("n" * (room + 1)), 422, "SANDBOX_INVALID_REQUEST")
    assert_error(a.req("GET", f"{API}/{'n' * (room + 1)}"), 404, "SANDBOX_NOT_FOUND")
    assert a.req("DELETE", f"{API}/{'n' * room}").status == 200


def quota_tenant(client, quotas):
    tid = "tq-" + uuid.uuid4().hex[:10]
    assert client.post(ADMIN, json={"tenant_id": tid, "quotas": quotas}).status == 201
    key = client.post(f"{ADMIN}/{tid}/keys", json={"name": "q"}).body["api_key"]
    return tid, As(client, key)


def over(r, limit, value):
    assert r.status == 429, r
    d = r.body["detail"]
    assert d["code"] == "TENANT_QUOTA_EXCEEDED" and d["limit"] == limit and d["value"] == value, d
    assert limit in d["message"] and str(value) in d["message"], d


def test_the_sandboxes_quota(client, daemon):
    tid, t = quota_tenant(client, {"sandboxes": 2})
    assert t.resolve("q-one").status == 200 and t.resolve("q-two").status == 200
    over(t.resolve("q-three"), "sandboxes", 2)
    # Nothing was made of the refused one.
    assert_error(t.req("GET", f"{API}/q-three"), 404, "SANDBOX_NOT_FOUND")
    assert client.get(f"{API}/{tid}~q-three").status == 404
    # Resolving one that exists adds nothing; a released one no longer counts.
    assert t.resolve("q-one").status == 200
    assert t.req("DELETE", f"{API}/q-one").status == 200
    assert t.resolve("q-three").status == 200
    over(t.resolve("q-one"), "sandboxes", 2)  # released: resolving it again is a new one
    # The usage, as the tenant and the operator see it.
    me = t.req("GET", "/api/v1/tenant")
    assert me.status == 200 and me.body["usage"]["sandboxes"] == 2, me
    assert client.get(f"{ADMIN}/{tid}").body["usage"] == me.body["usage"]


def test_the_running_sessions_quota(client):
    tid, t = quota_tenant(client, {"running_sessions": 1})
    g1 = t.ready("rs-one")
    r = t.resolve("rs-two")
    assert r.status == 200, r
    over(t.req("POST", f"{API}/rs-two", json_body={"generation": r.body["generation"]}),
         "running_sessions", 1)
    # Connecting the live one again is no new session.
    assert t.req("POST", f"{API}/rs-one", json_body={"generation": g1}).status == 200
    s = t.req("POST", f"{API}/rs-one/suspend", json_body={"generation": g1})
    assert s.status == 200 and s.body["status"] == "SUSPENDED", s
    assert t.req("POST", f"{API}/rs-two", json_body={"generation": r.body["generation"]}).status \
        == 200
    over(t.req("POST", f"{API}/rs-one/resume"), "running_sessions", 1)


def test_the_commands_in_flight_quota_and_a_change_of_it(client):
    tid, t = quota_tenant(client, {"commands_in_flight": 1})
    gen = t.ready("cmd-one")
    bg = t.exec("cmd-one", gen, ["sleep", "30"], background=True, exec_scope="scope-bg")
    assert bg.status == 200 and bg.body["status"] == "RUNNING", bg
    refused = t.exec("cmd-one", gen, ["touch", "/workspace/never"], exec_scope="scope-fg")
    over(refused, "commands_in_flight", 1)
    # The refusal recorded nothing and ran nothing.
    execs = client.get("/api/v1/admin/execs", params={"sandbox_id": f"{tid}~cmd-one"})
    assert execs.body["total"] == 1 and len(execs.body["execs"]) == 1, execs.body
    # The operator raises the quota: the tenant sees it within a second.
    r = client.request("PATCH", f"{ADMIN}/{tid}", json_body={"quotas": {"commands_in_flight": 2}})
    assert r.status == 200, r
    import time
    deadline = time.monotonic() + 5
    while True:
        ok = t.exec("cmd-one", gen, ["true"], exec_scope="scope-fg")
        if ok.status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ok.status == 200 and ok.body["status"] == "SUCCEEDED", ok
    xid = bg.body["exec_id"]
    assert t.req("POST", f"{API}/cmd-one/exec/{xid}/cancel", params={"generation": gen}).status \
        == 200
    for _ in range(100):
        if t.req("GET", f"{API}/cmd-one/exec/{xid}", params={"generation": gen}).body["status"] \
                != "RUNNING":
            break
        time.sleep(0.1)
    r = t.exec("cmd-one", gen, ["sh", "-c", "ls /workspace"])
    assert r.status == 200 and "never" not in r.body["stdout"], r


def test_the_route_history_names_the_key_that_acted(client, daemon):
    # Two keys of one tenant: the history says which one created the
    # generation and which one released it. The operator's own actions keep
    # the reference's "workspace:<scope>".
    tid, key1 = tenant_key(client)
    r = client.post(f"{ADMIN}/{tid}/keys", json={"name": "second"})
    assert r.status == 201, r
    key2 = r.body["api_key"]
    first, second = As(client, key1), As(client, key2)
    kid1, kid2 = key1.split("_")[0], key2.split("_")[0]
    name = "actor-" + uuid.uuid4().hex[:8]
    first.ready(name)
    route = first.req("GET", f"{API}/{name}")
    assert route.body["generation_created_by"] == f"tenant:{tid}/key:{kid1}", route.body
    assert second.req("DELETE", f"{API}/{name}").status == 200
    audit = first.req("GET", f"{API}/{name}/audit")
    assert audit.status == 200, audit
    closed = audit.body["history"][-1]
    assert closed["created_by"] == f"tenant:{tid}/key:{kid1}", closed
    assert closed["released_by"] == f"tenant:{tid}/key:{kid2}", closed
    # The operator's own sandbox: the scope's actor, as in the reference
    # (the operator cannot resolve a name in a tenant's namespace).
    own = "op-" + uuid.uuid4().hex[:8]
    gen = client.post(f"{API}/resolve", json={"sandbox_id": own, "workspace_scope_id": "ops"})
    assert gen.status == 200, gen
    route = client.get(f"{API}/{own}")
    assert route.body["generation_created_by"] == "workspace:ops", route.body
    assert client.delete(f"{API}/{own}").status == 200


def test_a_tenant_lists_its_own_sandboxes_and_no_others(client, two):
    """GET /api/v1/sandboxes: a tenant's own, by the names it gave, filtered
    and paged like the admin listing; the operator sees every sandbox."""
    (ta, a), (tb, b) = two
    mark = uuid.uuid4().hex[:8]
    mine = sorted(f"ls-{mark}-{i}" for i in range(3))
    for name in mine:
        assert a.resolve(name, scope="proj").status == 200
    assert b.resolve(f"ls-{mark}-b").status == 200
    r = a.req("GET", f"{API}", params={"search": f"ls-{mark}"})
    assert r.status == 200, r
    assert sorted(s["sandbox_id"] for s in r.body["sandboxes"]) == mine, r.body
    assert r.body["total"] == 3
    assert {s["workspace_scope_id"] for s in r.body["sandboxes"]} == {"proj"}, r.body
    # Its own scope names filter; another tenant's names are not there to find.
    assert a.req("GET", API, params={"workspace_scope_id": "proj", "search": mark}
                 ).body["total"] == 3
    assert a.req("GET", API, params={"search": f"ls-{mark}-b"}).body["total"] == 0
    assert a.req("GET", API, params={"search": f"{tb}~"}).body["total"] == 0
    # Paged, with the admin listing's bounds.
    page = a.req("GET", API, params={"search": mark, "limit": 2, "offset": 2})
    assert page.status == 200 and len(page.body["sandboxes"]) == 1, page
    assert_error(a.req("GET", API, params={"limit": 201}), 422, "SANDBOX_INVALID_REQUEST")
    # The other tenant sees its one; the operator all four, by stored id.
    assert [s["sandbox_id"] for s in b.req("GET", API, params={"search": mark}
                                           ).body["sandboxes"]] == [f"ls-{mark}-b"]
    ids = {s["sandbox_id"] for s in client.get(API, params={"search": mark}).body["sandboxes"]}
    assert ids == {f"{ta}~{n}" for n in mine} | {f"{tb}~ls-{mark}-b"}, ids


def sandbox_cgroup_file(uid, controller, name):
    """The host's view of a sandbox's cgroup limit (v1 hierarchies or v2)."""
    import glob
    for root in (f"/sys/fs/cgroup/{controller}", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup"):
        hits = glob.glob(f"{root}/**/sb-{uid}/{name}", recursive=True)
        if hits:
            with open(hits[0]) as f:
                return f.read().strip()
    return None


def test_a_tenants_ceilings_lower_its_sandboxes_limits(client, daemon):
    """sandbox_memory_bytes and sandbox_pids: the tenant's sandboxes get
    them instead of the worker's larger limits, and the kernel holds them
    (an allocation past the memory ceiling is OOM-killed, forks past the
    pids ceiling fail); another tenant's sandbox keeps the worker's."""
    tid = "tc-" + uuid.uuid4().hex[:8]
    r = client.post(ADMIN, json={"tenant_id": tid, "quotas": {
        "sandbox_memory_bytes": 96 << 20, "sandbox_pids": 24, "sandbox_cpu_millis": 250}})
    assert r.status == 201, r
    limited = As(client, client.post(f"{ADMIN}/{tid}/keys", json={"name": "c"}).body["api_key"])
    _, free_key = tenant_key(client)
    free = As(client, free_key)
    name = "ceil-" + uuid.uuid4().hex[:8]
    gen = limited.ready(name)
    r = limited.exec(name, gen, ["python3", "-c", "b = bytearray(300 << 20); print(len(b))"])
    assert r.status == 200 and r.body["status"] != "SUCCEEDED", r
    assert r.body["termination_reason"] == "OOM_KILLED", r.body
    r = limited.exec(name, gen, ["sh", "-c", "n=0; for i in $(seq 1 60); do sleep 3 & "
                                             "n=$((n+1)); done 2>/dev/null; echo started"],
                     timeout_seconds=20)
    assert r.status == 200, r
    uid = client.get(f"{API}/{tid}~{name}").body["sandbox_uid"]
    memory = sandbox_cgroup_file(uid, "memory", "memory.limit_in_bytes") or \
        sandbox_cgroup_file(uid, "memory", "memory.max")
    assert memory == str(96 << 20), memory
    assert sandbox_cgroup_file(uid, "pids", "pids.max") == "24"
    cpu = sandbox_cgroup_file(uid, "cpu", "cpu.cfs_quota_us") or \
        sandbox_cgroup_file(uid, "cpu", "cpu.max")
    assert cpu in ("25000", "25000 100000"), cpu
    # A changed ceiling reaches the running session with its next command
    # (once the owner's second-long cache of the tenant's limits expires).
    r = client.request("PATCH", f"{ADMIN}/{tid}", json_body={"quotas": {"sandbox_pids": 40}})
    assert r.status == 200, r
    import time
    deadline = time.monotonic() + 10
    while sandbox_cgroup_file(uid, "pids", "pids.max") != "40":
        assert time.monotonic() < deadline, sandbox_cgroup_file(uid, "pids", "pids.max")
        assert limited.exec(name, gen, ["true"]).status == 200
        time.sleep(0.3)
    # The other tenant's sandbox: the worker's limits, the allocation fits.
    other = "free-" + uuid.uuid4().hex[:8]
    g2 = free.ready(other)
    r = free.exec(other, g2, ["python3", "-c", "b = bytearray(300 << 20); print(len(b))"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    # A ceiling of 0 is refused: it would leave nothing to run with.
    r = client.request("PATCH", f"{ADMIN}/{tid}", json_body={"quotas": {"sandbox_pids": 0}})
    assert_error(r, 422, "SANDBOX_INVALID_REQUEST")


def test_workspace_bytes_stops_writes_and_new_commands_until_space_is_freed(daemon_factory):
    d = daemon_factory({"SANDBOX_MAINTENANCE_INTERVAL_SECONDS": "1"})
    client = d.client()
    tid = "tw-" + uuid.uuid4().hex[:8]
    assert client.post(ADMIN, json={"tenant_id": tid,
                                    "quotas": {"workspace_bytes": 4 << 20}}).status == 201
    t = As(client, client.post(f"{ADMIN}/{tid}/keys", json={"name": "w"}).body["api_key"])
    name = "disk-" + uuid.uuid4().hex[:8]
    gen = t.ready(name)
    r = t.exec(name, gen, ["sh", "-c", "head -c 6000000 /dev/urandom > /workspace/big"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    write = {"generation": gen, "path": "/workspace/more", "content_base64": "eA=="}
    import time
    deadline = time.monotonic() + 15
    while True:
        r = t.req("PUT", f"{API}/{name}/files", json_body=write)
        if r.status == 429:
            break
        assert r.status == 200 and time.monotonic() < deadline, r
        time.sleep(0.3)
    d429 = assert_error(r, 429, "TENANT_QUOTA_EXCEEDED")
    assert d429["limit"] == "workspace_bytes" and d429["value"] == 4 << 20, d429
    usage = t.req("GET", "/api/v1/tenant").body["usage"]
    assert usage["workspace_bytes"] >= 6000000, usage
    assert_error(t.exec(name, gen, ["true"]), 429, "TENANT_QUOTA_EXCEEDED")
    # Deleting still works, and once counted again the tenant may write.
    r = t.req("POST", f"{API}/{name}/files/delete",
              json_body={"generation": gen, "path": "/workspace/big"})
    assert r.status == 200, r
    deadline = time.monotonic() + 15
    while t.req("PUT", f"{API}/{name}/files", json_body=write).status != 200:
        assert time.monotonic() < deadline, "the tenant stayed over its quota after the delete"
        time.sleep(0.3)
    assert t.exec(name, gen, ["true"]).status == 200
