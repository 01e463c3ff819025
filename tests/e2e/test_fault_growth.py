"""Hardening issue, fault 8: what the service stores stays bounded.

  * Finished execution records older than SANDBOX_EXEC_RETENTION_SECONDS
    are deleted by the maintenance cycle's prune (in batches; FLEET.md §6.1
    step 7); running ones never are.
  * One sandbox's stored output stays under
    SANDBOX_MAX_STORED_OUTPUT_BYTES_PER_SANDBOX: the oldest records lose
    their output first (emptied, truncated), the newest keep theirs.
"""
import time
import uuid

from sandloom_client import Sandbox, assert_error

MiB = 1024 * 1024


def ready(d, prefix):
    sb = Sandbox(d.client(), f"{prefix}-{uuid.uuid4().hex[:10]}", "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    return sb


def poll(sb, exec_id):
    return sb.c.get(f"{sb.path}/exec/{exec_id}", params={"generation": sb.generation})


def test_finished_records_past_their_retention_are_pruned(daemon_factory):
    d = daemon_factory({"SANDBOX_EXEC_RETENTION_SECONDS": "2",
                        "SANDBOX_HISTORY_PRUNE_INTERVAL_SECONDS": "1",
                        "SANDBOX_MAINTENANCE_INTERVAL_SECONDS": "1"})
    sb = ready(d, "prune")
    done = []
    for i in range(5):
        r = sb.exec(["echo", str(i)])
        assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
        done.append(r.body["exec_id"])
    running = sb.exec(["sleep", "30"], background=True, exec_scope="long").body["exec_id"]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and poll(sb, done[-1]).status == 200:
        time.sleep(0.3)
    for exec_id in done:
        assert_error(poll(sb, exec_id), 404, "EXEC_NOT_FOUND")
    r = poll(sb, running)
    assert r.status == 200 and r.body["status"] == "RUNNING", r
    reaper = d.client().get("/healthz").body["worker"]["orphan_reaper"]
    assert reaper["exec_history_pruned_rows"] >= 5, reaper
    # A replay of a pruned id runs it again (its record is gone).
    r = sb.exec(["echo", "again"], exec_id=done[0], exec_scope="again")
    assert r.status == 200 and r.body["stdout"] == "again\n", r


def test_stored_output_per_sandbox_is_capped_oldest_first(daemon_factory):
    d = daemon_factory({"SANDBOX_MAX_STORED_OUTPUT_BYTES_PER_SANDBOX": str(3 * MiB)})
    sb = ready(d, "outcap")
    other = ready(d, "outcap-other")
    ids = []
    for i in range(5):
        r = sb.exec(["sh", "-c", f"head -c {MiB} /dev/zero | tr '\\0' {i}"])
        assert r.status == 200 and len(r.body["stdout"]) == MiB, r.status
        ids.append(r.body["exec_id"])
    r = other.exec(["sh", "-c", f"head -c {MiB} /dev/zero | tr '\\0' z"])
    assert r.status == 200
    kept = []
    for i, exec_id in enumerate(ids):
        b = poll(sb, exec_id).body
        kept.append(len(b["stdout"]))
        if i < 2:
            assert b["stdout"] == "" and b["truncated"] is True, (i, len(b["stdout"]))
        else:
            assert b["stdout"] == str(i) * MiB, (i, len(b["stdout"]))
    assert sum(kept) <= 3 * MiB, kept
    # Another sandbox's output is its own budget.
    assert len(poll(other, r.body["exec_id"]).body["stdout"]) == MiB


def test_per_path_lock_files_do_not_outlive_their_use(daemon_factory):
    """Per-path lock files accumulated forever (18,907 after ten minutes of
    load): the last holder now removes its file. Calls on one path from
    several threads still exclude each other (409 SANDBOX_FILE_PATH_LOCKED
    or success, never a torn file)."""
    import threading
    d = daemon_factory()
    sb = ready(d, "locks")
    for i in range(60):
        assert sb.write(f"/workspace/f{i}.txt", f"{i}\n").status == 200
        assert sb.read(f"/workspace/f{i}.txt").status == 200
    assert sb.list("/workspace").status == 200
    assert sb.mkdir("/workspace/d").status == 200
    assert sb.move("/workspace/f0.txt", "/workspace/d/f0.txt").status == 200
    assert sb.rm("/workspace/f1.txt").status == 200
    locks = d.sandbox_root / sb.id / ".file-locks"
    assert sorted(p.name for p in locks.iterdir()) == [], sorted(p.name for p in locks.iterdir())[:5]

    payloads = [bytes([65 + n]) * 200000 for n in range(4)]
    codes = []

    def hammer(n):
        for _ in range(15):
            r = sb.write("/workspace/shared.bin", payloads[n])
            codes.append(r.status if r.status == 200 else r.body["detail"]["code"])
            r = sb.read("/workspace/shared.bin")
            codes.append(r.status if r.status == 200 else r.body["detail"]["code"])

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert set(codes) <= {200, "SANDBOX_FILE_PATH_LOCKED"} and 200 in codes, codes
    data = (d.sandbox_root / sb.id / "workspace" / "shared.bin").read_bytes()
    assert data in payloads, "a torn file"
    assert list(locks.iterdir()) == []


def test_lifecycle_histories_are_trimmed_by_age(daemon_factory):
    """The other half of the prune: entries of a route's lifecycle history
    older than 15 days go (they are bounded only when written otherwise)."""
    import json
    d = daemon_factory({"SANDBOX_HISTORY_PRUNE_INTERVAL_SECONDS": "1",
                        "SANDBOX_MAINTENANCE_INTERVAL_SECONDS": "1"})
    sb = ready(d, "hist")
    old = {"generation": 1, "started_at": "2020-01-01T00:00:00Z", "created_by": "t",
           "ready_at": "2020-01-01T00:00:00Z", "released_at": "2020-01-02T00:00:00Z",
           "release_reason": "IDLE_TIMEOUT", "released_by": "t", "lifetime_ms": 1}
    recent = dict(old, released_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    d.sql("UPDATE agent_sandbox_route SET lifecycle_history_json = ? WHERE sandbox_id = ?",
          (json.dumps([old, old, recent]), sb.id))
    # The audit bounds what it shows on every read; the stored row is
    # trimmed by the prune.
    deadline = time.monotonic() + 10
    reaper = {}
    while time.monotonic() < deadline:
        reaper = d.client().get("/healthz").body["worker"]["orphan_reaper"]
        if reaper.get("audit_history_pruned_rows", 0) >= 1:
            break
        time.sleep(0.3)
    assert reaper.get("audit_history_pruned_rows", 0) >= 1, reaper
    stored = json.loads(d.sql("SELECT lifecycle_history_json FROM agent_sandbox_route "
                              "WHERE sandbox_id = ?", (sb.id,))[0][0])
    assert [h["released_at"] for h in stored] == [recent["released_at"]], stored
    assert len(sb.audit().body["history"]) == 1
