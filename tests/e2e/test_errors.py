"""Error shapes, request validation, body cap, routing errors
(API.md §0.3–§0.4, COMPAT.md §2)."""

import http.client
import json
import socket
import uuid

import pytest

from sandloom_client import API, Resp, assert_error, assert_invalid

# Per-route body caps (api/router.h): the file write, an exec, the rest.
BODY_CAP = 48 * 1024 * 1024 + 64 * 1024
EXEC_CAP = 26 * 1024 * 1024
SMALL_CAP = 64 * 1024


def marker():
    return "MARKER" + uuid.uuid4().hex[:12]


def assert_not_echoed(r, *values):
    for v in values:
        assert v.encode() not in r.raw, f"input value {v!r} echoed in {r!r}"
        assert v.encode() not in str(dict(r.headers)).encode(), f"{v!r} echoed in headers"


# -- malformed bodies -----------------------------------------------------------
@pytest.mark.parametrize("raw", ["{not json", '{"sandbox_id": "abc-def", ', "[1, 2]",
                                 '["sandbox_id"]', "null", "42", '"a string"', "",
                                 '{"sandbox_id": "abc\\ud800"}'])
def test_malformed_or_non_object_body_is_422(client, raw):
    r = client.post(f"{API}/resolve", data=raw)
    assert_invalid(r)


def test_missing_body_is_422(client, new_sandbox):
    sb = new_sandbox()
    assert sb.resolve().status == 200
    r = client.post(sb.path)
    assert_invalid(r, "request")
    r = client.post(sb.path, data="{not json MARKERjson")
    assert_invalid(r, "request")
    assert_not_echoed(r, "MARKERjson")


# -- field validation, never echoing the value -------------------------------
def test_resolve_field_validation(client):
    m = marker()
    vid = "valid-" + uuid.uuid4().hex[:12]
    cases = [
        ({"sandbox_id": f"bad id/{m}", "workspace_scope_id": "s"}, "sandbox_id"),
        ({"sandbox_id": f"{m}!", "workspace_scope_id": "s"}, "sandbox_id"),
        ({"sandbox_id": "ab", "workspace_scope_id": "s"}, "sandbox_id"),
        ({"sandbox_id": "a" * 129, "workspace_scope_id": "s"}, "sandbox_id"),
        ({"sandbox_id": 12345, "workspace_scope_id": "s"}, "sandbox_id"),
        ({"workspace_scope_id": "s"}, "sandbox_id"),
        ({"sandbox_id": vid, "workspace_scope_id": ""}, "workspace_scope_id"),
        ({"sandbox_id": vid, "workspace_scope_id": m * 20}, "workspace_scope_id"),
        ({"sandbox_id": vid}, "workspace_scope_id"),
        ({"sandbox_id": vid, "workspace_scope_id": "s", "profile": ""}, "profile"),
        ({"sandbox_id": vid, "workspace_scope_id": "s", "profile": m * 6}, "profile"),
    ]
    for body, field in cases:
        r = client.post(f"{API}/resolve", json=body)
        assert_invalid(r, field)
        assert_not_echoed(r, m)
    assert_error(client.get(f"{API}/{vid}"), 404, "SANDBOX_NOT_FOUND")


def test_generation_type_and_range(client, new_sandbox):
    sb = new_sandbox()
    assert sb.resolve().status == 200
    m = marker()
    for gen in (f"abc-{m}", 0, -1, 1.5, None, [1], {"g": 1}):
        r = client.post(sb.path, json={"generation": gen})
        assert_invalid(r, "generation")
        assert_not_echoed(r, m)
    r = client.post(sb.path, json={})
    assert_invalid(r, "generation")
    # Still ASSIGNED: nothing was connected.
    assert sb.route().body["status"] == "ASSIGNED"


