"""API keys across a fleet (issue 14): a key issued through one replica
acts as its tenant on every replica, and a revocation made on one is
refused there at once and on the others within the key cache's second."""
import time

from sandloom_client import assert_error
from test_forwarding import fleet

ADMIN = "/api/v1/admin/tenants"


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
