"""API keys across a fleet (issue 14): a key issued through one replica
acts as its tenant on every replica, and a revocation made on one is
refused there at once and on the others within the key cache's second."""
import time

from sandloom_client import assert_error
from test_forwarding import fleet

ADMIN = "/api/v1/admin/tenants"


def ready_elsewhere(ds, key, name):
    """The tenant's sandbox `name` resolved through the first replica and
    created through the one that does not own it: (generation, owner,
    other)."""
    r = ds[0].client().post("/api/v1/sandboxes/resolve",
                            json={"sandbox_id": name, "workspace_scope_id": "s"}, token=key)
    assert r.status == 200 and r.body["sandbox_id"] == name, r
    gen, owner_id = r.body["generation"], r.body["worker_id"]
    owner = next(d for d in ds if d.worker_id == owner_id)
    other = next(d for d in ds if d.worker_id != owner_id)
    r = other.client().post(f"/api/v1/sandboxes/{name}", json={"generation": gen}, token=key)
    assert r.status == 200, r
    return gen, owner, other


def test_a_key_revoked_on_one_replica_is_refused_on_the_other(daemon_factory):
    a, b = fleet(daemon_factory)
    ca, cb = a.client(), b.client()
    r = ca.post(ADMIN, json={"tenant_id": "fleet-acme", "quotas": {"sandboxes": 2}})
    assert r.status == 201, r
    # The tenant is in the shared database: visible through the other replica.
    assert cb.get(f"{ADMIN}/fleet-acme").body["quotas"] == {"sandboxes": 2}
    k = ca.post(f"{ADMIN}/fleet-acme/keys", json={"name": "ci"}).body
    key = k["api_key"]
    for c in (ca, cb):
        me = c.get("/api/v1/tenant", token=key)
        assert me.status == 200 and me.body["tenant_id"] == "fleet-acme", me
    # Both replicas have the key cached now. Revoke it through A.
    t0 = time.monotonic()
    assert ca.delete(f"{ADMIN}/fleet-acme/keys/{k['key_id']}").status == 200
    assert_error(ca.get("/api/v1/tenant", token=key), 401, "SANDBOX_UNAUTHORIZED")
    refused_at = None
    while time.monotonic() - t0 < 5:
        r = cb.get("/api/v1/tenant", token=key)
        if r.status == 401:
            refused_at = time.monotonic() - t0
            break
        assert r.status == 200, r
        time.sleep(0.05)
    assert refused_at is not None and refused_at < 1.5, refused_at
    assert_error(cb.get("/api/v1/tenant", token=key), 401, "SANDBOX_UNAUTHORIZED")


def test_a_tenant_is_served_through_a_replica_that_is_not_the_owner(daemon_factory):
    """The front puts the tenant's name into its namespace before it
    forwards: the owner runs the tenant's sandbox, and the answer comes back
    in the tenant's names."""
    import base64
    import uuid
    from sandloom_client import Client  # noqa: F401
    ds = fleet(daemon_factory)
    ca = ds[0].client()
    assert ca.post(ADMIN, json={"tenant_id": "fleet-fw"}).status in (201, 409)
    key = ca.post(f"{ADMIN}/fleet-fw/keys", json={"name": "fw"}).body["api_key"]
    name = "fw-" + uuid.uuid4().hex[:8]
    gen, owner, other = ready_elsewhere(ds, key, name)
    co = other.client()
    path = f"/api/v1/sandboxes/{name}"
    r = co.post(f"{path}/exec", json={"exec_id": "fw-1", "generation": gen,
                                      "argv": ["sh", "-c", "echo hi > /workspace/x; echo ok"]},
                token=key)
    assert r.status == 200 and r.body["stdout"] == "ok\n", r
    assert (owner.sandbox_root / f"fleet-fw~{name}" / "workspace").exists() or \
        (owner.sandbox_root / f"fleet-fw~{name}").is_dir()
    assert not (other.sandbox_root / f"fleet-fw~{name}").exists()
    r = co.get(f"{path}/files", params={"path": "/workspace/x", "generation": gen}, token=key)
    assert r.status == 200 and base64.b64decode(r.body["content_base64"]) == b"hi\n", r
    r = co.get(path, token=key)
    assert r.status == 200 and r.body["sandbox_id"] == name, r
    assert f"forwarded to {owner.worker_id}" in other.stderr()
    assert co.delete(path, token=key).status == 200


