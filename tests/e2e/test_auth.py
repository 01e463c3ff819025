"""Authentication (API.md §0.2) and the public paths that need no token."""

import uuid

import pytest

from sandloom_client import API, assert_error

AUTH_MESSAGE = "internal service authentication failed"


def protected_requests(sid, gen=1):
    """(method, path, json body or None) for every /api/v1 route of this build."""
    p = f"{API}/{sid}"
    q = f"?path=%2Fworkspace&generation={gen}"
    return [
        ("POST", f"{API}/resolve", {"sandbox_id": sid, "workspace_scope_id": "scope"}),
        ("GET", p, None),
        ("POST", p, {"generation": gen}),
        ("DELETE", p, None),
        ("GET", p + "/audit", None),
        ("POST", p + "/exec", {"exec_id": "auth-check", "generation": gen,
                               "argv": ["sh", "-c", "echo pwned > /workspace/pwned"]}),
        ("PUT", p + "/files", {"generation": gen, "path": "/workspace/pwned",
                               "content_base64": "cHduZWQ="}),
        ("GET", p + "/files" + q, None),
        ("GET", p + "/files/list" + q, None),
        ("POST", p + "/files/mkdir", {"generation": gen, "path": "/workspace/pwned-dir"}),
        ("POST", p + "/files/delete", {"generation": gen, "path": "/workspace/keep.txt",
                                       "recursive": True}),
        ("POST", p + "/files/move", {"generation": gen, "source": "/workspace/keep.txt",
                                     "destination": "/workspace/moved.txt"}),
        # unknown path and wrong method under /api/v1: still 401 first
        ("GET", "/api/v1/no-such-route", None),
        ("PATCH", p, {"generation": gen}),
    ]


BAD_AUTH = {
    "missing": None,
    "wrong token": "Bearer wrong-token-value",
    "lowercase scheme": "bearer {token}",
    "uppercase scheme": "BEARER {token}",
    "two spaces": "Bearer  {token}",
    "no scheme": "{token}",
    "basic scheme": "Basic {token}",
    "token prefix": "Bearer {token_prefix}",
    "token plus suffix": "Bearer {token}x",
}


@pytest.mark.parametrize("variant", sorted(BAD_AUTH))
def test_every_api_route_needs_the_token(client, ready_sandbox, variant):
    sb = ready_sandbox
    assert sb.write("/workspace/keep.txt", b"keep").status == 200
    template = BAD_AUTH[variant]
    for method, path, body in protected_requests(sb.id, sb.generation):
        kw = {}
        if body is not None:
            kw["json_body"] = body
        if template is None:
            kw["auth"] = False
        else:
            kw["authorization"] = template.format(token=client.token,
                                                  token_prefix=client.token[:-1])
        r = client.request(method, path, **kw)
        assert r.status == 401, f"{variant}: {method} {path} -> {r!r}"
        assert_error(r, 401, "SANDBOX_UNAUTHORIZED", AUTH_MESSAGE)
        assert client.token.encode() not in r.raw

    # Nothing happened to the sandbox.
    r = sb.route()
    assert r.status == 200 and r.body["status"] == "READY" and r.body["generation"] == 1, r
    r = sb.list("/workspace")
    assert [e["name"] for e in r.body["entries"]] == ["keep.txt"], r


def test_unauthenticated_resolve_creates_nothing(client):
    sid = "auth-nothing-" + uuid.uuid4().hex[:12]
    r = client.post(f"{API}/resolve", json={"sandbox_id": sid, "workspace_scope_id": "s"},
                    auth=False)
    assert_error(r, 401, "SANDBOX_UNAUTHORIZED", AUTH_MESSAGE)
    assert_error(client.get(f"{API}/{sid}"), 404, "SANDBOX_NOT_FOUND")


def test_health_is_public(client):
    for kw in ({"auth": False}, {"authorization": "Bearer wrong"}):
        r = client.get("/health", **kw)
        assert r.status == 200, r
        assert r.raw == b"ok", r
        assert r.content_type.startswith("text/plain"), r


def test_healthz_is_public(client):
    r = client.get("/healthz", auth=False)
    assert r.status == 200 and r.is_json and isinstance(r.body, dict), r
    assert r.body.get("mode") == "agent-sandbox"


def test_openapi_is_public(client):
    r = client.get("/openapi.json", auth=False)
    assert r.status == 200 and r.is_json and isinstance(r.body, dict), r
    assert str(r.body.get("openapi", "")).startswith("3."), r.body.get("openapi")


@pytest.mark.parametrize("path", ["/docs", "/admin"])
def test_html_pages_are_public_and_self_contained(client, path):
    r = client.get(path, auth=False)
    assert r.status == 200, r
    assert r.content_type.startswith("text/html"), r
    text = r.raw.decode("utf-8", errors="replace")
    assert "<html" in text.lower(), r
    assert 'src="http' not in text and "src='http" not in text, \
        f"{path} loads an external script (no CDN allowed)"
    if path == "/admin":
        assert text.lstrip().lower().startswith("<!doctype html"), r
