"""Tenants and their API keys (issue 14, item 1): the operator's admin
routes, a key that acts as its tenant, and every way a key can be wrong
answering the same 401. A tenant key reaches GET /api/v1/tenant and the
sandbox routes (test_tenancy.py), the MCP endpoint (test_mcp_tenants.py) and
the templates (test_tenant_templates.py); everywhere else (admin, fleet
views, the worker protocol) it is refused (403) before anything runs."""

import json
import re
import shutil
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from sandloom_client import API, assert_error, assert_invalid, error_detail

ADMIN = "/api/v1/admin/tenants"
request_cleanup = []


@pytest.fixture(autouse=True, scope="module")
def _remove_state_dirs():
    yield
    for p in request_cleanup:
        shutil.rmtree(p, ignore_errors=True)
KEY_RE = re.compile(r"^sl[0-9a-f]{12}_[0-9a-f]{48}$")


def refused_field(r, field):
    """A 422 naming `field` (ours: tenant fields are outside the reference's
    loc whitelist, so the entry's "field" names them)."""
    assert_invalid(r)
    fields = [e.get("field") for e in error_detail(r)["errors"]]
    assert field in fields, (field, fields)


def tid():
    return "t-" + uuid.uuid4().hex[:12]


def make_tenant(client, quotas=None):
    body = {"tenant_id": tid()}
    if quotas is not None:
        body["quotas"] = quotas
    r = client.post(ADMIN, json=body)
    assert r.status == 201, r
    return r.body


def make_key(client, tenant_id, name="ci", **extra):
    r = client.post(f"{ADMIN}/{tenant_id}/keys", json={"name": name, **extra})
    assert r.status == 201, r
    return r.body


def test_an_operator_creates_reads_lists_and_patches_tenants(client):
    t = make_tenant(client, {"sandboxes": 3, "running_sessions": 2})
    assert t["quotas"] == {"sandboxes": 3, "running_sessions": 2}
    assert t["created_by"] == "operator"
    assert t["created_at"].endswith("Z") and t["updated_at"] == t["created_at"]
    again = client.post(ADMIN, json={"tenant_id": t["tenant_id"]})
    assert_error(again, 409, "TENANT_EXISTS")

    got = client.get(f"{ADMIN}/{t['tenant_id']}")
    assert got.status == 200 and got.body == {**t, "usage": {
        "sandboxes": 0, "running_sessions": 0, "commands_in_flight": 0,
        "workspace_bytes": None}}, got
    listed = client.get(ADMIN)
    assert listed.status == 200
    assert t["tenant_id"] in [x["tenant_id"] for x in listed.body["tenants"]]

    # A merge: named limits change, null removes one, the rest stay.
    r = client.request("PATCH", f"{ADMIN}/{t['tenant_id']}",
                       json_body={"quotas": {"running_sessions": 5, "sandboxes": None,
                                             "commands_in_flight": 1}})
    assert r.status == 200, r
    assert r.body["quotas"] == {"running_sessions": 5, "commands_in_flight": 1}
    assert client.get(f"{ADMIN}/{t['tenant_id']}").body["quotas"] == r.body["quotas"]

    assert_error(client.get(f"{ADMIN}/no-such-tenant"), 404, "TENANT_NOT_FOUND")
    assert_error(client.get(f"{ADMIN}/Not_An_Id"), 404, "TENANT_NOT_FOUND")
    r = client.request("PATCH", f"{ADMIN}/no-such-tenant", json_body={"quotas": {}})
    assert_error(r, 404, "TENANT_NOT_FOUND")


@pytest.mark.parametrize("body,field", [
    ({}, "tenant_id"),
    ({"tenant_id": ""}, "tenant_id"),
    ({"tenant_id": "UPPER"}, "tenant_id"),
    ({"tenant_id": "-lead"}, "tenant_id"),
    ({"tenant_id": "a" * 33}, "tenant_id"),
    ({"tenant_id": "ok", "quotas": []}, "quotas"),
    ({"tenant_id": "ok", "quotas": {"no_such_limit": 1}}, "quotas.no_such_limit"),
    ({"tenant_id": "ok", "quotas": {"sandboxes": -1}}, "quotas.sandboxes"),
    ({"tenant_id": "ok", "quotas": {"sandboxes": "3"}}, "quotas.sandboxes"),
    ({"tenant_id": "ok", "quotas": {"sandboxes": 1.5}}, "quotas.sandboxes"),
])
def test_a_bad_tenant_is_refused_with_the_field_named(client, body, field):
    r = client.post(ADMIN, json=body)
    refused_field(r, field)
    assert client.get(f"{ADMIN}/ok").status == 404  # nothing was created