def test_query_validation(ready_sandbox):
    sb = ready_sandbox
    c = sb.c
    m = marker()
    r = c.get(sb.path + "/files", params={"path": "/workspace/x", "generation": f"g{m}"})
    assert_invalid(r, "generation")
    assert_not_echoed(r, m)
    r = c.get(sb.path + "/files", params={"path": "/workspace/x", "generation": 0})
    assert_invalid(r, "generation")
    r = c.get(sb.path + "/files", params={"path": "/workspace/x"})
    assert_invalid(r, "generation")
    r = c.get(sb.path + "/files", params={"generation": 1})
    assert_invalid(r, "path")
    for limit in (0, 10001, f"x{m}"):
        r = c.get(sb.path + "/files/list", params={"path": "/workspace", "generation": 1,
                                                   "limit": limit})
        assert_invalid(r, "request")
        assert_not_echoed(r, m)
    r = c.get(sb.path + "/files/list", params={"path": "/workspace", "generation": 1,
                                               "offset": -1})
    assert_invalid(r, "request")


def test_file_body_validation(ready_sandbox):
    sb = ready_sandbox
    c = sb.c
    m = marker()
    g = sb.generation
    cases = [
        ("PUT", "/files", {"generation": g, "path": "", "content_base64": ""}, "path"),
        ("PUT", "/files", {"generation": g, "path": m * 250, "content_base64": ""}, "path"),
        ("PUT", "/files", {"generation": g, "path": "/workspace/x"}, "content_base64"),
        ("PUT", "/files", {"generation": g, "path": "/workspace/x", "content_base64": 5},
         "content_base64"),
        ("PUT", "/files", {"generation": f"{m}", "path": "/workspace/x", "content_base64": ""},
         "generation"),
        ("POST", "/files/mkdir", {"generation": g, "path": "/workspace/x", "parents": f"{m}"},
         "request"),
        ("POST", "/files/delete", {"generation": g, "path": ""}, "path"),
        ("POST", "/files/move", {"generation": g, "source": "/workspace/x"}, "request"),
    ]
    for method, suffix, body, field in cases:
        r = c.request(method, sb.path + suffix, json_body=body)
        assert_invalid(r, field)
        assert_not_echoed(r, m)


def test_exec_body_never_echoed(ready_sandbox):
    sb = ready_sandbox
    m = marker()
    cases = [
        ({"argv": [f"echo {m}"], "cwd": f"/etc/{m}"}, "cwd"),
        ({"argv": [f"echo {m}"], "timeout_seconds": f"{m}"}, "timeout_seconds"),
        ({"argv": [f"echo {m}"], "env": {"K": {"nested": m}}}, "env"),
        ({"argv": [f"echo {m}"], "background": f"{m}"}, "background"),
        ({"argv": [f"echo {m}"], "exec_scope": f"bad {m}"}, "exec_scope"),
        ({"argv": [f"echo {m}"], "sensitive_env": {f"K{i}": m for i in range(9)}},
         "sensitive_env"),
    ]
    for fields, loc in cases:
        r = sb.exec(**fields)
        assert_invalid(r, loc)
        assert_not_echoed(r, m)
    r = sb.exec(["true"], exec_id=f"bad id {m}")
    assert_invalid(r, "exec_id")
    assert_not_echoed(r, m)


def test_unknown_ids_not_echoed(client):
    m = marker()
    r = client.get(f"{API}/sbx-{m}")
    assert_error(r, 404, "SANDBOX_NOT_FOUND")
    assert_not_echoed(r, m)
    r = client.get(f"/api/v1/{m}/nothing")
    assert_error(r, 404, "NOT_FOUND")
    assert_not_echoed(r, m)


# -- routing ------------------------------------------------------------------------
def test_unknown_path_is_404(client):
    for path in ("/api/v1/no-such-route", f"{API}/x-id/nope", f"{API}/x-id/files/nope",
                 "/api/v2/sandboxes"):
        assert_error(client.get(path), 404, "NOT_FOUND")
    # Outside /api/v1 no token is needed to learn that nothing is there.
    assert_error(client.get(f"/nope-{uuid.uuid4().hex}", auth=False), 404, "NOT_FOUND")


