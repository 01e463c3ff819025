"""/openapi.json is complete and accurate: every route it lists exists in
the router, and every route of this build is listed (COMPAT.md §2)."""

import re
import uuid

import pytest

from sandloom_client import API, error_detail

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
REQUIRED = {
    ("POST", "/api/v1/sandboxes/resolve"),
    ("GET", "/api/v1/sandboxes/{}"),
    ("POST", "/api/v1/sandboxes/{}"),
    ("DELETE", "/api/v1/sandboxes/{}"),
    ("GET", "/api/v1/sandboxes/{}/audit"),
    ("POST", "/api/v1/sandboxes/{}/exec"),
    ("PUT", "/api/v1/sandboxes/{}/files"),
    ("GET", "/api/v1/sandboxes/{}/files"),
    ("GET", "/api/v1/sandboxes/{}/files/list"),
    ("POST", "/api/v1/sandboxes/{}/files/mkdir"),
    ("POST", "/api/v1/sandboxes/{}/files/delete"),
    ("POST", "/api/v1/sandboxes/{}/files/move"),
}
PARAM = re.compile(r"\{[^}/]+\}")


@pytest.fixture(scope="module")
def spec(daemon):
    r = daemon.client().get("/openapi.json", auth=False)
    assert r.status == 200 and r.is_json and isinstance(r.body, dict), r
    return r.body


def operations(spec):
    ops = []
    for path, item in spec.get("paths", {}).items():
        for method in item:
            if method.lower() in HTTP_METHODS:
                ops.append((method.upper(), path))
    return ops


def concrete(path):
    def sub(m):
        name = m.group(0)[1:-1]
        if name == "sandbox_id":
            return "nosuch-sbx"
        if name == "exec_id":
            return "nosuch-exec"
        return "nosuch"
    return PARAM.sub(sub, path)


def test_info(spec):
    assert str(spec.get("openapi", "")).startswith("3."), spec.get("openapi")
    assert spec["info"]["title"] == "Sandloom"
    assert spec["info"]["version"] == "0.3.0"


def test_every_route_of_this_build_is_listed(spec):
    listed = {(m, PARAM.sub("{}", p)) for m, p in operations(spec)}
    missing = REQUIRED - listed
    assert not missing, f"/openapi.json lacks {sorted(missing)}"


def test_every_listed_route_exists_in_the_router(spec, daemon):
    c = daemon.client()
    ops = operations(spec)
    assert ops, "no operations listed"
    problems = []
    for method, path in ops:
        url = concrete(path)
        kw = {}
        if method in ("POST", "PUT", "PATCH"):
            kw["json_body"] = {}
        r = c.request(method, url, **kw)
        code = None
        if r.is_json and isinstance(r.body, dict) and isinstance(r.body.get("detail"), dict):
            code = r.body["detail"].get("code")
        if r.status == 405 or (r.status == 404 and code == "NOT_FOUND"):
            problems.append(f"{method} {path} -> {r.status} {code}")
        if r.status >= 500 and r.status not in (501, 503):
            problems.append(f"{method} {path} -> {r.status} (server error on a dummy request)")
        # The MCP endpoint answers JSON-RPC, not the REST error shape (MCP.md §4).
        if r.status >= 400 and "/mcp/" not in path:
            try:
                error_detail(r)  # every error keeps the one JSON shape
            except AssertionError as e:
                problems.append(f"{method} {path} -> error body shape: {e}")
    assert not problems, "/openapi.json routes misbehave:\n" + "\n".join(problems)


