"""The MCP endpoint (spec MCP.md), driven over raw HTTP as the reference's
verifier does (§5): protocol revision 2026-07-28 with the `_meta` envelope
and mirrored headers, the initialize-based revisions 2025-06-18 and
2025-11-25 served statelessly, transport security, and every one of the 13
tools through a whole sandbox lifecycle."""

import base64
import http.client
import json
import time
import uuid

import pytest

from sandloom_client import Resp

MCP = "/api/v1/sandboxes/mcp/streamable-http"
MODERN = "2026-07-28"
LEGACY = ("2025-06-18", "2025-11-25")
ACCEPT = "application/json, text/event-stream"
TOOLS = {"sandbox_profile", "sandbox_resolve", "sandbox_create", "sandbox_status",
         "sandbox_audit_get", "sandbox_exec", "sandbox_exec_status", "sandbox_cancel",
         "sandbox_write_file", "sandbox_read_file", "sandbox_suspend", "sandbox_resume",
         "sandbox_release"}
# Ours, additive (issue 14): beside the reference's 13, never instead.
OURS = {"sandbox_list_dir", "sandbox_make_dir", "sandbox_delete_path", "sandbox_move_path",
        "sandbox_write_text", "sandbox_read_text"}
PRESETS = {
    "READ_ONLY": {"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    "IDEMPOTENT_WRITE": {"readOnlyHint": False, "destructiveHint": False,
                         "idempotentHint": True, "openWorldHint": False},
    "EXECUTE": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True,
                "openWorldHint": False},
}
PRESETS["RELEASE"] = PRESETS["EXECUTE"]
ANNOTATIONS = {
    "sandbox_profile": "READ_ONLY", "sandbox_resolve": "IDEMPOTENT_WRITE",
    "sandbox_create": "IDEMPOTENT_WRITE", "sandbox_status": "READ_ONLY",
    "sandbox_audit_get": "READ_ONLY", "sandbox_exec": "EXECUTE",
    "sandbox_exec_status": "READ_ONLY", "sandbox_cancel": "IDEMPOTENT_WRITE",
    "sandbox_write_file": "IDEMPOTENT_WRITE", "sandbox_read_file": "READ_ONLY",
    "sandbox_suspend": "IDEMPOTENT_WRITE", "sandbox_resume": "IDEMPOTENT_WRITE",
    "sandbox_release": "RELEASE",
    "sandbox_list_dir": "READ_ONLY", "sandbox_make_dir": "IDEMPOTENT_WRITE",
    "sandbox_delete_path": "RELEASE", "sandbox_move_path": "RELEASE",
    "sandbox_write_text": "IDEMPOTENT_WRITE", "sandbox_read_text": "READ_ONLY",
}
REQUIRED_ARGS = {
    "sandbox_profile": set(), "sandbox_resolve": {"sandbox_id", "workspace_scope_id"},
    "sandbox_create": {"sandbox_id", "generation"}, "sandbox_status": {"sandbox_id"},
    "sandbox_audit_get": {"sandbox_id"},
    "sandbox_exec": {"sandbox_id", "generation", "exec_id", "argv"},
    "sandbox_exec_status": {"sandbox_id", "generation", "exec_id"},
    "sandbox_cancel": {"sandbox_id", "generation", "exec_id"},
    "sandbox_write_file": {"sandbox_id", "generation", "path", "content_base64"},
    "sandbox_read_file": {"sandbox_id", "generation", "path"},
    "sandbox_suspend": {"sandbox_id", "generation"}, "sandbox_resume": {"sandbox_id"},
    "sandbox_release": {"sandbox_id"},
    "sandbox_list_dir": {"sandbox_id", "generation", "path"},
    "sandbox_make_dir": {"sandbox_id", "generation", "path"},
    "sandbox_delete_path": {"sandbox_id", "generation", "path"},
    "sandbox_move_path": {"sandbox_id", "generation", "source", "destination"},
    "sandbox_write_text": {"sandbox_id", "generation", "path", "text"},
    "sandbox_read_text": {"sandbox_id", "generation", "path"},
}
ROUTE_INFO = {"sandbox_id", "generation", "status", "storage_mode", "profile_id",
              "profile_hash", "worker_id"}


