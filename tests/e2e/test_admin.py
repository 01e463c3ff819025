"""Admin routes and the runtime diagnostics snapshot (API.md §3.17, §3.18):
shapes, filters, ordering, bounded paging and refusals."""
import time
import uuid

import pytest

from sandloom_client import Sandbox, assert_error, assert_invalid

ADMIN = "/api/v1/admin"


@pytest.fixture(scope="module")
def fleet(daemon):
    """Three sandboxes in two scopes, one released, and a few executions."""
    c = daemon.client()
    tag = uuid.uuid4().hex[:6]
    boxes = {
        "a": Sandbox(c, f"adm-a-{tag}", f"team-x-{tag}"),
        "b": Sandbox(c, f"adm-b_{tag}", f"team-x-{tag}"),
        "c": Sandbox(c, f"adm-c-{tag}", f"team-y-{tag}"),
    }
    for sb in boxes.values():
        assert sb.resolve().status == 200 and sb.connect().status == 200
    for i in range(3):
        r = boxes["a"].exec(["sh", "-c", f"echo out-{i}; exit {i}"], exec_id=f"adm-ex-{i}")
        assert r.status == 200
    time.sleep(0.01)
    assert boxes["c"].release().status == 200
    return c, tag, boxes


def test_overview_shape_and_counts(fleet):
    c, tag, boxes = fleet
    o = c.get(f"{ADMIN}/overview").body
    for key in ("sandboxes_by_status", "sandbox_total", "workers", "worker_total",
                "live_worker_total", "capacity_total", "running_sessions_total",
                "template_total", "templates_shared", "isolation", "disk", "reclamation",
                "fleet_queries_available"):
        assert key in o, key
    assert o["sandbox_total"] == sum(o["sandboxes_by_status"].values())
    assert o["sandboxes_by_status"].get("RELEASED", 0) >= 1
    assert o["worker_total"] == len(o["workers"]) >= 1
    me = o["workers"][0]
    assert set(me) == {"worker_id", "worker_epoch", "endpoint", "status", "capacity",
                       "running_sessions", "profile_hash", "started_at", "heartbeat_at",
                       "heartbeat_age_seconds", "live"}
    assert me["live"] is True and me["heartbeat_age_seconds"] >= 0
    assert o["live_worker_total"] >= 1 and o["capacity_total"] >= me["capacity"]
    assert o["fleet_queries_available"] is True and o["templates_shared"] is False
    assert o["isolation"]["selected_level"] in ("basic", "standard", "strict")
    assert o["reclamation"]["heartbeat_ttl_seconds"] > 0


def test_sandboxes_filters_order_and_fields(fleet):
    c, tag, boxes = fleet
    r = c.get(f"{ADMIN}/sandboxes", params={"workspace_scope_id": f"team-x-{tag}"}).body
    ids = [s["sandbox_id"] for s in r["sandboxes"]]
    assert sorted(ids) == sorted([boxes["a"].id, boxes["b"].id]) and r["total"] == 2, r
    # Most recently active first: a ran commands after b was connected.
    assert ids[0] == boxes["a"].id, ids
    item = r["sandboxes"][0]
    assert set(item) == {"sandbox_id", "workspace_scope_id", "worker_id", "generation",
                         "sandbox_uid", "status", "storage_mode", "profile_id", "created_at",
                         "last_active_at", "ready_at", "lifecycle_count", "total_lifetime_ms",
                         "idle_seconds", "owner_live"}
    assert isinstance(item["idle_seconds"], float) and item["idle_seconds"] >= 0
    assert item["owner_live"] is True, item
    released = c.get(f"{ADMIN}/sandboxes", params={"status": "RELEASED",
                                                   "search": boxes["c"].id}).body
    assert [s["sandbox_id"] for s in released["sandboxes"]] == [boxes["c"].id]
    assert released["sandboxes"][0]["idle_seconds"] is None
    assert released["sandboxes"][0]["owner_live"] is None
    # search is a literal substring: "_" matches only an underscore.
    lit = c.get(f"{ADMIN}/sandboxes", params={"search": f"b_{tag}"}).body
    assert [s["sandbox_id"] for s in lit["sandboxes"]] == [boxes["b"].id], lit
    none = c.get(f"{ADMIN}/sandboxes", params={"search": f"%{tag}"}).body
    assert none["total"] == 0 and none["sandboxes"] == [], none
    assert c.get(f"{ADMIN}/sandboxes", params={"worker_id": "no-such-worker"}).body["total"] == 0


