"""A tiny standard-library HTTP client for the Sandloom end-to-end tests.

Every call opens a fresh loopback connection (no keep-alive state shared
between tests) and returns a `Resp`, which unpacks as
`(status, headers, body)` where body is the parsed JSON when the response
is JSON, else the decoded text.
"""

import base64
import http.client
import json
import re
import urllib.parse
import uuid

_UNSET = object()


class Resp:
    """One HTTP answer. Unpacks as (status, headers, body)."""

    def __init__(self, status, headers, raw):
        self.status = status
        self.headers = headers  # http.client.HTTPMessage: case-insensitive .get()
        self.raw = raw  # the body bytes as received
        self.content_type = headers.get("Content-Type", "") or ""
        self.body = self._decode()

    def _decode(self):
        text = self.raw.decode("utf-8", errors="replace")
        if "json" in self.content_type.lower():
            try:
                return json.loads(text)
            except ValueError:
                return text
        return text

    @property
    def is_json(self):
        return "application/json" in self.content_type.lower()

    def __iter__(self):
        return iter((self.status, self.headers, self.body))

    def __repr__(self):
        snippet = self.raw[:600].decode("utf-8", errors="replace")
        return f"<Resp {self.status} {self.content_type!r} {snippet!r}>"


class Client:
    def __init__(self, host, port, token, timeout=60.0):
        self.host = host
        self.port = port
        self.token = token
        self.timeout = timeout

    # -- low level ---------------------------------------------------------
    def request(self, method, path, *, params=None, json_body=_UNSET, data=None,
                auth=True, token=None, authorization=None, headers=None, timeout=None):
        """Send one request.

        json_body: any JSON value, serialised and sent with
                   Content-Type: application/json.
        data:      raw bytes/str sent as is (Content-Type application/json
                   unless headers say otherwise).
        auth:      False -> no Authorization header at all.
        token:     use this token instead of the client's.
        authorization: the literal Authorization header value (overrides).
        """
        if params:
            path = path + ("&" if "?" in path else "?") + urllib.parse.urlencode(params)
        hdrs = {}
        body = None
        if json_body is not _UNSET:
            body = json.dumps(json_body).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        elif data is not None:
            body = data.encode("utf-8") if isinstance(data, str) else data
            hdrs["Content-Type"] = "application/json"
        if authorization is not None:
            hdrs["Authorization"] = authorization
        elif auth:
            hdrs["Authorization"] = "Bearer " + (token if token is not None else self.token)
        if headers:
            hdrs.update(headers)
        conn = http.client.HTTPConnection(self.host, self.port,
                                          timeout=timeout or self.timeout)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            r = conn.getresponse()
            raw = r.read()
            return Resp(r.status, r.headers, raw)
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, json=_UNSET, **kw):
        return self.request("POST", path, json_body=json, **kw)

    def put(self, path, json=_UNSET, **kw):
        return self.request("PUT", path, json_body=json, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)


API = "/api/v1/sandboxes"


class Sandbox:
    """Convenience wrapper around the sandbox-scoped public routes.

    Methods return the raw Resp so tests can assert on refusals; the
    resolve()/connect() helpers also record generation/uid on success.
    """

    def __init__(self, client, sandbox_id, scope):
        self.c = client
        self.id = sandbox_id
        self.scope = scope
        self.generation = None
        self.uid = None

    @property
    def path(self):
        return f"{API}/{self.id}"

    def resolve(self, **extra):
        body = {"sandbox_id": self.id, "workspace_scope_id": self.scope}
        body.update(extra)
        r = self.c.post(f"{API}/resolve", json=body)
        if r.status == 200 and isinstance(r.body, dict):
            self.generation = r.body.get("generation")
            self.uid = r.body.get("sandbox_uid")
        return r

    def connect(self, generation=None):
        return self.c.post(self.path, json={"generation": self._gen(generation)})

    def route(self):
        return self.c.get(self.path)

    def audit(self):
        return self.c.get(self.path + "/audit")

    def release(self):
        return self.c.delete(self.path)

    def exec(self, argv, exec_id=None, generation=None, timeout=None, **fields):
        body = {"exec_id": exec_id or ("x-" + uuid.uuid4().hex),
                "generation": self._gen(generation), "argv": argv}
        body.update(fields)
        return self.c.post(self.path + "/exec", json=body, timeout=timeout)

    def write(self, path, content, generation=None):
        if isinstance(content, str):
            content = content.encode("utf-8")
        return self.c.put(self.path + "/files", json={
            "generation": self._gen(generation), "path": path,
            "content_base64": base64.b64encode(content).decode("ascii")})

    def read(self, path, generation=None):
        return self.c.get(self.path + "/files",
                          params={"path": path, "generation": self._gen(generation)})

    def read_bytes(self, path):
        r = self.read(path)
        assert r.status == 200, r
        return base64.b64decode(r.body["content_base64"], validate=True)

    def list(self, path, generation=None, **params):
        q = {"path": path, "generation": self._gen(generation)}
        q.update(params)
        return self.c.get(self.path + "/files/list", params=q)

    def mkdir(self, path, parents=False, generation=None):
        return self.c.post(self.path + "/files/mkdir", json={
            "generation": self._gen(generation), "path": path, "parents": parents})

    def rm(self, path, recursive=False, generation=None):
        return self.c.post(self.path + "/files/delete", json={
            "generation": self._gen(generation), "path": path, "recursive": recursive})

    def move(self, source, destination, overwrite=False, generation=None):
        return self.c.post(self.path + "/files/move", json={
            "generation": self._gen(generation), "source": source,
            "destination": destination, "overwrite": overwrite})

    def _gen(self, generation):
        return self.generation if generation is None else generation