def uid(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


# -- the wire ----------------------------------------------------------------------------
def post(c, body, *, headers=None, auth=True, raw=None, timeout=None):
    """POST one body (a JSON value, or raw bytes) with exactly these headers
    on top of Content-Type: application/json and the token."""
    data = raw if raw is not None else json.dumps(body)
    return c.request("POST", MCP, data=data, headers=headers or {}, auth=auth, timeout=timeout)


def modern_request(method, params=None, *, rid=1, version=MODERN):
    params = dict(params or {})
    params["_meta"] = {"io.modelcontextprotocol/protocolVersion": version,
                       "io.modelcontextprotocol/clientCapabilities": {}}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def modern_headers(method, name=None):
    h = {"Accept": ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if name is not None:
        h["Mcp-Name"] = name
    return h


def modern(c, method, params=None, *, timeout=None):
    name = (params or {}).get("name") if method == "tools/call" else None
    return post(c, modern_request(method, params), headers=modern_headers(method, name),
                timeout=timeout)


def rpc_error(r, status, code):
    """A JSON-RPC error answer with this HTTP status and code."""
    assert r.status == status, f"expected HTTP {status} / {code}, got {r!r}"
    assert r.is_json, r
    assert r.body.get("jsonrpc") == "2.0", r
    err = r.body.get("error")
    assert isinstance(err, dict) and err.get("code") == code, f"expected error {code}: {r!r}"
    assert isinstance(err.get("message"), str) and err["message"], r
    assert "result" not in r.body, r
    return err


def call(c, tool, **arguments):
    """tools/call under 2026-07-28; returns the CallToolResult (any isError)."""
    r = modern(c, "tools/call", {"name": tool, "arguments": arguments}, timeout=120)
    assert r.status == 200, r
    assert r.headers.get("Content-Type", "").startswith("application/json"), r
    assert "error" not in r.body, r
    assert r.headers.get("Mcp-Session-Id") is None, "the server is stateless"
    result = r.body["result"]
    assert result.get("resultType") == "complete", result
    return result


def ok(c, tool, **arguments):
    """A successful tool call: structuredContent, mirrored in one text block."""
    return succeeded(call(c, tool, **arguments), tool)


def succeeded(result, tool):
    assert result.get("isError") is False, f"{tool} failed: {result!r}"
    structured = result.get("structuredContent")
    assert isinstance(structured, dict), result
    content = result.get("content")
    assert isinstance(content, list) and content, result
    assert content[0]["type"] == "text" and json.loads(content[0]["text"]) == structured, result
    return structured


def tool_error(c, tool, **arguments):
    """A failed tool call: isError inside HTTP 200, the text names the code,
    no structuredContent (MCP.md §4.2)."""
    return failed(call(c, tool, **arguments), tool)


def failed(result, tool):
    assert result.get("isError") is True, f"{tool} should have failed: {result!r}"
    assert "structuredContent" not in result, result
    texts = [b.get("text", "") for b in result.get("content", []) if b.get("type") == "text"]
    assert texts, result
    return "\n".join(texts)


@pytest.fixture(scope="module")
def c(daemon):
    return daemon.client()


# -- tools/list ------------------------------------------------------------------------------
def test_tools_list_has_the_13_tools_and_ours_with_schemas(c):
    r = modern(c, "tools/list")
    assert r.status == 200, r
    result = r.body["result"]
    assert result["resultType"] == "complete", result
    tools = {t["name"]: t for t in result["tools"]}
    assert set(tools) == TOOLS | OURS and len(result["tools"]) == 13 + len(OURS), sorted(tools)
    # The reference's come first, in its order; ours after them.
    assert set(t["name"] for t in result["tools"][:13]) == TOOLS
    for name, t in tools.items():
        assert isinstance(t.get("description"), str) and t["description"], t
        schema = t.get("inputSchema")
        assert schema and schema.get("type") == "object", t
        assert set(schema.get("required", [])) == REQUIRED_ARGS[name], (name, schema)
        assert REQUIRED_ARGS[name] <= set(schema.get("properties", {})), (name, schema)
        out = t.get("outputSchema")
        assert out and out.get("type") == "object" and out.get("properties"), t
        assert t.get("annotations") == PRESETS[ANNOTATIONS[name]], (name, t.get("annotations"))
        if name == "sandbox_profile":
            assert t.get("title") == "Sandbox runtime profile", t
        else:
            assert "title" not in t, t
    # No sensitive_env for MCP exec (MCP.md §3).
    assert "sensitive_env" not in tools["sandbox_exec"]["inputSchema"]["properties"]


def test_server_discover(c):
    r = modern(c, "server/discover")
    assert r.status == 200, r
    result = r.body["result"]
    assert result["resultType"] == "complete", result
    assert MODERN in result["supportedVersions"], result
    assert "tools" in result["capabilities"], result
    assert "sandbox_release" in result["instructions"], result
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "agent-sandbox"


# -- the whole lifecycle through every tool ----------------------------------------------
def test_every_tool_through_a_sandbox_lifecycle(c, daemon):
    sid, scope = uid("mcp"), uid("scope")
    route = ok(c, "sandbox_resolve", sandbox_id=sid, workspace_scope_id=scope)
    assert set(route) == ROUTE_INFO, route  # no epoch, endpoint or uid (§3.2)
    assert route["sandbox_id"] == sid and route["status"] == "ASSIGNED", route
    assert route["worker_id"] == daemon.worker_id, route
    gen = route["generation"]
    try:
        created = ok(c, "sandbox_create", sandbox_id=sid, generation=gen)
        assert created == {"sandbox_id": sid, "generation": gen, "status": "READY"}, created

        status = ok(c, "sandbox_status", sandbox_id=sid)
        assert set(status) == ROUTE_INFO and status["status"] == "READY", status
        assert status["generation"] == gen, status

        content = b"hello from mcp\n\x00\xff"
        written = ok(c, "sandbox_write_file", sandbox_id=sid, generation=gen,
                     path="/workspace/notes/hello.bin",
                     content_base64=base64.b64encode(content).decode())
        assert written == {"sandbox_id": sid, "generation": gen, "status": "WRITTEN"}, written
        read = ok(c, "sandbox_read_file", sandbox_id=sid, generation=gen,
                  path="/workspace/notes/hello.bin")
        assert read["path"] == "/workspace/notes/hello.bin", read
        assert base64.b64decode(read["content_base64"]) == content, read

        marker = uid("mcp-marker")
        run = ok(c, "sandbox_exec", sandbox_id=sid, generation=gen, exec_id=uid("x"),
                 argv=["/bin/sh", "-c", f"echo {marker}; cat notes/hello.bin | head -c 14"])
        assert run["status"] == "SUCCEEDED" and run["exit_code"] == 0, run
        assert marker in run["stdout"] and "hello from mcp" in run["stdout"], run
        assert {"exec_id", "status", "exit_code", "stdout", "stderr", "duration_ms",
                "truncated"} <= set(run), run

        # Background run, poll, cancel, poll until it is over.
        bg = uid("bg")
        started = ok(c, "sandbox_exec", sandbox_id=sid, generation=gen, exec_id=bg,
                     argv=["sleep", "60"], background=True)
        assert started["status"] == "RUNNING" and started["exit_code"] is None, started
        polled = ok(c, "sandbox_exec_status", sandbox_id=sid, generation=gen, exec_id=bg)
        assert polled["exec_id"] == bg and polled["status"] == "RUNNING", polled
        assert ok(c, "sandbox_cancel", sandbox_id=sid, generation=gen,
                  exec_id=bg) == {"cancelled": True}
        deadline = time.monotonic() + 30
        while polled["status"] == "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.2)
            polled = ok(c, "sandbox_exec_status", sandbox_id=sid, generation=gen, exec_id=bg)
        assert polled["status"] != "RUNNING", polled
        assert ok(c, "sandbox_cancel", sandbox_id=sid, generation=gen,
                  exec_id=bg) == {"cancelled": False}

        audit = ok(c, "sandbox_audit_get", sandbox_id=sid)
        assert audit["sandbox_id"] == sid and audit["workspace_scope_id"] == scope, audit
        assert audit["generation"] == gen and isinstance(audit["history"], list), audit

        profile = ok(c, "sandbox_profile")
        assert profile["transport"] == "streamable-http" and profile["stateless"] is True
        assert profile["worker_id"] == daemon.worker_id, profile
        assert profile["profile_id"] == "coding-default", profile
        assert profile["mcp_sdk_version"].endswith("(protocol 2026-07-28)"), profile
        assert isinstance(profile["healthy"], bool), profile
        assert profile["running_sessions"] >= 1, profile
        for key in ("profile_hash", "running_execs", "capabilities", "orphan_reaper"):
            assert key in profile, profile

        # Suspend/resume: the sandbox sleeps (commands refused) and wakes.
        suspended = call(c, "sandbox_suspend", sandbox_id=sid, generation=gen)
        s = succeeded(suspended, "sandbox_suspend")
        assert set(s) == {"sandbox_id", "generation", "status", "snapshot", "memory",
                          "suspended", "retained_until"}, s
        assert s["status"] == "SUSPENDED" and s["suspended"] is True, s
        assert s["memory"] is False, s  # the tool suspends files only
        text = tool_error(c, "sandbox_exec", sandbox_id=sid, generation=gen,
                          exec_id=uid("x"), argv=["true"])
        assert "SANDBOX_SUSPENDED" in text, text
        resumed = ok(c, "sandbox_resume", sandbox_id=sid)
        assert resumed["resumed"] is True and resumed["status"] == "READY", resumed
        assert {"worker_id", "worker_epoch", "worker_endpoint", "sandbox_uid",
                "workspace_source"} <= set(resumed), resumed
        gen = resumed["generation"]
        run = ok(c, "sandbox_exec", sandbox_id=sid, generation=gen, exec_id=uid("x"),
                 argv=["cat", "notes/hello.bin"])
        assert run["stdout"].startswith("hello from mcp"), run
    finally:
        released = ok(c, "sandbox_release", sandbox_id=sid)
    assert released == {"sandbox_id": sid, "status": "RELEASED"}, released
    after = ok(c, "sandbox_status", sandbox_id=sid)
    assert after["status"] == "RELEASED" and after["generation"] == gen + 1, after
    # The REST view agrees: the tools call the same service.
    rest = daemon.client().get(f"/api/v1/sandboxes/{sid}")
    assert rest.status == 200 and rest.body["status"] == "RELEASED", rest


def test_release_of_an_unknown_sandbox_is_fine(c):
    sid = uid("never")
    assert ok(c, "sandbox_release", sandbox_id=sid) == {"sandbox_id": sid, "status": "RELEASED"}


def test_the_reference_verifier_exchange(c):
    """MCP.md §5, byte for byte the headers the reference verifier sends."""
    sid, scope = uid("verify-mcp"), uid("scope")
    gen = ok(c, "sandbox_resolve", sandbox_id=sid, workspace_scope_id=scope)["generation"]
    try:
        ok(c, "sandbox_create", sandbox_id=sid, generation=gen)
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "sandbox_exec",
                           "arguments": {"sandbox_id": sid, "generation": gen,
                                         "exec_id": uid("mcp"),
                                         "argv": ["/bin/sh", "-c", "echo mcp-marker"]},
                           "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                     "io.modelcontextprotocol/clientCapabilities": {}}}}
        r = post(c, body, headers={"Accept": ACCEPT, "MCP-Protocol-Version": MODERN,
                                   "mcp-method": "tools/call", "mcp-name": "sandbox_exec"})
        assert r.status == 200 and "error" not in r.body, r
        assert r.body["result"]["isError"] is not True, r
        assert r.body["result"]["structuredContent"]["status"] == "SUCCEEDED", r
        assert "mcp-marker" in r.body["result"]["structuredContent"]["stdout"], r
    finally:
        ok(c, "sandbox_release", sandbox_id=sid)


# -- tool errors (MCP.md §4.2) ---------------------------------------------------------
def test_tool_errors_are_results_inside_http_200(c):
    sid, scope = uid("mcp-err"), uid("scope")
    gen = ok(c, "sandbox_resolve", sandbox_id=sid, workspace_scope_id=scope)["generation"]
    try:
        ok(c, "sandbox_create", sandbox_id=sid, generation=gen)
        text = tool_error(c, "sandbox_exec", sandbox_id=sid, generation=gen + 5,
                          exec_id=uid("x"), argv=["true"])
        assert "STALE_SANDBOX_ROUTE" in text, text
        assert "Error executing tool sandbox_exec" in text, text
        text = tool_error(c, "sandbox_create", sandbox_id=sid, generation=gen + 1)
        assert "STALE_SANDBOX_ROUTE" in text, text
        # The message says what happened (ours): the current generation.
        assert f"the sandbox is at generation {gen}" in text, text
        # Route names are not sandbox ids, here as in REST.
        text = tool_error(c, "sandbox_resolve", sandbox_id="resolve", workspace_scope_id=scope)
        assert "SANDBOX_ID_RESERVED" in text, text
        # Invalid arguments say which and why.
        text = tool_error(c, "sandbox_resolve", sandbox_id="x", workspace_scope_id=scope)
        assert "argument 'sandbox_id' must be 3 to 128 characters" in text, text
        # Validation of the request the tool builds (same rules as REST).
        text = tool_error(c, "sandbox_exec", sandbox_id=sid, generation=gen, exec_id=uid("x"),
                          argv=["true"], cwd="/etc")
        assert "SANDBOX_INVALID_REQUEST" in text and "cwd" in text, text
        text = tool_error(c, "sandbox_exec", sandbox_id=sid, generation=gen, exec_id="a b",
                          argv=["true"])
        assert "exec_id" in text, text
        # sensitive_env is not an MCP argument: ignored, the command runs.
        run = ok(c, "sandbox_exec", sandbox_id=sid, generation=gen, exec_id=uid("x"),
                 argv=["true"], sensitive_env={"SECRET": "x"})
        assert run["status"] == "SUCCEEDED", run
        # Arguments violating the input schema: a tool error too.
        text = tool_error(c, "sandbox_exec", sandbox_id=sid, generation="1", exec_id=uid("x"),
                          argv=["true"])
        assert "generation" in text and "SANDBOX_INVALID_REQUEST" in text, text
        text = tool_error(c, "sandbox_write_file", sandbox_id=sid, generation=gen)
        assert "path" in text and "content_base64" in text, text
        text = tool_error(c, "sandbox_read_file", sandbox_id=sid, generation=gen,
                          path="/workspace/missing.txt")
        assert "SANDBOX_INVALID_ARGUMENT" in text, text
        # Values are never echoed back.
        secret = uid("secret-value")
        text = tool_error(c, "sandbox_exec", sandbox_id=sid, generation=gen, exec_id=secret + " x",
                          argv=["true"])
        assert secret not in text, text
    finally:
        ok(c, "sandbox_release", sandbox_id=sid)
    for tool in ("sandbox_status", "sandbox_audit_get"):
        text = tool_error(c, tool, sandbox_id=uid("unknown"))
        assert "SANDBOX_NOT_FOUND" in text, text
    text = tool_error(c, "sandbox_resolve", sandbox_id="x", workspace_scope_id="s")
    assert "sandbox_id" in text, text


def test_unknown_tool_is_invalid_params(c):
    r = modern(c, "tools/call", {"name": "sandbox_teleport", "arguments": {}})
    rpc_error(r, 400, -32602)
    assert r.body["id"] == 1, r


# -- protocol errors ---------------------------------------------------------------------
def test_malformed_json_is_a_parse_error(c):
    r = post(c, None, raw=b'{"jsonrpc":"2.0","id":1,', headers=modern_headers("tools/list"))
    err = rpc_error(r, 400, -32700)
    assert r.body["id"] is None, r
    assert err["message"], err
    r = post(c, None, raw=b"", headers=modern_headers("tools/list"))
    rpc_error(r, 400, -32700)


def test_invalid_requests(c):
    h = modern_headers("tools/list")
    rpc_error(post(c, [modern_request("tools/list")], headers=h), 400, -32600)  # no batches
    rpc_error(post(c, {"id": 1, "method": "tools/list"}, headers=h), 400, -32600)
    rpc_error(post(c, {"jsonrpc": "2.0", "id": 1}, headers=h), 400, -32600)
    rpc_error(post(c, {"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/list"}, headers=h),
              400, -32600)
    rpc_error(post(c, 42, headers=h), 400, -32600)
    # Deep nesting is refused before it is built.
    rpc_error(post(c, None, raw=b"[" * 5000 + b"]" * 5000, headers=h), 400, -32600)


def test_unknown_method_and_initialize_under_2026(c):
    r = modern(c, "resources/frobnicate")
    rpc_error(r, 404, -32601)
    init = modern_request("initialize", {"protocolVersion": MODERN, "capabilities": {},
                                         "clientInfo": {"name": "t", "version": "1"}})
    r = post(c, init, headers=modern_headers("initialize"))
    rpc_error(r, 404, -32601)
    # Also when the client sent the legacy params without the envelope.
    legacy_params = {"protocolVersion": MODERN, "capabilities": {}}
    r = post(c, {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": legacy_params},
             headers=modern_headers("initialize"))
    rpc_error(r, 404, -32601)


@pytest.mark.parametrize("case", ["method-mismatch", "method-missing", "name-mismatch",
                                  "name-missing", "version-vs-meta", "version-missing",
                                  "accept-json-only", "accept-missing", "duplicate-method"])
def test_mirror_header_problems_are_header_mismatch(c, case):
    body = modern_request("tools/call", {"name": "sandbox_profile", "arguments": {}})
    h = modern_headers("tools/call", "sandbox_profile")
    if case == "method-mismatch":
        h["Mcp-Method"] = "tools/list"
    elif case == "method-missing":
        del h["Mcp-Method"]
    elif case == "name-mismatch":
        h["Mcp-Name"] = "sandbox_status"
    elif case == "name-missing":
        del h["Mcp-Name"]
    elif case == "version-vs-meta":
        body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2025-11-25"
    elif case == "version-missing":
        del h["MCP-Protocol-Version"]
    elif case == "accept-json-only":
        h["Accept"] = "application/json"
    elif case == "accept-missing":
        h["Accept"] = "text/html"
    if case == "duplicate-method":
        # http.client only sends a header twice through putheader.
        r = raw_post(c, json.dumps(body).encode(),
                     list(h.items()) + [("Mcp-Method", "tools/call")])
    else:
        r = post(c, body, headers=h)
    rpc_error(r, 400, -32020)


def test_mcp_name_may_be_base64_encoded(c):
    body = modern_request("tools/call", {"name": "sandbox_profile", "arguments": {}})
    encoded = "=?base64?" + base64.b64encode(b"sandbox_profile").decode() + "?="
    r = post(c, body, headers=modern_headers("tools/call", encoded))
    assert r.status == 200 and r.body["result"]["isError"] is False, r


def test_missing_meta_is_invalid_params(c):
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}
    rpc_error(post(c, body, headers=modern_headers("tools/list")), 400, -32602)


def test_unsupported_protocol_version(c):
    body = modern_request("tools/list", version="2099-01-01")
    h = modern_headers("tools/list")
    h["MCP-Protocol-Version"] = "2099-01-01"
    r = post(c, body, headers=h)
    err = rpc_error(r, 400, -32022)
    assert MODERN in err["data"]["supported"] and err["data"]["requested"] == "2099-01-01", err
    # An older revision that this server does not speak: 400 too.
    h["MCP-Protocol-Version"] = "2024-11-05"
    r = post(c, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=h)
    assert r.status == 400, r


def test_notifications_are_accepted_without_body(c):
    r = post(c, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                 "params": {"requestId": 1}},
             headers={"Accept": ACCEPT, "MCP-Protocol-Version": MODERN,
                      "Mcp-Method": "notifications/cancelled"})
    assert r.status == 202 and r.raw == b"", r


def test_get_on_the_endpoint_offers_no_stream(c):
    r = c.get(MCP, headers={"Accept": "text/event-stream"})
    assert r.status == 405, r


# -- authentication and transport security -------------------------------------------------
def test_401_without_or_with_a_wrong_token(c):
    for kw in ({"auth": False}, {"token": "wrong"}):
        r = c.request("POST", MCP, data=json.dumps(modern_request("tools/list")),
                      headers={"Accept": ACCEPT}, **kw)
        assert r.status == 401, r
        # The reference's "error" key, and beside it the one error shape.
        assert r.body["error"] == "internal service authentication failed", r
        assert r.body["detail"]["code"] == "SANDBOX_UNAUTHORIZED", r
        assert "Authorization: Bearer" in r.body["detail"]["message"], r
        assert r.headers.get("Content-Type") == "application/json", r
        assert r.headers.get("WWW-Authenticate") == "Bearer", r
        assert r.headers.get("Content-Length") == str(len(r.raw)), r
    # Other routes: the REST shape, the same challenge.
    r = c.get("/api/v1/sandboxes/x", auth=False)
    assert r.status == 401 and r.body["detail"]["code"] == "SANDBOX_UNAUTHORIZED", r
    assert r.headers.get("WWW-Authenticate") == "Bearer", r


def test_wrong_host_is_refused(c, daemon):
    for host in ("evil.example", f"evil.example:{daemon.port}", f"127.0.0.1.evil:{daemon.port}",
                 "localhost:80x"):
        r = post(c, modern_request("tools/list"),
                 headers=dict(modern_headers("tools/list"), Host=host))
        assert r.status == 421, (host, r)
    for host in (f"127.0.0.1:{daemon.port}", f"localhost:{daemon.port}", "localhost", "test"):
        r = post(c, modern_request("tools/list"),
                 headers=dict(modern_headers("tools/list"), Host=host))
        assert r.status == 200, (host, r)


def test_any_origin_is_refused(c, daemon):
    for origin in ("http://evil.example", f"http://127.0.0.1:{daemon.port}", "null"):
        r = post(c, modern_request("tools/list"),
                 headers=dict(modern_headers("tools/list"), Origin=origin))
        assert r.status == 403, (origin, r)


def test_non_json_content_type_is_refused(c):
    for ct in ("text/plain", "application/x-www-form-urlencoded", "application/jsonx"):
        r = post(c, modern_request("tools/list"),
                 headers=dict(modern_headers("tools/list"), **{"Content-Type": ct}))
        assert r.status == 400, (ct, r)
    r = post(c, modern_request("tools/list"),
             headers=dict(modern_headers("tools/list"),
                          **{"Content-Type": "application/json; charset=utf-8"}))
    assert r.status == 200, r


def test_allowed_hosts_come_from_the_configuration(daemon_factory):
    d = daemon_factory({"SANDBOX_MCP_ALLOWED_HOSTS": "mcp.internal:*,gateway.internal",
                        "SANDBOX_ADVERTISE_HOST": "worker-7.internal"})
    c = d.client()
    for host, status in (("mcp.internal:9000", 200), ("gateway.internal", 200),
                         ("gateway.internal:9000", 421), ("mcp.internal", 421),
                         ("worker-7.internal", 200), (f"worker-7.internal:{d.port}", 200),
                         ("worker-7.internal:1", 421), (f"127.0.0.1:{d.port}", 421),
                         ("localhost", 421)):
        r = post(c, modern_request("tools/list"),
                 headers=dict(modern_headers("tools/list"), Host=host))
        assert r.status == status, (host, r)


# -- the initialize-based revisions, served statelessly ---------------------------------
@pytest.mark.parametrize("version", LEGACY)
def test_legacy_initialize_flow(c, version):
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "legacy-client", "version": "1.0"}}}
    r = post(c, init, headers={"Accept": ACCEPT})
    assert r.status == 200, r
    assert r.headers.get("Mcp-Session-Id") is None, "no session is issued"
    result = r.body["result"]
    assert result["protocolVersion"] == version, result
    assert result["serverInfo"]["name"] == "agent-sandbox", result
    assert result["serverInfo"]["version"], result
    assert result["capabilities"] == {"tools": {}}, result
    assert "sandbox_resolve" in result["instructions"], result
    assert "resultType" not in result, result

    h = {"Accept": ACCEPT, "MCP-Protocol-Version": version}
    r = post(c, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
    assert r.status == 202 and r.raw == b"", r

    # No _meta, no Mcp-Method / Mcp-Name: the earlier revisions have none.
    r = post(c, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=h)
    assert r.status == 200, r
    assert {t["name"] for t in r.body["result"]["tools"]} == TOOLS | OURS, r
    assert "resultType" not in r.body["result"], r

    r = post(c, {"jsonrpc": "2.0", "id": "two", "method": "tools/call",
                 "params": {"name": "sandbox_profile", "arguments": {}}}, headers=h)
    assert r.status == 200 and r.body["id"] == "two", r
    result = r.body["result"]
    assert result["isError"] is False and result["structuredContent"]["stateless"] is True, r

    sid = uid("legacy")
    r = post(c, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                 "params": {"name": "sandbox_status", "arguments": {"sandbox_id": sid}}},
             headers=h)
    assert r.status == 200 and r.body["result"]["isError"] is True, r
    assert "SANDBOX_NOT_FOUND" in r.body["result"]["content"][0]["text"], r

    r = post(c, {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                 "params": {"name": "nope", "arguments": {}}}, headers=h)
    assert r.status == 200 and r.body["error"]["code"] == -32602, r
    r = post(c, {"jsonrpc": "2.0", "id": 5, "method": "server/discover"}, headers=h)
    assert r.body["error"]["code"] == -32601, r