def test_sandboxes_paging(fleet):
    c, tag, boxes = fleet
    page1 = c.get(f"{ADMIN}/sandboxes", params={"search": tag, "limit": 2}).body
    page2 = c.get(f"{ADMIN}/sandboxes", params={"search": tag, "limit": 2, "offset": 2}).body
    assert page1["total"] == page2["total"] == 3
    assert (page1["limit"], page1["offset"], page2["offset"]) == (2, 0, 2)
    assert len(page1["sandboxes"]) == 2 and len(page2["sandboxes"]) == 1
    seen = {s["sandbox_id"] for s in page1["sandboxes"] + page2["sandboxes"]}
    assert seen == {sb.id for sb in boxes.values()}
    assert c.get(f"{ADMIN}/sandboxes", params={"limit": 200}).status == 200
    assert c.get(f"{ADMIN}/sandboxes").body["limit"] == 50


@pytest.mark.parametrize("route", ["sandboxes", "execs"])
@pytest.mark.parametrize("params", [{"limit": 201}, {"limit": 0}, {"limit": -1},
                                    {"limit": "ten"}, {"offset": -1}, {"offset": "x"}])
def test_paging_limits_are_refused_not_clamped(fleet, route, params):
    c, _, _ = fleet
    assert_invalid(c.get(f"{ADMIN}/{route}", params=params))


@pytest.mark.parametrize("route,params", [
    ("sandboxes", {"status": "S" * 33}),
    ("sandboxes", {"workspace_scope_id": "w" * 192}),
    ("sandboxes", {"worker_id": "w" * 129}),
    ("sandboxes", {"search": "s" * 129}),
    ("execs", {"sandbox_id": "s" * 129}),
    ("execs", {"status": "S" * 33}),
])
def test_overlong_filters_are_refused(fleet, route, params):
    c, _, _ = fleet
    r = c.get(f"{ADMIN}/{route}", params=params)
    assert_invalid(r)
    assert list(params.values())[0].encode() not in r.raw, "the input is never echoed"


def test_execs_list_and_detail(fleet):
    c, tag, boxes = fleet
    r = c.get(f"{ADMIN}/execs", params={"sandbox_id": boxes["a"].id}).body
    assert r["total"] == 3 and [e["exec_id"] for e in r["execs"]] == \
        ["adm-ex-2", "adm-ex-1", "adm-ex-0"], r
    e = r["execs"][0]
    assert "stdout" not in e and e["exit_code"] == 2 and e["status"] == "FAILED"
    assert e["argv"] == ["sh", "-c", "echo out-2; exit 2"] and e["duration_ms"] >= 0
    ok = c.get(f"{ADMIN}/execs", params={"sandbox_id": boxes["a"].id,
                                          "status": "SUCCEEDED"}).body
    assert [x["exec_id"] for x in ok["execs"]] == ["adm-ex-0"]
    d = c.get(f"{ADMIN}/execs/{boxes['a'].id}/adm-ex-1").body
    assert d["stdout"] == "out-1\n" and d["stderr"] == "" and d["exit_code"] == 1
    assert_error(c.get(f"{ADMIN}/execs/{boxes['a'].id}/nope"), 404, "EXEC_NOT_FOUND")
    # The detail outlives the sandbox.
    assert boxes["a"].release().status == 200
    assert c.get(f"{ADMIN}/execs/{boxes['a'].id}/adm-ex-1").body["stdout"] == "out-1\n"