def test_a_tenants_template_published_through_another_replica_stays_private(daemon_factory):
    """A publish through a replica that is not the owner is forwarded with
    the operator's token: the owner must still make the template the
    tenant's, never a public one."""
    import uuid
    ds = fleet(daemon_factory)
    ca = ds[0].client()
    tid = "fleet-tp-" + uuid.uuid4().hex[:6]
    assert ca.post(ADMIN, json={"tenant_id": tid}).status == 201
    key = ca.post(f"{ADMIN}/{tid}/keys", json={"name": "tp"}).body["api_key"]
    name = "tp-" + uuid.uuid4().hex[:8]
    gen, owner, other = ready_elsewhere(ds, key, name)
    co = other.client()
    path = f"/api/v1/sandboxes/{name}"
    r = co.post(f"{path}/exec", json={"exec_id": "tp-1", "generation": gen,
                                      "argv": ["sh", "-c", "mkdir -p /envs/t && echo x > /envs/t/f"]},
                token=key)
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = co.post(f"{path}/templates", json={"generation": gen, "name": "mine",
                                           "source_path": "/envs/t"}, token=key)
    assert r.status == 200, r
    assert r.body["name"] == "mine" and r.body["visibility"] == "private", r.body
    assert f"forwarded to {owner.worker_id}" in other.stderr()
    # On the owner, where it was made: the tenant's, not public.
    listed = {t["name"]: t for t in owner.client().get("/api/v1/templates").body["templates"]}
    assert "mine" not in listed and listed[f"{tid}~mine"]["tenant_id"] == tid, listed
    mine = {t["name"] for t in owner.client().get("/api/v1/templates", token=key)
            .body["templates"]}
    assert "mine" in mine
    # Attach through the other replica too: the tenant's own is found.
    r = co.put(f"{path}/templates", json={"generation": gen, "templates": ["mine"]}, token=key)
    assert r.status == 200 and r.body["templates"][0]["name"] == "mine", r
    assert co.delete(path, token=key).status == 200


def test_another_tenants_sandbox_is_refused_before_a_forward(daemon_factory):
    """Tenant B through the replica that does not own tenant A's sandbox:
    refused there as a sandbox that does not exist, nothing forwarded."""
    import uuid
    ds = fleet(daemon_factory)
    ca = ds[0].client()
    keys = {}
    for t in ("fleet-xa-" + uuid.uuid4().hex[:4], "fleet-xb-" + uuid.uuid4().hex[:4]):
        assert ca.post(ADMIN, json={"tenant_id": t}).status == 201
        keys[t] = ca.post(f"{ADMIN}/{t}/keys", json={"name": "x"}).body["api_key"]
    (ta, ka), (tb, kb) = keys.items()
    name = "xa-" + uuid.uuid4().hex[:8]
    gen, _, other = ready_elsewhere(ds, ka, name)
    co = other.client()
    for spelled in (name, f"{ta}~{name}"):
        path = f"/api/v1/sandboxes/{spelled}"
        r = co.post(f"{path}/exec", json={"exec_id": "xb-1", "generation": gen,
                                          "argv": ["touch", "/workspace/pwned"]}, token=kb)
        assert r.status in (404, 409), r
        assert_error(co.get(path, token=kb), 404, "SANDBOX_NOT_FOUND")
    # A's own connect went to the owner; nothing of B's did (an access
    # line names the tenant whose key made the request).
    log = other.stderr().splitlines()
    assert any("forwarded to" in line and ta in line for line in log), log[-5:]
    forwarded = [line for line in log if "forwarded to" in line and tb in line]
    assert forwarded == [], forwarded
    assert ca.get("/api/v1/admin/execs", params={"sandbox_id": f"{ta}~{name}"}).body["total"] == 0