def test_a_key_is_shown_once_and_acts_as_its_tenant(client, daemon):
    t = make_tenant(client, {"sandboxes": 7})
    k = make_key(client, t["tenant_id"], "laptop")
    assert KEY_RE.match(k["api_key"]), k
    assert k["api_key"].startswith(k["key_id"] + "_")
    assert k["status"] == "active" and k["expires_at"] is None and k["revoked_at"] is None

    me = client.get("/api/v1/tenant", token=k["api_key"])
    assert me.status == 200, me
    assert me.body["tenant_id"] == t["tenant_id"]
    assert me.body["key_id"] == k["key_id"]
    assert me.body["quotas"] == {"sandboxes": 7}

    # Listed without the key itself; the store holds only a hash.
    keys = client.get(f"{ADMIN}/{t['tenant_id']}/keys")
    assert keys.status == 200
    [listed] = keys.body["keys"]
    assert listed["key_id"] == k["key_id"] and "api_key" not in listed
    secret = k["api_key"].split("_", 1)[1]
    assert secret not in json.dumps(keys.body)
    # Never in a log line either; the access line names the tenant and key_id.
    assert secret not in daemon.stderr() and secret not in daemon.stdout()
    line = next(l for l in daemon.stderr().splitlines()
                if "/api/v1/tenant" in l and k["key_id"] in l)
    assert t["tenant_id"] in line, line


@pytest.mark.sqlite_file
def test_the_database_holds_no_key(client, daemon):
    t = make_tenant(client)
    k = make_key(client, t["tenant_id"])
    secret = k["api_key"].split("_", 1)[1]
    db = daemon.db_path.read_bytes() + b"".join(
        p.read_bytes() for p in daemon.state.glob("sandloom.db-*"))
    assert k["key_id"].encode() in db  # the right file
    assert secret.encode() not in db and k["api_key"].encode() not in db


def test_the_internal_token_is_no_tenant(client):
    assert_error(client.get("/api/v1/tenant"), 404, "TENANT_NOT_FOUND")


def test_a_tenant_key_is_refused_on_every_other_route_before_it_runs(client, daemon):
    t = make_tenant(client)
    k = make_key(client, t["tenant_id"])
    key = k["api_key"]
    sid = "tk-" + uuid.uuid4().hex[:10]
    cases = [
        ("GET", ADMIN, None),
        ("POST", f"{ADMIN}/{t['tenant_id']}/keys", {"name": "mine"}),
        ("GET", "/api/v1/admin/overview", None),
        ("GET", "/api/v1/admin/sandboxes", None),
        ("GET", "/api/v1/sandboxes/diagnostics/runtime", None),
        ("GET", "/internal/v1/health", None),
        ("POST", f"/internal/v1/sandboxes/{sid}", {"generation": 1, "sandbox_uid": 1,
                                                    "profile": "p", "worker_epoch": "e"}),
    ]
    for method, path, body in cases:
        kw = {"json_body": body} if body is not None else {}
        r = client.request(method, path, token=key, **kw)
        assert_error(r, 403, "TENANT_FORBIDDEN")
    # Nothing was created by any of them.
    assert_error(client.get(f"{API}/{sid}"), 404, "SANDBOX_NOT_FOUND")
    assert not (daemon.sandbox_root / sid).exists()
    assert len(client.get(f"{ADMIN}/{t['tenant_id']}/keys").body["keys"]) == 1


def unauthorized(r):
    assert r.status == 401, r
    assert error_detail(r) == {"code": "SANDBOX_UNAUTHORIZED",
                               "message": "internal service authentication failed"}, r
    return r


