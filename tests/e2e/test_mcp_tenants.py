"""The MCP endpoint with tenant keys (issue 14, item 2): the tools act as the
key's tenant exactly as the REST routes do. A tenant names its sandboxes
without its namespace and sees them so; another tenant's sandbox is one
that does not exist, refused before anything is created, started or
recorded; its quotas gate resolve, create, resume and exec; the route
history names its key."""

import time
import uuid

from sandloom_client import API, Client, assert_error
from test_mcp import call, failed, ok

ADMIN = "/api/v1/admin/tenants"


def tenant(client, quotas=None):
    tid = "tm-" + uuid.uuid4().hex[:10]
    body = {"tenant_id": tid, **({"quotas": quotas} if quotas else {})}
    assert client.post(ADMIN, json=body).status == 201
    r = client.post(f"{ADMIN}/{tid}/keys", json={"name": "agent"})
    assert r.status == 201, r
    return tid, r.body["key_id"], Client(client.host, client.port, r.body["api_key"])


def ready(mc, name, scope="s"):
    route = ok(mc, "sandbox_resolve", sandbox_id=name, workspace_scope_id=scope)
    ok(mc, "sandbox_create", sandbox_id=name, generation=route["generation"])
    return route


def test_a_tenant_works_through_mcp_in_its_own_namespace(client, daemon):
    tid, key_id, mc = tenant(client)
    name = "mcp-" + uuid.uuid4().hex[:8]
    route = ready(mc, name)
    # Its own names, never the stored ones.
    assert route["sandbox_id"] == name, route
    gen = route["generation"]
    r = ok(mc, "sandbox_exec", sandbox_id=name, generation=gen, exec_id="e-" + uuid.uuid4().hex,
           argv=["sh", "-c", "echo hi; id -u"])
    assert r["status"] == "SUCCEEDED" and r["stdout"].startswith("hi\n"), r
    ok(mc, "sandbox_write_text", sandbox_id=name, generation=gen, path="a.txt", text="ünï\n")
    assert ok(mc, "sandbox_read_text", sandbox_id=name, generation=gen,
              path="a.txt")["text"] == "ünï\n"
    listing = ok(mc, "sandbox_list_dir", sandbox_id=name, generation=gen, path="/workspace")
    assert [e["name"] for e in listing["entries"]] == ["a.txt"], listing
    audit = ok(mc, "sandbox_audit_get", sandbox_id=name)
    assert audit["sandbox_id"] == name and audit["workspace_scope_id"] == "s", audit
    assert audit["generation_created_by"] == f"tenant:{tid}/key:{key_id}", audit
    # The operator sees the stored id, made by this tenant.
    stored = f"{tid}~{name}"
    got = client.get(f"{API}/{stored}")
    assert got.status == 200 and got.body["workspace_scope_id"] == f"{tid}~s", got
    assert (daemon.sandbox_root / stored / "workspace" / "a.txt").read_text() == "ünï\n"
    done = ok(mc, "sandbox_release", sandbox_id=name)
    assert done == {"sandbox_id": name, "status": "RELEASED"}, done
    history = client.get(f"{API}/{stored}/audit").body["history"]
    assert history[-1]["released_by"] == f"tenant:{tid}/key:{key_id}", history


