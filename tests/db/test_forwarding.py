"""Any replica serves any sandbox (API.md §9-§10): a request through a replica
that does not own the sandbox is forwarded to the owner over /internal/v1
with the fencing headers and its answer relayed; the owner refuses a
request addressed to another worker before doing anything."""
import base64
import json
import time
import urllib.request

from e2e_harness import unique_id
from sandloom_client import Client, Sandbox, assert_error
from sse_client import Events
from test_registry_fleet import fleet_env, wait_for, workers_seen
from test_server_database import fresh_database


def fleet(daemon_factory, n=2):
    _, url = fresh_database()
    ns = unique_id("ns")
    token = unique_id("fleet-token") + "-0123456789abcdef"  # a fleet shares one
    ds = [daemon_factory(fleet_env(url, ns), token=token) for _ in range(n)]
    ids = sorted(d.worker_id for d in ds)
    for d in ds:
        assert wait_for(lambda: workers_seen(d) == ids, 5), workers_seen(d)
    return ds


def owned_elsewhere(ds, prefix):
    """A ready sandbox, the replica that owns it and one that does not
    (the client of the latter)."""
    sb = Sandbox(ds[0].client(), unique_id(prefix), "scope")
    r = sb.resolve()
    assert r.status == 200, r
    owner_id = r.body.get("worker_id") or sb.route().body["worker_id"]
    owner = next(d for d in ds if d.worker_id == owner_id)
    other = next(d for d in ds if d.worker_id != owner_id)
    via = Sandbox(other.client(), sb.id, "scope")
    via.generation = sb.generation
    assert via.connect().status == 200  # the create itself is forwarded
    return via, owner, other


