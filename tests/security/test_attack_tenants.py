"""Attacks across tenants (issue 14): an agent in tenant B's own sandbox,
holding B's API key, goes after tenant A's sandbox through the API on the
host's loopback (host network mode): every sandbox route, REST and MCP,
with A's plain name, A's stored id and encoded and traversal spellings of
it, B's key on the operator's and the worker protocol's routes, and A's
private template. Each answer must be the one a sandbox that does not exist
gets (or 403 / "not in the catalog"), and A's sandbox must be untouched
afterwards: its files, its processes, its records, its history."""
import json
import urllib.parse
import uuid

import pytest

from sandloom_client import Client, Sandbox
from sec_helpers import probe, sh

ADMIN = "/api/v1/admin/tenants"
API = "/api/v1/sandboxes"
MCP = f"{API}/mcp/streamable-http"


def tenant(client):
    tid = "x" + uuid.uuid4().hex[:8]
    assert client.post(ADMIN, json={"tenant_id": tid}).status == 201
    key = client.post(f"{ADMIN}/{tid}/keys", json={"name": "agent"}).body["api_key"]
    return tid, key


def ready(c, name):
    sb = Sandbox(c, name, "s")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    return sb


@pytest.fixture(scope="module")
def victim_and_attacker(daemon):
    op = daemon.client()
    ta, ka = tenant(op)
    tb, kb = tenant(op)
    a = ready(Client(op.host, op.port, ka), "victim-" + uuid.uuid4().hex[:6])
    r = a.exec(["sh", "-c", "echo secret-of-a > /workspace/secret.txt; "
                            "mkdir -p /envs/t && echo tpl-of-a > /envs/t/f"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = a.c.post(f"{a.path}/templates", json={"generation": a.generation, "name": "atpl",
                                             "source_path": "/envs/t"})
    assert r.status == 200, r
    b = ready(Client(op.host, op.port, kb), "attacker-" + uuid.uuid4().hex[:6])
    return {"op": op, "ta": ta, "a": a, "tb": tb, "kb": kb, "b": b}


def state_of(op, daemon, stored):
    """What must not change: the route, its history, its executions, files."""
    route = op.get(f"{API}/{stored}").body
    audit = op.get(f"{API}/{stored}/audit").body
    execs = op.get("/api/v1/admin/execs", params={"sandbox_id": stored}).body["total"]
    files = sorted(p.name for p in (daemon.sandbox_root / stored / "workspace").iterdir())
    return (route["generation"], route["status"], audit["lifecycle_count"],
            len(audit["history"]), execs, files)


def code_of(text):
    try:
        detail = json.loads(text).get("detail")
    except ValueError:
        return text[:40]
    return detail.get("code") if isinstance(detail, dict) else detail


def spellings(ta, name):
    stored = f"{ta}~{name}"
    return [name, stored, urllib.parse.quote(stored, safe=""), f"{ta}%7e{name}",
            f"..%2F{stored}", f"x%2F..%2F{stored}", f"{stored}%00", f"./{stored}"]


def test_a_tenant_cannot_reach_another_tenants_sandbox_through_rest(daemon, victim_and_attacker):
    w = victim_and_attacker
    a, b = w["a"], w["b"]
    stored = f"{w['ta']}~{a.id}"
    before = state_of(w["op"], daemon, stored)
    gen = a.generation
    nobody = "victim-" + uuid.uuid4().hex[:6]  # A has no sandbox of that name
    R, _ = probe(b, r'''
        import http.client, json
        out = []
        for name in P["names"]:
            base = "/api/v1/sandboxes/" + name
            calls = [
                ("GET", base, None), ("GET", base + "/audit", None),
                ("POST", base, {"generation": P["gen"]}),
                ("POST", base + "/exec", {"exec_id": "evil-1", "generation": P["gen"],
                                          "argv": ["touch", "/workspace/pwned"]}),
                ("GET", base + "/exec/evil-1?generation=%d" % P["gen"], None),
                ("POST", base + "/exec/evil-1/cancel?generation=%d" % P["gen"], None),
                ("GET", base + "/files?path=/workspace/secret.txt&generation=%d" % P["gen"], None),
                ("GET", base + "/files/list?path=/workspace&generation=%d" % P["gen"], None),
                ("PUT", base + "/files", {"generation": P["gen"], "path": "/workspace/pwned",
                                          "content_base64": "eA=="}),
                ("POST", base + "/files/delete", {"generation": P["gen"],
                                                  "path": "/workspace/secret.txt"}),
                ("POST", base + "/files/move", {"generation": P["gen"],
                                                "source": "/workspace/secret.txt",
                                                "destination": "/workspace/moved"}),
                ("POST", base + "/templates", {"generation": P["gen"], "name": "stolen",
                                               "source_path": "/workspace"}),
                ("PUT", base + "/templates", {"generation": P["gen"], "templates": ["atpl"]}),
                ("POST", base + "/suspend", {"generation": P["gen"]}),
                ("POST", base + "/resume", None),
                ("DELETE", base, None),
            ]
            for method, path, body in calls:
                c = http.client.HTTPConnection("127.0.0.1", P["port"], timeout=30)
                headers = {"Authorization": "Bearer " + P["key"]}
                data = None
                if body is not None:
                    data = json.dumps(body)
                    headers["Content-Type"] = "application/json"
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                text = r.read().decode(errors="replace")
                out.append([method, path, r.status, text[:300]])
                c.close()
        R["calls"] = out
    ''', {"names": spellings(w["ta"], a.id) + spellings(w["ta"], nobody), "port": daemon.port,
          "key": w["kb"], "gen": gen})
    # Every spelling of A's sandbox answers exactly as the same spelling of
    # a sandbox nobody has: the answers say nothing of A's.
    calls = R["calls"]
    half = len(calls) // 2
    for (method, path, status, text), (_, npath, nstatus, ntext) in zip(calls[:half],
                                                                       calls[half:]):
        assert (status, code_of(text)) == (nstatus, code_of(ntext)), (method, path, status, text,
                                                                      npath, nstatus, ntext)
        # Only a release answers 200: of B's own name, which B never had.
        assert status not in (200, 201) or (method, text) == ("DELETE", '{"status":"RELEASED"}'), \
            (method, path, status, text)
        assert "secret-of-a" not in text and w["ta"] not in text, (path, text)
    assert state_of(w["op"], daemon, stored) == before
    assert not (daemon.sandbox_root / stored / "workspace" / "pwned").exists()
    assert (daemon.sandbox_root / stored / "workspace" / "secret.txt").read_text() == \
        "secret-of-a\n"
    # Nothing of B's was made under any of those names either.
    assert not any(p.name.startswith(f"{w['tb']}~{w['ta']}") for p in daemon.sandbox_root.iterdir())


def test_a_tenant_cannot_reach_another_tenants_sandbox_through_mcp(daemon, victim_and_attacker):
    w = victim_and_attacker
    a, b = w["a"], w["b"]
    stored = f"{w['ta']}~{a.id}"
    before = state_of(w["op"], daemon, stored)
    tools = [("sandbox_status", {}), ("sandbox_audit_get", {}),
             ("sandbox_create", {"generation": a.generation}),
             ("sandbox_exec", {"generation": a.generation, "exec_id": "evil-2",
                               "argv": ["touch", "/workspace/pwned"]}),
             ("sandbox_read_text", {"generation": a.generation, "path": "secret.txt"}),
             ("sandbox_read_file", {"generation": a.generation, "path": "secret.txt"}),
             ("sandbox_list_dir", {"generation": a.generation, "path": "/workspace"}),
             ("sandbox_write_text", {"generation": a.generation, "path": "pwned", "text": "x"}),
             ("sandbox_delete_path", {"generation": a.generation, "path": "secret.txt"}),
             ("sandbox_move_path", {"generation": a.generation, "source": "secret.txt",
                                    "destination": "moved"}),
             ("sandbox_suspend", {"generation": a.generation}), ("sandbox_resume", {}),
             ("sandbox_release", {})]
    R, _ = probe(b, r'''
        import http.client, json
        out = []
        for name in P["names"]:
            for tool, args in P["tools"]:
                msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": dict(args, sandbox_id=name),
                                  "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                            "io.modelcontextprotocol/clientCapabilities": {}}}}
                c = http.client.HTTPConnection("127.0.0.1", P["port"], timeout=30)
                c.request("POST", P["path"], body=json.dumps(msg), headers={
                    "Authorization": "Bearer " + P["key"], "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                    "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
                    "Mcp-Name": tool, "Host": "127.0.0.1"})
                r = c.getresponse()
                out.append([tool, name, r.status, r.read().decode(errors="replace")[:400]])
                c.close()
        R["calls"] = out
    ''', {"names": [a.id, stored, f"{stored}/..", "a~b"], "tools": tools, "port": daemon.port,
          "key": w["kb"], "path": MCP})
    for tool, name, status, text in R["calls"]:
        assert status == 200, (tool, name, status, text)
        result = json.loads(text)["result"]
        if tool == "sandbox_release" and name == a.id:
            # B's own (absent) sandbox of that name: already released.
            assert result["isError"] is False, (name, result)
            continue
        assert result["isError"] is True, (tool, name, result)
        assert "secret-of-a" not in text and w["ta"] not in text, (tool, name, text)
    assert state_of(w["op"], daemon, stored) == before
    assert not (daemon.sandbox_root / stored / "workspace" / "pwned").exists()


def test_a_tenant_key_reaches_no_operator_or_worker_route_nor_a_private_template(
        daemon, victim_and_attacker):
    w = victim_and_attacker
    b = w["b"]
    R, _ = probe(b, r'''
        import http.client, json
        out = []
        for method, path, headers in P["calls"]:
            c = http.client.HTTPConnection("127.0.0.1", P["port"], timeout=30)
            h = {"Authorization": "Bearer " + P["key"], **headers}
            c.request(method, path, headers=h)
            r = c.getresponse()
            out.append([method, path, r.status, r.read().decode(errors="replace")[:300]])
            c.close()
        R["calls"] = out
    ''', {"port": daemon.port, "key": w["kb"], "calls": [
        ["GET", "/api/v1/admin/overview", {}],
        ["GET", "/api/v1/admin/sandboxes", {}],
        ["GET", "/api/v1/admin/execs", {}],
        ["GET", f"{ADMIN}/{w['ta']}", {}],
        ["GET", f"{ADMIN}/{w['ta']}/keys", {}],
        ["GET", "/api/v1/sandboxes/diagnostics/runtime", {}],
        ["GET", "/internal/v1/health", {"X-Sandbox-Worker-ID": daemon.worker_id}],
        ["POST", f"/internal/v1/sandboxes/{w['ta']}~{w['a'].id}/exec",
         {"X-Sandbox-Worker-ID": daemon.worker_id, "X-Sandbox-Generation": "1"}],
    ]})
    for method, path, status, text in R["calls"]:
        assert status == 403 and "TENANT_FORBIDDEN" in text, (path, status, text)
    # A's private template is neither listed to B nor attachable by any spelling.
    listed = b.c.get("/api/v1/templates").body["templates"]
    assert "atpl" not in [t["name"] for t in listed] and not any(
        w["ta"] in json.dumps(t) for t in listed), listed
    for ref in ("atpl", f"{w['ta']}~atpl"):
        r = b.c.put(f"{b.path}/templates", json={"generation": b.generation, "templates": [ref]})
        assert r.status == 400, (ref, r)
    body = sh(b, "ls /envs; cat /envs/atpl/f 2>&1; true")
    assert "tpl-of-a" not in body["stdout"], body
    # B's listing of sandboxes holds its own only.
    ids = [s["sandbox_id"] for s in b.c.get(API).body["sandboxes"]]
    assert ids == [b.id], ids