def test_every_wrong_key_answers_the_same_401(client):
    t = make_tenant(client)
    k = make_key(client, t["tenant_id"])
    key_id, secret = k["api_key"].split("_", 1)
    flipped = secret[:-1] + ("0" if secret[-1] != "0" else "1")
    wrong = [
        f"{key_id}_{flipped}",                   # wrong secret
        f"sl{'0' * 12}_{secret}",                # no such key_id
        k["api_key"].upper(),                    # not the alphabet
        k["api_key"][:-1],                       # too short
        k["api_key"] + "0",                      # too long
        f"{key_id}-{secret}",                    # no separator
        "",                                      # empty
    ]
    for w in wrong:
        unauthorized(client.get("/api/v1/tenant", token=w))
    # Other shapes of the header.
    unauthorized(client.get("/api/v1/tenant", authorization=k["api_key"]))
    unauthorized(client.get("/api/v1/tenant", authorization="Basic " + k["api_key"]))
    unauthorized(client.get("/api/v1/tenant", auth=False))
    # ... and the right one still works after all those failures.
    assert client.get("/api/v1/tenant", token=k["api_key"]).status == 200


def test_a_revoked_key_is_refused_at_once(client):
    t = make_tenant(client)
    k = make_key(client, t["tenant_id"])
    other = make_key(client, t["tenant_id"], "other")
    assert client.get("/api/v1/tenant", token=k["api_key"]).status == 200  # cached now
    r = client.delete(f"{ADMIN}/{t['tenant_id']}/keys/{k['key_id']}")
    assert r.status == 200, r
    assert r.body["status"] == "revoked" and r.body["revoked_at"]
    unauthorized(client.get("/api/v1/tenant", token=k["api_key"]))
    # Once more: the same answer; another tenant's key id is not found.
    assert client.delete(f"{ADMIN}/{t['tenant_id']}/keys/{k['key_id']}").status == 200
    t2 = make_tenant(client)
    assert_error(client.delete(f"{ADMIN}/{t2['tenant_id']}/keys/{k['key_id']}"), 404,
                 "API_KEY_NOT_FOUND")
    assert_error(client.delete(f"{ADMIN}/{t['tenant_id']}/keys/sl{'0' * 12}"), 404,
                 "API_KEY_NOT_FOUND")
    # The tenant's other key is untouched.
    assert client.get("/api/v1/tenant", token=other["api_key"]).status == 200
    listed = {x["key_id"]: x["status"]
              for x in client.get(f"{ADMIN}/{t['tenant_id']}/keys").body["keys"]}
    assert listed == {k["key_id"]: "revoked", other["key_id"]: "active"}


def test_a_key_expires(client):
    t = make_tenant(client)
    soon = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3))
    k = make_key(client, t["tenant_id"], expires_at=soon)
    assert k["expires_at"].startswith(soon[:-1])
    assert client.get("/api/v1/tenant", token=k["api_key"]).status == 200
    deadline = time.time() + 10
    while time.time() < deadline:
        r = client.get("/api/v1/tenant", token=k["api_key"])
        if r.status == 401:
            break
        time.sleep(0.25)
    unauthorized(r)
    [listed] = client.get(f"{ADMIN}/{t['tenant_id']}/keys").body["keys"]
    assert listed["status"] == "expired"