def allow_set(r):
    allow = r.headers.get("Allow")
    assert allow, f"405 without an Allow header: {r!r}"
    return {m.strip().upper() for m in allow.split(",") if m.strip()}


def test_wrong_method_is_405_with_allow(client):
    r = client.request("PATCH", f"{API}/x-id", json_body={"generation": 1})
    assert_error(r, 405, "METHOD_NOT_ALLOWED")
    allowed = allow_set(r)
    assert {"GET", "POST", "DELETE"} <= allowed and "PATCH" not in allowed, allowed

    r = client.request("DELETE", f"{API}/x-id/exec")
    assert_error(r, 405, "METHOD_NOT_ALLOWED")
    assert "POST" in allow_set(r) and "DELETE" not in allow_set(r)

    r = client.request("POST", f"{API}/x-id/files/list", json_body={})
    assert_error(r, 405, "METHOD_NOT_ALLOWED")
    assert "GET" in allow_set(r) and "POST" not in allow_set(r)

    r = client.request("DELETE", f"{API}/x-id/files")
    assert_error(r, 405, "METHOD_NOT_ALLOWED")
    assert {"GET", "PUT"} <= allow_set(r)

    # A public path with the wrong method: 405, no token needed.
    r = client.request("POST", "/health", json_body={}, auth=False)
    assert_error(r, 405, "METHOD_NOT_ALLOWED")
    assert "GET" in allow_set(r)


# -- body size cap -----------------------------------------------------------------
def raw_exchange(port, payload, timeout=15.0, method="PUT"):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close early; read what it said
        resp = http.client.HTTPResponse(s, method=method)
        try:
            resp.begin()
        except (TimeoutError, socket.timeout):
            pytest.fail(f"no answer within {timeout:.0f} s: the server seems to wait for the "
                        f"whole oversized body instead of refusing it from the headers",
                        pytrace=False)
        try:
            raw = resp.read()
        except (ConnectionResetError, http.client.IncompleteRead) as e:
            raw = getattr(e, "partial", b"")
        return Resp(resp.status, resp.headers, raw)
    finally:
        s.close()


def test_oversized_body_is_413_without_reading_it(daemon, client):
    head = (f"PUT {API}/x-id/files HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{daemon.port}\r\n"
            f"Authorization: Bearer {daemon.token}\r\n"
            f"Content-Type: application/json\r\n"
            f"Content-Length: {BODY_CAP + 1}\r\n\r\n").encode()
    r = raw_exchange(daemon.port, head + b'{"generation": 1, "path": "/workspace/a", '
                     b'"content_base64": "' + b"QUFB" * 256)
    assert_error(r, 413, "SANDBOX_REQUEST_TOO_LARGE")

    # A far larger claim, on the POST exec route.
    head = (f"POST {API}/x-id/exec HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{daemon.port}\r\n"
            f"Authorization: Bearer {daemon.token}\r\n"
            f"Content-Type: application/json\r\n"
            f"Content-Length: {10 * 1024 ** 3}\r\n\r\n").encode()
    r = raw_exchange(daemon.port, head + b"{", method="POST")
    assert_error(r, 413, "SANDBOX_REQUEST_TOO_LARGE")

    # The daemon is still fine.
    r = client.get("/health", auth=False)
    assert r.status == 200 and r.raw == b"ok"


def test_body_at_the_cap_is_accepted_for_parsing(daemon, client):
    """Exactly the cap is not too large: the body is read and then refused
    as invalid JSON (422), not 413."""
    head = (f"PUT {API}/x-id/files HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{daemon.port}\r\n"
            f"Authorization: Bearer {daemon.token}\r\n"
            f"Content-Type: application/json\r\n"
            f"Content-Length: {BODY_CAP}\r\n\r\n").encode()
    r = raw_exchange(daemon.port, head + b"x" * BODY_CAP, timeout=60.0, method="PUT")
    assert r.status == 422, r
    assert_invalid(r)
    r = client.get("/health", auth=False)
    assert r.status == 200


