"""Nothing left to a human to clean up (FLEET.md §6, §7): the maintenance
cycle releases idle routes (IDLE_TIMEOUT), expires suspended ones
(SUSPEND_EXPIRED), finishes stuck releases (RELEASE_RETRY), removes
orphaned local directories after their TTL, counts a failing step while
the rest of the cycle goes on, and publishes reaper_status; exec answers
and the route record say when the sandbox would be stopped or released."""
import datetime as dt
import subprocess
import time
import uuid

from sandloom_client import Sandbox, assert_error

FAST = {"SANDBOX_MAINTENANCE_INTERVAL_SECONDS": "1", "SANDBOX_IDLE_TTL_SECONDS": "2",
        "SANDBOX_ORPHAN_RELEASE_GRACE_SECONDS": "1", "SANDBOX_SUSPENDED_RETENTION_SECONDS": "2",
        "SANDBOX_ORPHAN_DORMANT_DIR_TTL_SECONDS": "1"}


def ready(client, prefix):
    sb = Sandbox(client, f"{prefix}-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    return sb


def wait_for(cond, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


def ts(text):
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_idle_route_is_released_and_answers_say_when(daemon_factory):
    d = daemon_factory(FAST)
    c = d.client()
    sb = ready(c, "idle")
    r = sb.exec(["true"])
    assert r.status == 200
    now = dt.datetime.now(dt.timezone.utc)
    # The answer says when the route goes if nothing happens (and the session).
    release_at = ts(r.body["idle_release_at"])
    assert dt.timedelta(seconds=1) < release_at - now < dt.timedelta(seconds=3), r.body
    assert ts(r.body["session_idle_stop_at"]) > now
    rec = sb.route().body
    assert rec["idle_release_at"] and rec["retained_until"] is None, rec
    root = d.sandbox_root / sb.id
    assert root.is_dir()
    assert wait_for(lambda: sb.route().body["status"] == "RELEASED", 10)
    rec = sb.route().body
    assert rec["last_release_reason"] == "IDLE_TIMEOUT", rec
    assert rec["last_released_by"] == "system:orphan-reaper", rec
    assert rec["idle_release_at"] is None
    assert_error(sb.exec(["true"]), 409, "STALE_SANDBOX_ROUTE")
    assert wait_for(lambda: not root.exists(), 5), "the workspace outlived the release"
    reaper = c.get("/healthz").body["worker"]["orphan_reaper"]
    assert reaper["released_total"] >= 1 and reaper["last_run_at"].endswith("+00:00"), reaper
    # A route with a command running is never idle-released.
    busy = ready(c, "busy")
    r = busy.exec(["sleep", "4"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    assert busy.route().body["status"] == "READY"


def test_suspended_route_expires(daemon_factory):
    d = daemon_factory(dict(FAST, SANDBOX_IDLE_TTL_SECONDS="3600"))
    c = d.client()
    sb = ready(c, "exp")
    r = c.post(f"{sb.path}/suspend", json={"generation": sb.generation})
    assert r.status == 200
    assert ts(r.body["retained_until"]) - dt.datetime.now(dt.timezone.utc) < dt.timedelta(seconds=3)
    assert sb.route().body["retained_until"] is not None
    assert wait_for(lambda: sb.route().body["status"] == "RELEASED", 10)
    assert sb.route().body["last_release_reason"] == "SUSPEND_EXPIRED"
    assert_error(c.post(f"{sb.path}/resume"), 409, "STALE_SANDBOX_ROUTE")
    # resolve starts afresh under the same id.
    r = sb.resolve()
    assert r.status == 200 and r.body["status"] == "ASSIGNED", r


def test_stuck_release_is_finished_and_a_failure_does_not_stop_the_cycle(daemon_factory):
    d = daemon_factory(dict(FAST, SANDBOX_IDLE_TTL_SECONDS="3600"))
    c = d.client()
    stuck = ready(c, "stuck")
    broken = ready(c, "broken")
    # Two routes left RELEASING long ago (as by a crash mid-release). The
    # second one's directory cannot be moved (immutable): its release fails
    # every cycle, and the first is still finished.
    d.sql("UPDATE agent_sandbox_route SET status='RELEASING', "
          "updated_at='2020-01-01 00:00:00' WHERE sandbox_id IN (?, ?)", (stuck.id, broken.id))
    broken_root = d.sandbox_root / broken.id
    subprocess.run(["chattr", "+i", str(broken_root)], check=True)
    try:
        assert wait_for(lambda: stuck.route().body["status"] == "RELEASED", 10)
        assert stuck.route().body["last_release_reason"] == "RELEASE_RETRY"
        assert wait_for(lambda: c.get("/healthz").body["worker"]["orphan_reaper"]
                        ["failures_total"] >= 1, 10)
        assert broken.route().body["status"] == "RELEASING"
        # The cycle goes on: a later idle route is still handled meanwhile.
        assert c.get("/healthz").body["worker"]["orphan_reaper"]["released_total"] >= 1
    finally:
        subprocess.run(["chattr", "-i", str(broken_root)], check=True)
    # Once the obstacle is gone, the retry finishes it.
    assert wait_for(lambda: broken.route().body["status"] == "RELEASED", 10)


def test_orphaned_directory_is_removed_after_its_ttl(daemon_factory):
    d = daemon_factory(dict(FAST, SANDBOX_IDLE_TTL_SECONDS="3600"))
    c = d.client()
    sb = ready(c, "orph")
    assert sb.release().status == 200
    # A directory left for a released route (as after a crash during
    # destroy), and one no route knows: only the first is an orphan.
    orphan = d.sandbox_root / sb.id
    orphan.mkdir()
    (orphan / "left.txt").write_text("x")
    unknown = d.sandbox_root / ("nobody-" + uuid.uuid4().hex[:6])
    unknown.mkdir()
    assert wait_for(lambda: not orphan.exists(), 10), "the orphaned directory stayed"
    assert unknown.is_dir(), "a directory without a route is never deleted"
    reaper = c.get("/healthz").body["worker"]["orphan_reaper"]
    assert reaper["orphan_workspaces_deleted_total"] >= 1, reaper