def test_every_listed_api_route_needs_the_token(spec, daemon):
    c = daemon.client()
    for method, path in operations(spec):
        if not path.startswith("/api/v1/"):
            continue
        kw = {"auth": False}
        if method in ("POST", "PUT", "PATCH"):
            kw["json_body"] = {}
        r = c.request(method, concrete(path), **kw)
        assert r.status == 401, f"{method} {path} without a token -> {r!r}"
        if "/mcp/" in path:
            # MCP.md §1.1: the MCP mount's own 401 body.
            # The reference's key, with the one error shape beside it.
            assert r.body["error"] == "internal service authentication failed", r
            assert r.body["detail"]["code"] == "SANDBOX_UNAUTHORIZED", r
        else:
            assert error_detail(r)["code"] == "SANDBOX_UNAUTHORIZED"



def _schema_fields(name, schema, where):
    """(path, property) for every property, nested objects and items too."""
    for pname, prop in (schema.get("properties") or {}).items():
        yield f"{where}.{pname}", prop
        yield from _schema_fields(name, prop, f"{where}.{pname}")
        if isinstance(prop.get("items"), dict):
            yield from _schema_fields(name, prop["items"], f"{where}.{pname}[]")


def test_every_operation_field_and_parameter_is_described(spec):
    missing = []
    for name, schema in spec["components"]["schemas"].items():
        if not schema.get("description"):
            missing.append(f"schema {name}")
        for where, prop in _schema_fields(name, schema, name):
            if not prop.get("description"):
                missing.append(where)
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if not op.get("description"):
                missing.append(f"{method.upper()} {path}")
            for p in op.get("parameters", []):
                if not p.get("description"):
                    missing.append(f"{method.upper()} {path} parameter {p['name']}")
    assert not missing, f"{len(missing)} without a description: {missing[:20]}"


def test_every_route_lists_the_errors_it_can_answer(spec):
    """Each operation names, per status, the codes it can answer
    (x-error-codes); a route that needs the token lists 401, a route with a
    body 422, and every listed code answers that status (api/errors.c)."""
    for path, item in spec["paths"].items():
        for method, op in item.items():
            where = f"{method.upper()} {path}"
            errors = {s: r for s, r in op["responses"].items()
                      if s not in ("101", "200", "201", "default")}
            if path not in ("/health", "/healthz", "/openapi.json", "/docs"):
                assert errors, f"{where} lists no error"
            for status, r in errors.items():
                assert "x-error-codes" in r and r["description"], (where, status, r)
                for code in r["x-error-codes"]:
                    assert f"`{code}`" in r["description"], (where, status, code)
            if op.get("security"):
                assert "SANDBOX_UNAUTHORIZED" in errors["401"]["x-error-codes"], where
            # Every API operation that answers JSON shows an example answer.
            success = (op["responses"].get("200") or op["responses"].get("201")
                       or op["responses"]["101"])
            ok = success.get("content", {}).get("application/json")
            if path.startswith("/api/v1/") and ok and not path.endswith("mcp/streamable-http"):
                assert ok.get("example") is not None, f"{where} has no response example"
            if "requestBody" in op:
                assert "422" in errors, f"{where} takes a body but lists no 422"
                assert op["requestBody"]["content"]["application/json"].get("example") is not None \
                    or path.endswith("mcp/streamable-http"), f"{where} has no request example"


def test_listed_codes_answer_their_status(spec, client):
    """The status a code is listed under is the one the server answers it
    with: provoke a few, and compare with the code table for all (via an
    unknown id where a code needs a state we cannot make cheaply)."""
    codes = {}
    for item in spec["paths"].values():
        for op in item.values():
            for status, r in op["responses"].items():
                for code in r.get("x-error-codes", []):
                    codes.setdefault(code, set()).add(status)
    for code, statuses in codes.items():
        assert len(statuses) == 1, f"{code} is listed under {sorted(statuses)}"
    r = client.get(f"{API}/no-such-sandbox-{uuid.uuid4().hex[:6]}")
    assert str(r.status) in codes[r.body["detail"]["code"]], r
    r = client.post(f"{API}/resolve", json={"sandbox_id": "resolve", "workspace_scope_id": "s"})
    assert codes[r.body["detail"]["code"]] == {str(r.status)}, r