# -- assertions shared by the test modules -----------------------------------
NAIVE_TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?$")
LOC_FIELDS = {"generation", "sandbox_uid", "profile", "worker_epoch", "exec_id", "argv", "cwd",
              "env", "sensitive_env", "timeout_seconds", "background", "exec_scope", "path",
              "content_base64", "sandbox_id", "workspace_scope_id", "request"}


def error_detail(r):
    """The {"code","message"} object of a JSON error answer (asserting the shape)."""
    assert r.is_json, f"error body must be application/json: {r!r}"
    assert isinstance(r.body, dict) and isinstance(r.body.get("detail"), dict), \
        f"error body must be {{'detail': {{'code','message'}}}}: {r!r}"
    d = r.body["detail"]
    assert isinstance(d.get("code"), str) and d["code"], f"detail.code missing: {r!r}"
    assert isinstance(d.get("message"), str) and d["message"], f"detail.message missing: {r!r}"
    return d


def assert_error(r, status, code, message=None, *, prefix=None, one_of=None):
    """status + JSON error shape + code (+ exact message / prefix / one of)."""
    assert r.status == status, f"expected HTTP {status} {code}, got {r!r}"
    d = error_detail(r)
    assert d["code"] == code, f"expected code {code}, got {r!r}"
    if message is not None:
        assert d["message"] == message, f"expected message {message!r}, got {r!r}"
    if prefix is not None:
        assert d["message"].startswith(prefix), f"expected message starting {prefix!r}, got {r!r}"
    if one_of is not None:
        assert d["message"] in one_of, f"expected message in {one_of!r}, got {r!r}"
    return d


def assert_bad_arg(r, message=None, *, one_of=None, prefix=None):
    """A 400 value error (API.md §5.4 sentences)."""
    return assert_error(r, 400, "SANDBOX_INVALID_ARGUMENT", message, one_of=one_of, prefix=prefix)


def assert_invalid(r, field=None):
    """A 422 SANDBOX_INVALID_REQUEST with the redacted errors list; `field`
    (if given) must appear as loc ["body", field]."""
    d = assert_error(r, 422, "SANDBOX_INVALID_REQUEST")
    errors = d.get("errors")
    assert isinstance(errors, list) and 1 <= len(errors) <= 20, f"detail.errors: {r!r}"
    # The top-level message is a sentence with the first failure in it.
    assert d["message"].startswith("request validation failed: ") and \
        errors[0]["msg"] in d["message"], r
    for e in errors:
        # The reference's keys and loc, then ours: where, and which field.
        assert {"loc", "type", "msg", "in"} <= set(e) <= {"loc", "type", "msg", "in", "field"}, \
            f"error entry keys: {e!r}"
        assert isinstance(e["loc"], list) and len(e["loc"]) == 2 and e["loc"][0] == "body", e
        assert e["loc"][1] in LOC_FIELDS, f"loc[1] outside the whitelist: {e!r}"
        assert e["type"] == "invalid_request", e
        assert e["in"] in ("body", "query"), e
        where = "query parameter" if e["in"] == "query" else "body field"
        assert e["msg"].startswith(f"{where} '{e['field']}' ") if "field" in e \
            else e["msg"].startswith("the request "), e
    if field is not None:
        assert ["body", field] in [e["loc"] for e in errors], \
            f"expected loc ['body', {field!r}] in {errors!r}"
    return d