def test_another_tenants_sandbox_does_not_exist_for_mcp(client, daemon):
    ta, _, a = tenant(client)
    tb, _, b = tenant(client)
    name = "mine-" + uuid.uuid4().hex[:8]
    gen = ready(a, name)["generation"]
    # Tenant B names the same sandbox: it has none by that name.
    assert "SANDBOX_NOT_FOUND" in failed(call(b, "sandbox_status", sandbox_id=name),
                                         "sandbox_status")
    for tool, args in [
        ("sandbox_exec", {"generation": gen, "exec_id": "b-" + uuid.uuid4().hex,
                          "argv": ["touch", "/workspace/b-was-here"]}),
        ("sandbox_write_text", {"generation": gen, "path": "b.txt", "text": "b"}),
        ("sandbox_read_text", {"generation": gen, "path": "a.txt"}),
        ("sandbox_create", {"generation": gen}),
        ("sandbox_suspend", {"generation": gen}),
    ]:
        failed(call(b, tool, sandbox_id=name, **args), tool)
    # Nothing of B's was made, and A's sandbox is untouched.
    assert not (daemon.sandbox_root / f"{tb}~{name}").exists()
    assert not (daemon.sandbox_root / f"{ta}~{name}" / "workspace" / "b-was-here").exists()
    assert not (daemon.sandbox_root / f"{ta}~{name}" / "workspace" / "b.txt").exists()
    assert client.get("/api/v1/admin/execs", params={"sandbox_id": f"{tb}~{name}"}
                      ).body["total"] == 0
    assert_error(client.get(f"{API}/{tb}~{name}"), 404, "SANDBOX_NOT_FOUND")
    # The stored id, or any name with the separator, names nothing either.
    for other in (f"{ta}~{name}", "a~b~c"):
        text = failed(call(b, "sandbox_status", sandbox_id=other), "sandbox_status")
        assert "SANDBOX_NOT_FOUND" in text, text
        failed(call(b, "sandbox_resolve", sandbox_id=other, workspace_scope_id="s"),
               "sandbox_resolve")
    # A release by B is of B's own (absent) sandbox: A's stays READY.
    failed(call(b, "sandbox_release", sandbox_id=f"{ta}~{name}"), "sandbox_release")
    ok(b, "sandbox_release", sandbox_id=name)
    assert ok(a, "sandbox_status", sandbox_id=name)["status"] == "READY"
    ok(a, "sandbox_release", sandbox_id=name)


def test_a_tenants_quotas_hold_on_mcp(client):
    tid, _, mc = tenant(client, {"sandboxes": 1, "commands_in_flight": 1})
    first = "q1-" + uuid.uuid4().hex[:8]
    gen = ready(mc, first)["generation"]
    text = failed(call(mc, "sandbox_resolve", sandbox_id="q2-" + uuid.uuid4().hex[:8],
                       workspace_scope_id="s"), "sandbox_resolve")
    assert "TENANT_QUOTA_EXCEEDED" in text and "1 sandboxes" in text, text
    # Resolving the one it has again adds nothing.
    ok(mc, "sandbox_resolve", sandbox_id=first, workspace_scope_id="s")
    # One command in flight: a second is refused while the first runs.
    bg = ok(mc, "sandbox_exec", sandbox_id=first, generation=gen, exec_id="bg-" + uuid.uuid4().hex,
            argv=["sleep", "30"], background=True)
    assert bg["status"] == "RUNNING", bg
    text = failed(call(mc, "sandbox_exec", sandbox_id=first, generation=gen,
                       exec_id="x-" + uuid.uuid4().hex, argv=["true"]), "sandbox_exec")
    assert "TENANT_QUOTA_EXCEEDED" in text and "commands_in_flight" in text, text
    ok(mc, "sandbox_cancel", sandbox_id=first, generation=gen, exec_id=bg["exec_id"])
    deadline = time.monotonic() + 30
    while ok(mc, "sandbox_exec_status", sandbox_id=first, generation=gen,
             exec_id=bg["exec_id"])["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the cancelled command kept running"
        time.sleep(0.1)
    # Once it ended, a synchronous command runs.
    r = ok(mc, "sandbox_exec", sandbox_id=first, generation=gen, exec_id="y-" + uuid.uuid4().hex,
           argv=["echo", "ok"])
    assert r["stdout"] == "ok\n", r
    usage = client.get(f"{ADMIN}/{tid}").body["usage"]
    assert usage["sandboxes"] == 1 and usage["commands_in_flight"] == 0, usage
    ok(mc, "sandbox_release", sandbox_id=first)
