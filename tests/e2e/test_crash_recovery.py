"""Crash recovery (execution-engine issue): kill -9 of sandloomd while 50
commands run, then a restart on the same state.

Asserted, at the strongest level and at basic (where no PID namespace ends a
sandbox's processes for us):
  * no process of any sandbox survives the dead daemon, even before restart
    (background children, setsid'd children included);
  * after restart nothing is lost: every route and workspace file is there,
    and every execution that was running is recorded WORKER_LOST (never left
    RUNNING);
  * clients holding the old generation get 409 STALE_SANDBOX_ROUTE, and a new
    resolve + connect gives the same workspace back at a new generation.
"""
import os
import signal
import uuid

import pytest

from fs_helpers import wait_until
from sandloom_client import Sandbox, assert_error

SANDBOXES = 5
PER_SANDBOX = 10  # 50 commands in flight


def uid_pids(uid):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            found.append(int(pid))
                        break
        except OSError:
            continue
    return found


@pytest.mark.parametrize("level", ["auto", "basic"])
def test_kill_9_with_50_commands_in_flight(daemon_factory, level):
    d1 = daemon_factory({"SANDBOX_ISOLATION_LEVEL": level})
    c1 = d1.client()
    boxes = []
    for i in range(SANDBOXES):
        sb = Sandbox(c1, f"crash{i}-" + uuid.uuid4().hex[:8], "scope")
        assert sb.resolve().status == 200 and sb.connect().status == 200
        assert sb.write("/workspace/kept.txt", f"box {i}\n".encode()).status == 200
        boxes.append(sb)
    for sb in boxes:
        for n in range(PER_SANDBOX):
            # A command with a background child and a setsid'd grandchild:
            # the shapes that escape a process-group kill.
            r = sb.exec(["sh", "-c", f"echo {n} > /workspace/started-{n}; "
                         "sleep 300 & setsid sleep 300 & sleep 300"],
                        exec_id=f"inflight-{n}", background=True, exec_scope=f"scope-{n}")
            assert r.status == 200 and r.body["status"] == "RUNNING", r
    running = c1.get("/api/v1/admin/execs", params={"status": "RUNNING", "limit": 200}).body
    assert running["total"] == SANDBOXES * PER_SANDBOX, running
    uids = [sb.uid for sb in boxes]

    def all_started():
        return all((d1.sandbox_root / sb.id / "workspace" / f"started-{n}").exists()
                   for sb in boxes for n in range(PER_SANDBOX))

    assert wait_until(all_started, 30), "not every command started"
    # A command writes its file before it forks its sleeps: wait for those.
    assert wait_until(lambda: all(len(uid_pids(u)) >= 3 * PER_SANDBOX for u in uids), 10), \
        {u: len(uid_pids(u)) for u in uids}

    os.killpg(d1.proc.pid, signal.SIGKILL)
    d1.proc.wait(10)
    # Nothing of any sandbox outlives the daemon, before any restart.
    assert wait_until(lambda: not any(uid_pids(u) for u in uids), 10), \
        {u: uid_pids(u) for u in uids if uid_pids(u)}

    d2 = daemon_factory({"SANDBOX_ISOLATION_LEVEL": level}, state_dir=d1.state, token=d1.token,
                        port=d1.port)
    c2 = d2.client()
    execs = c2.get("/api/v1/admin/execs", params={"limit": 200}).body
    assert execs["total"] == SANDBOXES * PER_SANDBOX, execs
    assert {e["status"] for e in execs["execs"]} == {"WORKER_LOST"}, execs
    assert all(e["finished_at"] for e in execs["execs"]), execs
    for old in boxes:
        sb = Sandbox(c2, old.id, "scope")
        sb.generation = old.generation
        # The old generation's clients are fenced off.
        assert_error(sb.exec(["true"]), 409, "STALE_SANDBOX_ROUTE")
        assert sb.route().status == 200
        r = sb.resolve()
        assert r.status == 200 and r.body["generation"] == old.generation + 1, r
        assert sb.connect().status == 200
        # The workspace came through whole.
        r = sb.exec(["sh", "-c", "cat /workspace/kept.txt; ls /workspace | grep -c '^started-'"])
        assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
        assert r.body["stdout"] == f"box {boxes.index(old)}\n{PER_SANDBOX}\n", r
        assert sb.release().status == 200