def test_exec_files_and_poll_through_a_replica_that_is_not_the_owner(daemon_factory):
    ds = fleet(daemon_factory)
    via, owner, other = owned_elsewhere(ds, "fw")
    r = via.exec(["sh", "-c", "echo on $(hostname); id -u"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    # It ran on the owner: the sandbox directory is there, not here.
    assert (owner.sandbox_root / via.id).is_dir()
    assert not (other.sandbox_root / via.id).exists()
    # Files both ways.
    assert via.write("/workspace/hello.txt", "from the other replica").status == 200
    got = Sandbox(owner.client(), via.id, "scope")
    got.generation = via.generation
    r = got.read("/workspace/hello.txt")
    assert r.status == 200, r
    assert base64.b64decode(r.body["content_base64"]) == b"from the other replica"
    r = via.read("/workspace/hello.txt")
    assert r.status == 200 and base64.b64decode(r.body["content_base64"]) == \
        b"from the other replica", r
    r = via.c.get(f"/api/v1/sandboxes/{via.id}/files/list",
                       params={"path": "/workspace", "generation": via.generation})
    assert r.status == 200 and any(e["name"] == "hello.txt" for e in r.body["entries"]), r
    # A background command polled and cancelled through the other replica.
    r = via.exec(["sleep", "30"], background=True)
    assert r.status == 200, r
    exec_id = r.body["exec_id"]
    r = via.c.get(f"/api/v1/sandboxes/{via.id}/exec/{exec_id}",
                       params={"generation": via.generation})
    assert r.status == 200 and r.body["status"] == "RUNNING", r
    r = via.c.post(f"/api/v1/sandboxes/{via.id}/exec/{exec_id}/cancel",
                        params={"generation": via.generation})
    assert r.status == 200 and r.body["cancelled"] is True, r
    # Refusals are the owner's, relayed: a stale generation is a 409.
    stale = Sandbox(other.client(), via.id, "scope")
    stale.generation = via.generation + 7
    assert_error(stale.exec(["true"]), 409, "STALE_SANDBOX_ROUTE")
    # The forwarding replica logged where the request went.
    assert f"forwarded to {owner.worker_id}" in other.stderr(), other.stderr()[-2000:]
    # A release through it destroys the sandbox on its owner (the service
    # asks the owner over DELETE /internal/v1/sandboxes/{id}), once the
    # cancelled command has ended (a running sandbox is busy).
    assert wait_for(lambda: via.route().body["status"] == "READY", 10), via.route()
    r = via.release()
    assert r.status == 200 and r.body == {"status": "RELEASED"}, r
    assert not (owner.sandbox_root / via.id).exists()
    assert via.route().body["status"] == "RELEASED"


def test_the_owner_refuses_requests_addressed_to_another_worker(daemon_factory):
    ds = fleet(daemon_factory)
    via, owner, other = owned_elsewhere(ds, "fence")
    c = Client("127.0.0.1", owner.port, owner.token)
    path = f"/internal/v1/sandboxes/{via.id}/exec"
    body = {"generation": via.generation, "argv": ["true"], "exec_id": unique_id("x")}
    for worker in (None, other.worker_id):
        headers = {"X-Sandbox-Generation": str(via.generation)}
        if worker:
            headers["X-Sandbox-Worker-ID"] = worker
        r = c.post(path, json=body, headers=headers)
        assert_error(r, 409, "STALE_SANDBOX_ROUTE")
    # Addressed to the owner itself, it runs.
    r = c.post(path, json=body, headers={"X-Sandbox-Worker-ID": owner.worker_id,
                                         "X-Sandbox-Generation": str(via.generation)})
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    # Sent to the wrong replica under the right name: not forwarded on.
    r = Client("127.0.0.1", other.port, other.token).post(
        path, json=body, headers={"X-Sandbox-Worker-ID": other.worker_id})
    assert_error(r, 409, "STALE_SANDBOX_ROUTE")
    # The worker protocol needs the token like everything else, and has
    # its own health.
    assert Client("127.0.0.1", owner.port, "wrong-token").get("/internal/v1/health").status == 401
    h = c.get("/internal/v1/health")
    assert h.status == 200 and h.body["worker_id"] == owner.worker_id, h
    assert h.body["status"] in ("UP", "DRAINING"), h
    # Not a client surface: not in /openapi.json.
    doc = c.get("/openapi.json").body
    assert not any(p.startswith("/internal/") for p in doc["paths"]), list(doc["paths"])


def test_a_worker_killed_with_a_command_in_flight(daemon_factory):
    """kill -9 of the owner while a command runs through another replica:
    the client gets an error within the timeouts, never a hang or a
    success; the dead worker leaves the fleet; the survivor's maintenance
    reclaims the route as WORKER_LOST; the sandbox resolves again, on the
    survivor, at a new generation."""
    import os
    import signal
    import threading
    import time
    _, url = fresh_database()
    ns = unique_id("ns")
    token = unique_id("fleet-token") + "-0123456789abcdef"
    env = dict(fleet_env(url, ns), SANDBOX_ORPHAN_RUNNING_GRACE_SECONDS="1",
               SANDBOX_MAINTENANCE_INTERVAL_SECONDS="1")
    ds = [daemon_factory(env, token=token) for _ in range(2)]
    ids = sorted(d.worker_id for d in ds)
    for d in ds:
        assert wait_for(lambda: workers_seen(d) == ids, 5), workers_seen(d)
    via, owner, other = owned_elsewhere(ds, "lost")
    gen = via.generation
    result = {}

    def run():
        t0 = time.monotonic()
        result["r"] = via.exec(["sleep", "60"], timeout=120)
        result["took"] = time.monotonic() - t0

    t = threading.Thread(target=run)
    t.start()
    assert wait_for(lambda: via.route().body.get("status") == "RUNNING", 5), via.route()
    os.kill(owner.proc.pid, signal.SIGKILL)
    owner.proc.wait(10)
    t.join(60)
    assert not t.is_alive(), "the client still waits for a dead worker"
    r = result["r"]
    assert r.status >= 500, r
    assert_error(r, 503, "SANDBOX_WORKER_UNREACHABLE")
    assert result["took"] < 30, result["took"]
    # The dead worker leaves the fleet once its heartbeat expires.
    assert wait_for(lambda: workers_seen(other) == [other.worker_id], 10), workers_seen(other)
    # The survivor's maintenance reclaims the route.
    def released():
        route = via.route().body
        return route if route.get("status") == "RELEASED" else None
    route = wait_for(released, 20)
    assert route and route["last_release_reason"] == "WORKER_LOST", via.route().body
    execs = other.client().get("/api/v1/admin/execs", params={"sandbox_id": via.id}).body
    lost = [e for e in execs["execs"] if e["argv"] == ["sleep", "60"]]
    assert len(lost) == 1 and lost[0]["status"] == "WORKER_LOST", execs
    # Resolvable again, on the survivor, at a new generation.
    again = Sandbox(other.client(), via.id, "scope")
    r = again.resolve()
    assert r.status == 200 and r.body["generation"] > gen, r
    assert again.route().body["worker_id"] == other.worker_id
    assert again.connect().status == 200
    r = again.exec(["echo", "alive"])
    assert r.status == 200 and r.body["stdout"] == "alive\n", r


def test_placement_balances_idle_workers_and_never_crosses_profiles(daemon_factory):
    """FLEET.md §4: least loaded by the last heartbeats, among workers of
    the resolving replica's profile hash only."""
    import time
    _, url = fresh_database()
    ns = unique_id("ns")
    token = unique_id("fleet-token") + "-0123456789abcdef"
    a = daemon_factory(fleet_env(url, ns), token=token)
    b = daemon_factory(fleet_env(url, ns), token=token)
    c = daemon_factory(dict(fleet_env(url, ns), SANDBOX_PROFILE_HASH="other-pool"), token=token)
    ids = sorted(d.worker_id for d in (a, b, c))
    assert wait_for(lambda: workers_seen(a) == ids, 5), workers_seen(a)
    placed = []
    for i in range(4):
        sb = Sandbox(a.client(), unique_id("place"), "scope")
        assert sb.resolve().status == 200 and sb.connect().status == 200
        placed.append(sb.route().body["worker_id"])
        time.sleep(1.2)  # the load the next placement sees is the last heartbeat's
    assert sorted(set(placed)) == sorted([a.worker_id, b.worker_id]), placed
    assert placed.count(a.worker_id) == 2, placed
    # Through the other pool's replica: its own pool (itself) only.
    for _ in range(2):
        sb = Sandbox(c.client(), unique_id("pool"), "scope")
        assert sb.resolve().status == 200 and sb.connect().status == 200
        assert sb.route().body["worker_id"] == c.worker_id


def test_suspend_and_resume_through_a_replica_that_is_not_the_owner(daemon_factory):
    """The whole suspend (and resume) runs on the owner: the request is
    forwarded to its /internal/v1 twin, which claims, stops and marks."""
    ds = fleet(daemon_factory)
    via, owner, other = owned_elsewhere(ds, "sus")
    assert via.write("/workspace/kept.txt", "kept").status == 200
    r = via.c.post(f"/api/v1/sandboxes/{via.id}/suspend", json={"generation": via.generation})
    assert r.status == 200 and r.body["status"] == "SUSPENDED", r
    assert via.route().body["status"] == "SUSPENDED"
    assert (owner.sandbox_root / via.id / "workspace" / "kept.txt").is_file()
    r = via.c.post(f"/api/v1/sandboxes/{via.id}/resume")
    assert r.status == 200 and r.body["status"] == "READY", r
    via.generation = r.body["generation"]
    route = via.route().body
    assert route["status"] == "READY" and route["worker_id"] == owner.worker_id, route
    r = via.exec(["cat", "/workspace/kept.txt"])
    assert r.status == 200 and r.body["stdout"] == "kept", r


def test_the_fronts_owner_cache_never_changes_an_answer(daemon_factory):
    """The front remembers for a second which worker a forward went to
    (service/owner_cache.h), so a burst pays the route read and the registry
    lookup once. A change of state inside that second must not change any
    answer: each request made at once after a change (the owner remembered)
    answers what the same request answers a second later (decided afresh
    from the route and the registry)."""
    ds = fleet(daemon_factory)
    via, owner, other = owned_elsewhere(ds, "oc")

    def answer(r):
        return r.status, r.body.get("status") if r.status == 200 else r.body.get("code"), \
            r.body.get("stdout")

    def remembered_then_fresh(make):
        at_once = answer(make())
        time.sleep(1.3)
        return at_once, answer(make())

    def ran():
        return via.exec(["echo", "ran"])

    assert answer(ran()) == (200, "SUCCEEDED", "ran\n")  # the owner is remembered from here
    r = via.c.post(f"/api/v1/sandboxes/{via.id}/suspend", json={"generation": via.generation})
    assert r.status == 200 and r.body["status"] == "SUSPENDED", r
    at_once, fresh = remembered_then_fresh(ran)
    assert at_once == fresh and at_once[0] == 409, (at_once, fresh)
    r = via.c.post(f"/api/v1/sandboxes/{via.id}/resume")
    assert r.status == 200 and r.body["status"] == "READY", r
    via.generation = r.body["generation"]
    assert answer(ran()) == (200, "SUCCEEDED", "ran\n")
    assert via.release().status == 200
    at_once, fresh = remembered_then_fresh(ran)
    assert at_once == fresh and at_once[0] == 409, (at_once, fresh)
    # Placed again (a new generation): the new owner is asked, not the old one.
    assert via.resolve().status == 200 and via.connect().status == 200
    assert answer(ran()) == (200, "SUCCEEDED", "ran\n")
    # Its owner killed: the remembered forward fails (503, as the registry
    # says too until the owner's entry expires) and is forgotten; once the
    # owner's heartbeat is stale, the front says so itself.
    route = via.route().body
    dead = next(d for d in ds if d.worker_id == route["worker_id"])
    front = next(d for d in ds if d.worker_id != route["worker_id"])
    via = Sandbox(front.client(), via.id, "scope")
    via.generation = route["generation"]
    assert answer(ran()) == (200, "SUCCEEDED", "ran\n")
    dead.proc.kill()
    dead.proc.wait()
    assert_error(ran(), 503, "SANDBOX_WORKER_UNREACHABLE")
    assert wait_for(lambda: ran().status != 503, 20), ran()
    assert_error(ran(), 409, "STALE_SANDBOX_ROUTE")


def read_events(daemon, method, path, body=None, headers=None, stop_after=None):
    """(events as (name, id, data), seconds to the first event) of a stream
    through `daemon`; stop_after: stop once that many stdout events came."""
    t0 = time.monotonic()
    ev = Events(daemon, method, path, body, headers)
    assert ev.status == 200, (ev.status, ev.resp.read())
    assert ev.headers["Content-Type"].startswith("text/event-stream")
    events = []
    while (e := ev.next()) is not None:
        events.append(e)
        if e[0] == "end" or (stop_after and
                             sum(x[0] == "stdout" for x in events) >= stop_after):
            break
    ev.close()
    return events, ev.first_at - t0


def test_streams_stdin_and_signals_through_a_replica_that_is_not_the_owner(daemon_factory):
    """The event stream comes through the front as the owner sends it (the
    first line long before the command ends), a reconnect there with
    Last-Event-ID goes on where it left off, and stdin and signals reach
    the owner's command."""
    ds = fleet(daemon_factory)
    via, owner, other = owned_elsewhere(ds, "fs")
    path = f"/api/v1/sandboxes/{via.id}/exec"
    body = {"exec_id": "fw-stream", "generation": via.generation, "stream": True,
            "argv": ["sh", "-c", "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.5; done"]}
    events, first_at = read_events(other, "POST", path, body, stop_after=2)
    assert first_at < 2.0, first_at  # relayed as it comes, not at the end
    got = "".join(d["text"] for n, i, d in events if n == "stdout")
    assert got == "line 1\nline 2\n", got
    last = [i for n, i, d in events if i][-1]
    rest, _ = read_events(other, "GET", f"{path}/fw-stream/stream?generation={via.generation}",
                          headers={"Last-Event-ID": last})
    got += "".join(d["text"] for n, i, d in rest if n == "stdout")
    assert got == "".join(f"line {i}\n" for i in range(1, 7))
    assert rest[-1][0] == "end" and rest[-1][2]["status"] == "SUCCEEDED"
    assert f"streamed from {owner.worker_id}" in other.stderr(), other.stderr()[-2000:]
    # stdin and a signal through the front.
    r = via.exec(["cat"], exec_id="fw-cat", background=True, stdin=True, exec_scope="scope-c1")
    assert r.status == 200, r
    r = via.c.post(f"{path}/fw-cat/stdin", json={"data": "via the front\n", "close": True},
                   params={"generation": via.generation})
    assert r.status == 200 and r.body["written"] == 14, r
    assert wait_for(lambda: via.c.get(f"{path}/fw-cat", params={"generation": via.generation})
                    .body["status"] != "RUNNING", 10)
    r = via.c.get(f"{path}/fw-cat", params={"generation": via.generation})
    assert r.body["stdout"] == "via the front\n", r
    r = via.exec(["sleep", "30"], exec_id="fw-sleep", background=True, exec_scope="scope-c2")
    r = via.c.post(f"{path}/fw-sleep/signal", json={"signal": "SIGKILL"},
                   params={"generation": via.generation})
    assert r.status == 200 and r.body == {"signalled": True}, r


def test_terminals_and_ports_say_which_worker_to_connect_to(daemon_factory):
    """Terminals and ports are long-lived connections the front does not
    relay (yet): through a replica that does not own the sandbox they are
    refused with 421 and the owner's endpoint, never a confusing 404."""
    ds = fleet(daemon_factory)
    via, owner, other = owned_elsewhere(ds, "fwt")
    c = other.client()
    key = base64.b64encode(b"0123456789abcdef").decode()
    ws = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
          "Sec-WebSocket-Key": key}
    r = c.get(f"/api/v1/sandboxes/{via.id}/terminal?generation={via.generation}", headers=ws)
    assert_error(r, 421, "SANDBOX_ON_ANOTHER_WORKER")
    endpoint = c.post("/api/v1/sandboxes/resolve", json={
        "sandbox_id": via.id, "workspace_scope_id": "scope"}).body["worker_endpoint"]
    assert endpoint and endpoint in r.body["detail"]["message"], (endpoint, r.body)
    r = c.get(f"/api/v1/sandboxes/{via.id}/ports/8080/")
    assert_error(r, 421, "SANDBOX_ON_ANOTHER_WORKER")
    # On the owner both are there.
    r = owner.client().get(f"/api/v1/sandboxes/{via.id}/ports/8080/")
    assert_error(r, 502, "SANDBOX_PORT_NOT_LISTENING")
