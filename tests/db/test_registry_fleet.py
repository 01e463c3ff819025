"""Replicas over one database server and one Redis (FLEET.md §3): each
heartbeats into Redis under the namespace and sees the others; a memory
registry shared through a database is refused at startup; a Redis that
goes away makes placement answer 503 at once and the fleet comes back by
itself when it returns."""
import os
import subprocess
import time

from e2e_harness import database_url, server_sql, unique_id
from sandloom_client import Sandbox, assert_error
from test_server_database import fresh_database

REDIS_URL = os.environ.get("SANDLOOM_TEST_REDIS_URL", "")


def fleet_env(url, ns):
    assert REDIS_URL, "tests/db needs tests/db/run-with-redis.sh too"
    return {"SANDBOX_DATABASE_URL": url, "SANDBOX_DATABASE_AUTO_DDL": "true",
            "SANDBOX_REGISTRY_BACKEND": "redis", "SANDBOX_REDIS_URL": REDIS_URL,
            "SANDBOX_REGISTRY_NAMESPACE": ns, "SANDBOX_HEARTBEAT_INTERVAL_SECONDS": "0.5",
            "SANDBOX_HEARTBEAT_TTL_SECONDS": "3"}


def wait_for(fn, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    return fn()


def workers_seen(d):
    r = d.client().get("/api/v1/sandboxes/diagnostics/runtime")
    assert r.status == 200, r
    return sorted(w["worker_id"] for w in r.body["workers"])


def test_replicas_see_each_other_through_redis(daemon_factory):
    _, url = fresh_database()
    ns = unique_id("ns")
    a = daemon_factory(fleet_env(url, ns))
    b = daemon_factory(fleet_env(url, ns))
    both = sorted([a.worker_id, b.worker_id])
    assert wait_for(lambda: workers_seen(a) == both, 5), workers_seen(a)
    assert workers_seen(b) == both
    hz = a.client().get("/healthz").body
    assert hz["worker"]["id"] == a.worker_id
    # The admin view marks both live (the registry, not the heartbeat age).
    admin = a.client().get("/api/v1/admin/overview")
    assert admin.status == 200, admin
    live = {w["worker_id"]: w["live"] for w in admin.body["workers"]}
    assert live == {a.worker_id: True, b.worker_id: True}, admin.body["workers"]
    # Another namespace is another fleet.
    c = daemon_factory(fleet_env(url, unique_id("ns")))
    assert workers_seen(c) == [c.worker_id]
    # A clean stop leaves the fleet at once (DEL + SREM), not after the TTL.
    b.stop()
    assert workers_seen(a) == [a.worker_id]


def test_a_memory_registry_shared_through_a_database_is_refused(daemon_factory):
    _, url = fresh_database()
    a = daemon_factory({"SANDBOX_DATABASE_URL": url, "SANDBOX_DATABASE_AUTO_DDL": "true"})
    rc, err = daemon_factory({"SANDBOX_DATABASE_URL": url, "SANDBOX_DATABASE_AUTO_DDL": "true"},
                             expect_exit=True)
    assert rc == 3, err
    assert f"SANDBOX_REGISTRY_BACKEND=memory: worker {a.worker_id} heartbeats into this " \
           "database" in err, err
    assert "SANDBOX_REGISTRY_BACKEND=redis" in err, err
    # The refused replica changed nothing: the first still serves.
    sb = Sandbox(a.client(), unique_id("mem"), "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200


def test_a_redis_that_goes_away_gives_quick_503s_and_comes_back(daemon_factory):
    _, url = fresh_database()
    d = daemon_factory(fleet_env(url, unique_id("ns")))
    c = d.client()
    sb = Sandbox(c, unique_id("rd"), "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    ctl = os.environ["SANDLOOM_TEST_REDIS_CTL"]
    subprocess.run([ctl, "stop"], check=True, timeout=30)
    try:
        for _ in range(3):
            t0 = time.monotonic()
            r = Sandbox(c, unique_id("rd"), "scope").resolve()
            assert_error(r, 503, "NO_SANDBOX_WORKER_AVAILABLE")
            assert time.monotonic() - t0 < 3, "a resolve waited for a Redis that is gone"
            assert "127.0.0.1" not in r.raw.decode(), r
    finally:
        subprocess.run([ctl, "start"], check=True, timeout=30)
    # Back by itself: the next heartbeat republishes this worker.
    fresh = Sandbox(c, unique_id("rd"), "scope")
    assert wait_for(lambda: fresh.resolve().status == 200, 10), fresh.resolve()
    assert fresh.connect().status == 200
    r = fresh.exec(["echo", "back"])
    assert r.status == 200 and r.body["stdout"] == "back\n", r
    assert d.proc.poll() is None