@pytest.mark.parametrize("body,field", [
    ({}, "name"),
    ({"name": ""}, "name"),
    ({"name": "x" * 129}, "name"),
    ({"name": "tab\there"}, "name"),
    ({"name": "ok", "expires_at": "tomorrow"}, "expires_at"),
    ({"name": "ok", "expires_at": 5}, "expires_at"),
    ({"name": "ok", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
])
def test_a_bad_key_request_is_refused(client, body, field):
    t = make_tenant(client)
    refused_field(client.post(f"{ADMIN}/{t['tenant_id']}/keys", json=body), field)
    assert client.get(f"{ADMIN}/{t['tenant_id']}/keys").body["keys"] == []


def test_keys_of_an_unknown_tenant(client):
    assert_error(client.post(f"{ADMIN}/nobody-here/keys", json={"name": "x"}), 404,
                 "TENANT_NOT_FOUND")
    assert_error(client.get(f"{ADMIN}/nobody-here/keys"), 404, "TENANT_NOT_FOUND")


def test_a_key_posted_with_a_body_on_a_cold_cache_is_answered(daemon_factory):
    """The first request of a key waits for the store with its connection
    suspended before the body is read; a body that came with the headers
    must still be read, parsed and answered (an exec on a sandbox that has
    no route: 409 STALE_SANDBOX_ROUTE), not hang."""
    d = daemon_factory()
    c = d.client()
    t = make_tenant(c)
    k = make_key(c, t["tenant_id"])
    big = {"exec_id": "e-1", "generation": 1, "argv": ["true"] + ["x" * 60000] * 4}
    r = c.post(f"{API}/sbx-cold/exec", json=big, token=k["api_key"], timeout=10)
    assert_error(r, 409, "STALE_SANDBOX_ROUTE")


@pytest.mark.sqlite_file
def test_a_database_without_tenant_tables_keeps_working_without_tenancy(daemon_factory):
    """A database the reference made (auto-DDL off) has no tenant tables:
    the service runs as before, the tenant routes say why they cannot, and
    every key is refused."""
    state = Path(tempfile.mkdtemp(prefix="sandloom-e2e-"))
    state.chmod(0o711)  # traversable by the sandbox uids, like the fixture's
    request_cleanup.append(state)
    d = daemon_factory(state_dir=str(state))
    token = d.token
    # The first daemon must end cleanly and say it is gone: a row still
    # ONLINE makes the second one refuse to share the database with it.
    assert d.stop() == 0, d.stderr()
    assert d.sql("SELECT status FROM agent_sandbox_worker") == [("OFFLINE",)], d.stderr()
    db = sqlite3.connect(str(state / "sandloom.db"))
    db.execute("DROP TABLE agent_sandbox_api_key")
    db.execute("DROP TABLE agent_sandbox_tenant")
    db.commit()
    db.close()
    d2 = daemon_factory({"SANDBOX_DATABASE_AUTO_DDL": "false"}, state_dir=str(state), token=token)
    c = d2.client()
    assert_error(c.post(ADMIN, json={"tenant_id": "acme"}), 503, "TENANCY_UNAVAILABLE")
    assert_error(c.get(ADMIN), 503, "TENANCY_UNAVAILABLE")
    unauthorized(c.get("/api/v1/tenant", token="sl" + "0" * 12 + "_" + "0" * 48))
    # Sandboxes work as ever.
    sid = "nt-" + uuid.uuid4().hex[:10]
    r = c.post(f"{API}/resolve", json={"sandbox_id": sid, "workspace_scope_id": "s"})
    assert r.status == 200, r


def test_fuzzed_credentials_all_answer_the_one_401(client):
    """Random and mutated Authorization values: every one is the same 401,
    and the service still answers the real key afterwards."""
    import random
    rng = random.Random(1404)
    t = make_tenant(client)
    k = make_key(client, t["tenant_id"])["api_key"]
    alphabet = "sl_0123456789abcdefABCDEF-+/= \t"
    values = []
    for i in range(300):
        if i % 3 == 0:
            v = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        else:
            chars = list(k)
            for _ in range(rng.randint(1, 3)):
                chars[rng.randrange(len(chars))] = rng.choice(alphabet)
            v = "".join(chars)
            if v == k:
                continue
        values.append("Bearer " + v if i % 5 else v)
    bodies = set()
    for v in values:
        r = client.get("/api/v1/tenant", authorization=v)
        assert r.status == 401, (v, r)
        bodies.add(r.raw)
    assert len(bodies) == 1, bodies
    assert client.get("/api/v1/tenant", token=k).status == 200


def test_a_peer_that_keeps_failing_gets_no_key_lookups(daemon_factory):
    """Past its free failures a peer's uncached keys are not asked of the
    store (a guesser must not load the database): even a real key that is
    not cached yet is refused until the window passes, while a key already
    cached keeps working."""
    d = daemon_factory({"SANDBOX_AUTH_FAILURES_PER_MINUTE": "3"})
    c = d.client()
    t = make_tenant(c)
    cached = make_key(c, t["tenant_id"], "cached")["api_key"]
    fresh = make_key(c, t["tenant_id"], "fresh")["api_key"]
    assert c.get("/api/v1/tenant", token=cached).status == 200
    for i in range(3):  # the free ones, answered at once
        unauthorized(c.get("/api/v1/tenant", token=f"sl{i:012x}_" + "0" * 48, timeout=10))
    # Throttled now. The key cached moments ago still answers (a hit asks
    # nothing of the store) ...
    assert c.get("/api/v1/tenant", token=cached, timeout=10).status == 200
    # ... the real but uncached one is refused without a lookup.
    unauthorized(c.get("/api/v1/tenant", token=fresh, timeout=10))


def test_a_key_id_in_another_spelling_is_not_revoked(client):
    """Only the exact key_id names a key (a database whose collation folds
    case would otherwise revoke it under a spelling the cache never saw)."""
    t = make_tenant(client)
    k = make_key(client, t["tenant_id"])
    for spelling in (k["key_id"].upper(), k["key_id"] + " ", k["key_id"][:-1]):
        r = client.delete(f"{ADMIN}/{t['tenant_id']}/keys/{spelling.replace(' ', '%20')}")
        assert_error(r, 404, "API_KEY_NOT_FOUND")
    assert client.get("/api/v1/tenant", token=k["api_key"]).status == 200
    [listed] = client.get(f"{ADMIN}/{t['tenant_id']}/keys").body["keys"]
    assert listed["status"] == "active"


def test_a_tenant_key_is_refused_before_its_body_is_read(client):
    """The 403 of an operator route comes before the body: a client that
    declares a large body gets its answer without sending it."""
    import socket
    t = make_tenant(client)
    key = make_key(client, t["tenant_id"])["api_key"]
    assert client.get("/api/v1/tenant", token=key).status == 200  # cached
    s = socket.create_connection((client.host, client.port), timeout=10)
    try:
        s.sendall((f"POST {ADMIN} HTTP/1.1\r\nHost: x\r\n"
                   f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: 20000000\r\n\r\n").encode())
        head = s.recv(4096).decode(errors="replace")
    finally:
        s.close()
    assert head.startswith("HTTP/1.1 403"), head
    assert "TENANT_FORBIDDEN" in head


def test_names_and_quota_fields_are_bounded_in_bytes(client):
    t = make_tenant(client)
    r = client.post(f"{ADMIN}/{t['tenant_id']}/keys", json={"name": "é" * 101})
    refused_field(r, "name")
    assert client.get(f"{ADMIN}/{t['tenant_id']}/keys").body["keys"] == []
    ok = client.post(f"{ADMIN}/{t['tenant_id']}/keys", json={"name": "é" * 64})
    assert ok.status == 201 and ok.body["name"] == "é" * 64, ok
    # A long unknown limit name, cut mid-character in the error, is still refused.
    r = client.post(ADMIN, json={"tenant_id": tid(), "quotas": {"a" + "é" * 50: 5}})
    assert r.status == 422, r


@pytest.mark.sqlite_file
def test_a_stored_tenant_id_longer_than_allowed_is_no_tenant_for_its_keys(daemon_factory):
    """A tenant id of 33-64 characters (a build before the limit could store
    one) would be cut to 32 in a key's principal and could name another
    tenant's namespace: its keys are refused, and the operator can still
    see the tenant and revoke its keys."""
    import hashlib
    d = daemon_factory()
    c = d.client()
    long_id = "l" * 40
    secret = "ab" * 24
    now = "2026-12-02 00:00:00.000000"
    db = sqlite3.connect(str(d.db_path))
    db.execute("INSERT INTO agent_sandbox_tenant (tenant_id, quotas_json, created_by, "
               "created_at, updated_at) VALUES (?, NULL, 'old', ?, ?)", (long_id, now, now))
    db.execute("INSERT INTO agent_sandbox_api_key (key_id, tenant_id, name, secret_sha256, "
               "created_by, created_at, expires_at, revoked_at) VALUES (?, ?, 'old', ?, 'old', ?, "
               "NULL, NULL)", ("sl0000000000aa", long_id,
                               hashlib.sha256(secret.encode()).hexdigest(), now))
    db.commit()
    db.close()
    unauthorized(c.get("/api/v1/tenant", token=f"sl0000000000aa_{secret}"))
    assert c.get(f"{ADMIN}/{long_id}").status == 200
    r = c.delete(f"{ADMIN}/{long_id}/keys/sl0000000000aa")
    assert r.status == 200 and r.body["status"] == "revoked", r