def test_legacy_initialize_with_another_version_gets_the_newest(c):
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2024-11-05", "capabilities": {},
                       "clientInfo": {"name": "old", "version": "1"}}}
    r = post(c, init, headers={"Accept": ACCEPT})
    assert r.status == 200 and r.body["result"]["protocolVersion"] == "2025-11-25", r


def test_legacy_request_without_the_header_is_not_served(c):
    # Only initialize may come without MCP-Protocol-Version.
    r = post(c, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers={"Accept": ACCEPT})
    assert r.status == 400, r


# -- helpers needing raw header control ----------------------------------------------------
def raw_post(c, body, header_items):
    """POST with header lines as given (repeats included)."""
    conn = http.client.HTTPConnection(c.host, c.port, timeout=30)
    try:
        conn.putrequest("POST", MCP)
        conn.putheader("Authorization", "Bearer " + c.token)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        for k, v in header_items:
            conn.putheader(k, v)
        conn.endheaders(body)
        r = conn.getresponse()
        return Resp(r.status, r.headers, r.read())
    finally:
        conn.close()



# -- ours: directories, moves, text files ------------------------------------------------
def test_our_file_tools_list_make_move_delete_and_read_text(c):
    sid = uid("mcp-files")
    ok(c, "sandbox_resolve", sandbox_id=sid, workspace_scope_id="s")
    gen = ok(c, "sandbox_status", sandbox_id=sid)["generation"]
    ok(c, "sandbox_create", sandbox_id=sid, generation=gen)
    base = {"sandbox_id": sid, "generation": gen}
    try:
        assert ok(c, "sandbox_make_dir", **base, path="/workspace/a/b", parents=True) == \
            {"status": "ok", "path": "/workspace/a/b"}
        text = "héllo, wörld\nzweite Zeile ✓\n"
        w = ok(c, "sandbox_write_text", **base, path="/workspace/a/b/t.txt", text=text)
        assert w["status"] == "WRITTEN" and w["bytes"] == len(text.encode()), w
        r = ok(c, "sandbox_read_text", **base, path="/workspace/a/b/t.txt")
        assert r["text"] == text and r["bytes"] == len(text.encode()), r
        # The same bytes through the reference's base64 tool.
        b = ok(c, "sandbox_read_file", **base, path="/workspace/a/b/t.txt")
        assert base64.b64decode(b["content_base64"]).decode() == text
        listing = ok(c, "sandbox_list_dir", **base, path="/workspace/a/b")
        assert [e["name"] for e in listing["entries"]] == ["t.txt"] and listing["total"] == 1
        assert listing["entries"][0]["type"] == "file"
        moved = ok(c, "sandbox_move_path", **base, source="/workspace/a/b/t.txt",
                   destination="/workspace/a/u.txt")
        assert moved["status"] == "ok", moved
        assert [e["name"] for e in ok(c, "sandbox_list_dir", **base, path="/workspace/a")
                ["entries"]] == ["b", "u.txt"]
        # Binary content is refused as text, and named the way out.
        ok(c, "sandbox_write_file", **base, path="/workspace/bin",
           content_base64=base64.b64encode(b"\xff\xfe\x00").decode())
        msg = tool_error(c, "sandbox_read_text", **base, path="/workspace/bin")
        assert "not UTF-8" in msg and "sandbox_read_file" in msg, msg
        # A directory that is not empty needs recursive.
        tool_error(c, "sandbox_delete_path", **base, path="/workspace/a")
        ok(c, "sandbox_delete_path", **base, path="/workspace/a", recursive=True)
        assert [e["name"] for e in ok(c, "sandbox_list_dir", **base, path="/workspace")
                ["entries"]] == ["bin"]
        # Bad arguments are the tool's refusal, fields named.
        assert "path" in tool_error(c, "sandbox_list_dir", **base)
        assert "limit" in tool_error(c, "sandbox_list_dir", **base, path="/workspace", limit=0)
        assert "text" in tool_error(c, "sandbox_write_text", **base, path="/workspace/x", text=5)
        # A stale generation is refused like every other tool's.
        stale = {"sandbox_id": sid, "generation": gen + 5}
        assert "STALE" in tool_error(c, "sandbox_list_dir", **stale, path="/workspace")
    finally:
        ok(c, "sandbox_release", sandbox_id=sid)