def test_error_bodies_are_json_objects(client):
    """Every error is application/json {"detail": {"code", "message"}}."""
    samples = [
        client.get(f"{API}/nosuch-{uuid.uuid4().hex}"),
        client.get(f"{API}/x-id", auth=False),
        client.post(f"{API}/resolve", data="{"),
        client.get("/api/v1/nothing-here"),
        client.request("PATCH", f"{API}/x-id"),
    ]
    for r in samples:
        assert r.status >= 400, r
        assert r.content_type.split(";")[0].strip() == "application/json", r
        body = json.loads(r.raw)
        assert set(body) == {"detail"}, body
        assert {"code", "message"} <= set(body["detail"]), body


def test_chunked_body_over_the_cap_is_413(daemon):
    """The cap also holds for a body without Content-Length (chunked)."""
    s = socket.create_connection(("127.0.0.1", daemon.port), timeout=30)
    try:
        s.sendall((f"POST {API}/resolve HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Authorization: Bearer {daemon.token}\r\nContent-Type: application/json\r\n"
                   f"Transfer-Encoding: chunked\r\n\r\n").encode())
        chunk = b"x" * (1024 * 1024)
        try:
            for _ in range(SMALL_CAP // len(chunk) + 2):
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            s.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused early: fine
        resp = http.client.HTTPResponse(s, method="POST")
        resp.begin()
        try:
            raw = resp.read()
        except (ConnectionResetError, http.client.IncompleteRead) as e:
            raw = getattr(e, "partial", b"")
        r = Resp(resp.status, resp.headers, raw)
    finally:
        s.close()
    assert_error(r, 413, "SANDBOX_REQUEST_TOO_LARGE")


def test_expect_100_continue(daemon, ready_sandbox):
    """curl sends `Expect: 100-continue` for larger bodies."""
    body = json.dumps({"generation": ready_sandbox.generation, "path": "/workspace/expect.bin",
                       "content_base64": "QUJD" * 2000}).encode()
    s = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
    try:
        s.sendall((f"PUT {ready_sandbox.path}/files HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Authorization: Bearer {daemon.token}\r\nContent-Type: application/json\r\n"
                   f"Expect: 100-continue\r\nContent-Length: {len(body)}\r\n\r\n").encode())
        interim = s.recv(64)
        assert interim.startswith(b"HTTP/1.1 100"), interim
        s.sendall(body)
        resp = http.client.HTTPResponse(s, method="PUT")
        resp.begin()
        r = Resp(resp.status, resp.headers, resp.read())
    finally:
        s.close()
    assert r.status == 200, r
    assert ready_sandbox.read_bytes("/workspace/expect.bin") == b"ABC" * 2000


def test_persistent_connection(daemon, ready_sandbox):
    """Several requests, errors included, over one keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
    auth = {"Authorization": "Bearer " + daemon.token, "Content-Type": "application/json"}
    try:
        seq = [("GET", "/health", None, 200), ("POST", f"{API}/resolve", "{bad", 422),
               ("GET", ready_sandbox.path, None, 200), ("GET", f"{API}/nosuch-zz", None, 404),
               ("POST", ready_sandbox.path + "/exec",
                json.dumps({"exec_id": "ka-" + uuid.uuid4().hex[:8], "generation": 1,
                            "argv": ["echo", "ka"]}), 200),
               ("GET", "/healthz", None, 200)]
        for method, path, body, status in seq:
            conn.request(method, path, body=body, headers=auth)
            r = conn.getresponse()
            raw = r.read()
            assert r.status == status, (method, path, r.status, raw[:300])
    finally:
        conn.close()


def test_small_routes_have_small_caps(daemon, client):
    """Only the file write and exec take large bodies; resolve refuses one
    byte over 64 KiB from the Content-Length alone."""
    head = (f"POST {API}/resolve HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{daemon.port}\r\n"
            f"Authorization: Bearer {daemon.token}\r\n"
            f"Content-Type: application/json\r\n"
            f"Content-Length: {SMALL_CAP + 1}\r\n\r\n").encode()
    r = raw_exchange(daemon.port, head + b"{", method="POST")
    assert_error(r, 413, "SANDBOX_REQUEST_TOO_LARGE")
    head = (f"POST {API}/x-id/exec HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{daemon.port}\r\n"
            f"Authorization: Bearer {daemon.token}\r\n"
            f"Content-Type: application/json\r\n"
            f"Content-Length: {EXEC_CAP + 1}\r\n\r\n").encode()
    r = raw_exchange(daemon.port, head + b"{", method="POST")
    assert_error(r, 413, "SANDBOX_REQUEST_TOO_LARGE")
    assert client.get("/health", auth=False).status == 200


def test_json_container_bomb_is_refused_before_parsing(daemon, client):
    """A body of many tiny objects would expand a thousandfold in memory:
    refused as invalid (422) without building it."""
    bomb = b'{"argv": [' + b",".join([b"{}"] * 2_000_000) + b"]}"
    assert len(bomb) < EXEC_CAP
    r = client.post(f"{API}/x-id/exec", data=bomb, timeout=60)
    assert_invalid(r)
    assert client.get("/health", auth=False).status == 200


def test_a_422_says_which_field_where_and_why(client, ready_sandbox):
    """Ours: each entry's msg names the field and the reason, "in" says body
    or query, "field" spells it as sent; loc stays the reference's."""
    sb = ready_sandbox
    r = sb.list("/workspace", limit=100000)
    d = assert_invalid(r, "request")
    e = d["errors"][0]
    assert e["in"] == "query" and e["field"] == "limit", e
    assert e["msg"] == "query parameter 'limit' must be an integer from 1 to 10000", e
    assert "100000" not in json.dumps(d), "the input value is never echoed"

    r = sb.exec(["echo", 5])
    e = assert_invalid(r, "argv")["errors"][0]
    assert e["field"] == "argv[1]" and e["in"] == "body", e
    assert "must be a string" in e["msg"], e

    r = client.post(f"{API}/resolve", json={"sandbox_id": "x", "workspace_scope_id": ""})
    d = assert_invalid(r)
    msgs = [e["msg"] for e in d["errors"]]
    assert "body field 'sandbox_id' must be 3 to 128 characters" in msgs, msgs
    assert "body field 'workspace_scope_id' must be 1 to 191 characters" in msgs, msgs
    assert d["message"] == f"request validation failed: {msgs[0]} (and 1 more in errors)", d

    r = sb.c.post(sb.path + "/templates", json={"generation": sb.generation, "name": "Bad Name"})
    e = assert_invalid(r, "request")["errors"][0]
    assert e["field"] == "name" and "lowercase" in e["msg"], e

    r = client.post(f"{API}/resolve", data=b"{not json", headers={"Content-Type":
                                                                   "application/json"})
    e = assert_invalid(r, "request")["errors"][0]
    assert e["msg"] == "the request body is not valid JSON" and "field" not in e, e


def test_refusals_say_what_happened_and_what_to_do(client, new_sandbox, daemon_factory):
    """Ours: the codes and statuses are the reference's; the message is a
    sentence with the state the caller needs (never the sandbox id)."""
    sb = new_sandbox()
    assert sb.resolve().status == 200
    # Resolved, not created.
    d = assert_error(sb.exec(["true"]), 409, "STALE_SANDBOX_GENERATION")
    assert d["message"].startswith("the sandbox is not created on its worker: create it"), d
    assert sb.connect().status == 200
    # Suspended.
    assert sb.c.post(sb.path + "/suspend", json={"generation": sb.generation}).status == 200
    d = assert_error(sb.exec(["true"]), 409, "SANDBOX_SUSPENDED")
    assert "is SUSPENDED: resume it" in d["message"], d
    assert sb.c.post(sb.path + "/resume").status == 200
    # Released: the old generation is stale and the message says why.
    old = sb.generation
    assert sb.release().status == 200
    d = assert_error(sb.exec(["true"], generation=old), 409, "STALE_SANDBOX_ROUTE")
    assert d["message"] == ("the sandbox was released (it is RELEASED at generation "
                            f"{old + 1}): resolve it again to start a new generation"), d
    assert sb.id not in d["message"]
    # A code without a message of its own still answers a sentence.
    live = new_sandbox()
    assert live.resolve().status == 200 and live.connect().status == 200
    r = client.get(f"{API}/{live.id}/exec/no-such-exec", params={"generation": live.generation})
    d = assert_error(r, 404, "EXEC_NOT_FOUND")
    assert d["message"] != "EXEC_NOT_FOUND" and " " in d["message"], d


def test_unknown_fields_are_ignored_and_named_in_warnings(ready_sandbox):
    """The reference ignores fields a route does not know: so do we (the
    request succeeds), and the answer names them (never their values)."""
    sb = ready_sandbox
    r = sb.c.post(sb.path + "/exec", json={"exec_id": "unknown-fields-1", "generation":
                                           sb.generation, "argv": ["echo", "hi"], "timeout": 5,
                                           "colour": "blue"})
    assert r.status == 200 and r.body["stdout"] == "hi\n", r
    assert sorted(r.body["warnings"]) == [
        "unknown field 'colour' was ignored",
        "unknown field 'timeout' was ignored (did you mean 'timeout_seconds'?)"], r.body
    assert "blue" not in r.raw.decode()
    # Known fields only: no warnings key at all.
    r = sb.exec(["true"], timeout_seconds=5)
    assert r.status == 200 and "warnings" not in r.body, r.body
    # A replay says so; the same request again carries no warning.
    r = sb.exec(["echo", "a"], exec_id="replay-me-1")
    assert r.status == 200 and "replayed" not in r.body, r.body
    r = sb.exec(["echo", "a"], exec_id="replay-me-1")
    assert r.body["replayed"] is True and "warnings" not in r.body, r.body
    r = sb.exec(["echo", "b"], exec_id="replay-me-1", extra=1)
    assert r.body["replayed"] is True and r.body["stdout"] == "a\n", r.body
    assert r.body["warnings"] == [
        "this exec_id was used before with a different request: the answer is the earlier "
        "command's", "unknown field 'extra' was ignored"], r.body
    # Other routes too.
    r = sb.write("/workspace/w.txt", "x")
    assert r.status == 200 and "warnings" not in r.body
    r = sb.c.put(sb.path + "/files", json={"generation": sb.generation, "path": "/workspace/w.txt",
                                           "content_base64": "eA==", "mode": "0644"})
    assert r.status == 200 and r.body["warnings"] == ["unknown field 'mode' was ignored"], r.body


def test_ids_that_are_route_names_are_refused_at_resolve(client):
    """/api/v1/sandboxes/resolve, /mcp/..., /diagnostics/...: a sandbox with
    such an id could be resolved but never reached (its routes are taken)."""
    for sid in ("resolve", "mcp", "diagnostics"):
        r = client.post(f"{API}/resolve", json={"sandbox_id": sid, "workspace_scope_id": "s"})
        d = assert_error(r, 400, "SANDBOX_ID_RESERVED")
        assert d["message"] == (f"sandbox id '{sid}' is the name of an API route under "
                                "/api/v1/sandboxes/: choose another id"), d
        assert client.get(f"{API}/{sid}").status in (404, 405), "nothing was stored"
    # Ids that only start like one are fine.
    r = client.post(f"{API}/resolve", json={"sandbox_id": "resolved-1", "workspace_scope_id": "s"})
    assert r.status == 200, r