def test_audit_lists_recent_executions(fleet):
    c, tag, boxes = fleet
    audit = c.get(f"/api/v1/sandboxes/{boxes['a'].id}/audit").body
    assert audit["executions"]["total"] == 3
    assert [e["exec_id"] for e in audit["executions"]["recent"]][0] == "adm-ex-2"


def test_diagnostics_snapshot(fleet):
    c, _, _ = fleet
    d = c.get("/api/v1/sandboxes/diagnostics/runtime").body
    assert d["available"] is True and d["scope"] == "observed_workers"
    assert d["queue_length"] is None and d["truncated"] is False and d["note"]
    assert d["excluded_workers"] == 0
    w = d["workers"][0]
    assert set(w) == {"worker_id", "status", "capacity", "running_sessions", "running_execs",
                      "max_parallel_execs_per_sandbox", "observed_at", "profile_id"}
    assert isinstance(w["observed_at"], int) and w["observed_at"] > 1_600_000_000_000
    t = d["totals"]
    assert t["session_capacity"] == sum(x["capacity"] for x in d["workers"])
    assert t["remaining_sessions"] == sum(max(0, x["capacity"] - x["running_sessions"])
                                          for x in d["workers"] if x["status"] == "ACTIVE")
    assert t["existing_session_exec_capacity"] == sum(
        x["running_sessions"] * x["max_parallel_execs_per_sandbox"] for x in d["workers"])


@pytest.mark.parametrize("path", [f"{ADMIN}/overview", f"{ADMIN}/sandboxes", f"{ADMIN}/execs",
                                  f"{ADMIN}/execs/x/y", "/api/v1/sandboxes/diagnostics/runtime"])
def test_admin_routes_need_the_token(daemon, path):
    r = daemon.client().get(path, auth=False)
    assert_error(r, 401, "SANDBOX_UNAUTHORIZED")


def test_execs_filter_by_termination_reason(daemon):
    """Ours: a client's cancel is stored FAILED (the reference's status)
    with termination_reason CANCELLED_BY_CLIENT; the list filters on the
    reason ("none" = ended by itself), so a CANCELLED filter is not the only
    way to find it."""
    c = daemon.client()
    sb = Sandbox(c, "adm-reason-" + uuid.uuid4().hex[:6], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    assert sb.exec(["true"], exec_id="reason-ok").status == 200
    r = sb.exec(["sleep", "30"], exec_id="reason-cancel", background=True)
    assert r.status == 200
    assert c.post(f"{sb.path}/exec/reason-cancel/cancel?generation={sb.generation}").status == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        x = c.get(f"{sb.path}/exec/reason-cancel", params={"generation": sb.generation}).body
        if x["status"] != "RUNNING":
            break
        time.sleep(0.1)
    assert x["status"] == "FAILED" and x["termination_reason"] == "CANCELLED_BY_CLIENT", x
    assert sb.exec(["sleep", "5"], exec_id="reason-timeout", timeout_seconds=1).status == 200

    def ids(**params):
        page = c.get(f"{ADMIN}/execs", params={"sandbox_id": sb.id, **params}).body
        assert page["total"] == len(page["execs"]), page
        return [e["exec_id"] for e in page["execs"]]

    assert ids(termination_reason="CANCELLED_BY_CLIENT") == ["reason-cancel"]
    assert ids(termination_reason="TIMED_OUT") == ["reason-timeout"]
    assert ids(termination_reason="none") == ["reason-ok"]
    assert ids(status="CANCELLED") == [], "a client's cancel is FAILED, as in the reference"
    assert ids(status="FAILED", termination_reason="CANCELLED_BY_CLIENT") == ["reason-cancel"]
    assert sorted(ids()) == ["reason-cancel", "reason-ok", "reason-timeout"]
    assert_invalid(c.get(f"{ADMIN}/execs", params={"termination_reason": "x" * 33}))
