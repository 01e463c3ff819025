"""The execution engine against a real daemon: background runs and polling
(API.md §3.9–§3.10), cancel (§3.11, §4.6), timeout and termination of the
whole process group (§4.2, §4.6), exec_id idempotency (§4.3), exec_scope
concurrency, the parallel limit and the file-API lock (§4.4), caller env
rules (§4.5), output capping (§4.2), many commands in flight without a
thread per command, and worker shutdown (§1.2 CANCELLED).

test_exec.py already covers synchronous basics (exit codes, stdout/stderr,
env/cwd, simple replay of a finished synchronous record, a plain timeout);
this module does not repeat them.
"""

import concurrent.futures
import os
import random
import signal
import time
import uuid

import pytest

from conftest import Daemon
from sandloom_client import Sandbox, assert_error

GRACE = 0.5  # SANDBOX_TERMINATE_GRACE_SECONDS of every daemon started here
MAX_OUTPUT = 1000  # SANDBOX_MAX_OUTPUT_BYTES of the module daemon
MAX_PARALLEL = 2  # SANDBOX_MAX_PARALLEL_EXECS_PER_SANDBOX of the module daemon
EXEC_FIELDS = {"exec_id", "status", "exit_code", "stdout", "stderr", "duration_ms", "truncated",
               "termination_reason", "session_idle_stop_at", "idle_release_at"}
# Ours, additive, on every exec answer: when the session stops / the route is
# released if nothing more happens (checked in test_reclamation.py).
IDLE_FIELDS = {"session_idle_stop_at", "idle_release_at"}


def spec_fields(body):
    """The reference's fields (and termination_reason): without ours that
    say when the sandbox idles, or that an answer is a replay."""
    return {k: v for k, v in body.items() if k not in IDLE_FIELDS | {"replayed", "warnings"}}



# -- helpers -------------------------------------------------------------------
def uid_env():
    """A uid range of our own (other daemons on the host use 30000-30999), so
    /proc scans by uid only see this module's sandboxes."""
    base = random.randrange(40000, 58000, 1000)
    return {"SANDBOX_UID_START": str(base), "SANDBOX_UID_END": str(base + 999)}


def engine_env(**extra):
    env = {"SANDBOX_TERMINATE_GRACE_SECONDS": str(GRACE)}
    env.update(uid_env())
    env.update(extra)
    return env


def uid_processes(uid, needle=None):
    """Live (non-zombie) host processes whose real uid is `uid`, optionally
    only those whose command line contains `needle` (str)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError):
            continue
        if int(fields["Uid"].split()[0]) != uid or fields["State"].strip().startswith("Z"):
            continue
        if needle is None or needle in cmd:
            found.append((int(pid), cmd))
    return found


def count_processes(uids, cmdline):
    """How many live processes of any of `uids` have exactly `cmdline`."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            if cmd != cmdline:
                continue
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except (OSError, ValueError):
            continue
        if int(fields["Uid"].split()[0]) in uids and not fields["State"].strip().startswith("Z"):
            n += 1
    return n


def daemon_threads(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError(f"no Threads: line for pid {pid}")


def wait_for(cond, seconds, step=0.05):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def new_id(prefix="x"):
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def ready(client, prefix="eng"):
    sb = Sandbox(client, new_id(prefix), "scope-" + uuid.uuid4().hex[:8])
    r = sb.resolve()
    assert r.status == 200, r
    r = sb.connect()
    assert r.status == 200, r
    assert isinstance(r.body.get("uid"), int), r
    sb.uid = r.body["uid"]
    return sb


def exec_ok(sb, argv, **kw):
    r = sb.exec(argv, **kw)
    assert r.status == 200, r
    # A replay (an exec_id used before) adds "replayed" and may add warnings.
    extra = {"replayed", "warnings"} if r.body.get("replayed") is True else set()
    assert EXEC_FIELDS <= set(r.body) <= EXEC_FIELDS | extra, f"exec response fields: {r.body!r}"
    return r.body


def start_bg(sb, argv, exec_id=None, **kw):
    """Start a background run; assert the exact RUNNING stub (§3.9)."""
    exec_id = exec_id or new_id("bg")
    t0 = time.monotonic()
    r = sb.exec(argv, exec_id=exec_id, background=True, **kw)
    elapsed = time.monotonic() - t0
    assert r.status == 200, r
    assert spec_fields(r.body) == {"exec_id": exec_id, "status": "RUNNING", "exit_code": None, "stdout": "",
                      "stderr": "", "duration_ms": None, "truncated": False,
                      "termination_reason": None}, f"background stub: {r.body!r}"
    assert elapsed < 2.0, f"a background request must answer at once, took {elapsed:.2f} s"
    return exec_id


def poll(sb, exec_id, generation=None, **kw):
    params = {} if generation is False else {"generation": sb.generation if generation is None
                                             else generation}
    return sb.c.get(f"{sb.path}/exec/{exec_id}", params=params, **kw)


def cancel(sb, exec_id, generation=None):
    params = {} if generation is False else {"generation": sb.generation if generation is None
                                             else generation}
    return sb.c.post(f"{sb.path}/exec/{exec_id}/cancel", params=params)


def wait_done(sb, exec_id, seconds=10):
    """Poll until the record leaves RUNNING; return its body."""
    deadline = time.monotonic() + seconds
    while True:
        r = poll(sb, exec_id)
        assert r.status == 200, r
        assert set(r.body) == EXEC_FIELDS, f"poll fields: {r.body!r}"
        assert r.body["duration_ms"] is None, f"a poll answers duration_ms null: {r.body!r}"
        if r.body["status"] != "RUNNING":
            return r.body
        assert time.monotonic() < deadline, f"{exec_id} still RUNNING after {seconds} s: {r.body!r}"
        time.sleep(0.05)


# -- fixtures -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def eng(sandloomd_binary):
    d = Daemon(sandloomd_binary, engine_env(
        SANDBOX_MAX_OUTPUT_BYTES=str(MAX_OUTPUT),
        SANDBOX_MAX_PARALLEL_EXECS_PER_SANDBOX=str(MAX_PARALLEL))).spawn()
    try:
        d.wait_healthy()
        yield d
    finally:
        d.cleanup()


@pytest.fixture
def sb(eng):
    s = ready(eng.client())
    yield s
    try:
        s.release()
    except OSError:
        pass


# -- background runs and polling (§3.9, §3.10) ---------------------------------------
def test_background_stub_then_poll_until_final(sb):
    exec_id = start_bg(sb, ["sh", "-c", "echo out; echo err >&2; sleep 1.5; echo late; exit 4"])
    r = poll(sb, exec_id)
    assert r.status == 200, r
    assert spec_fields(r.body) == {"exec_id": exec_id, "status": "RUNNING", "exit_code": None, "stdout": "",
                      "stderr": "", "duration_ms": None, "truncated": False,
                      "termination_reason": None}, f"poll while running: {r.body!r}"
    # The route is RUNNING while the background command runs (§2.1).
    assert sb.route().body["status"] == "RUNNING"
    b = wait_done(sb, exec_id)
    assert spec_fields(b) == {"exec_id": exec_id, "status": "FAILED", "exit_code": 4, "stdout": "out\nlate\n",
                 "stderr": "err\n", "duration_ms": None, "truncated": False,
                 "termination_reason": None}, b
    # ... and READY once the last command of the generation finished.
    assert wait_for(lambda: sb.route().body["status"] == "READY", 3), sb.route()
    # A successful background run.
    exec_id = start_bg(sb, ["sh", "-c", "echo \"$GREETING\"; pwd"], env={"GREETING": "hi"},
                       cwd="/workspace")
    b = wait_done(sb, exec_id)
    assert (b["status"], b["exit_code"], b["stdout"], b["stderr"]) == \
        ("SUCCEEDED", 0, "hi\n/workspace\n", ""), b


def test_background_really_runs_in_the_background(sb):
    """The stub comes back while the command is still working; its side
    effect appears later."""
    # Scoped, so the file API stays usable while it runs (§4.4).
    exec_id = start_bg(sb, ["sh", "-c", "sleep 1; echo done > /workspace/bg-marker"],
                       exec_scope="marker")
    r = sb.read("/workspace/bg-marker")
    assert r.status == 400, f"the background command cannot have finished yet: {r!r}"
    assert wait_done(sb, exec_id)["status"] == "SUCCEEDED"
    assert sb.read_bytes("/workspace/bg-marker") == b"done\n"


def test_synchronous_request_waits_for_the_command(sb):
    t0 = time.monotonic()
    b = exec_ok(sb, ["sh", "-c", "sleep 1.2; echo finished"])
    elapsed = time.monotonic() - t0
    assert b["status"] == "SUCCEEDED" and b["stdout"] == "finished\n", b
    assert elapsed >= 1.1, f"the synchronous call returned after {elapsed:.2f} s"
    assert isinstance(b["duration_ms"], int) and 1100 <= b["duration_ms"] <= elapsed * 1000 + 50, b


def test_poll_refusals(sb):
    exec_id = new_id("p")
    exec_ok(sb, ["true"], exec_id=exec_id)
    for bad in (False, 0, -1, "abc", ""):
        r = poll(sb, exec_id, generation=bad)
        assert_error(r, 422, "SANDBOX_INVALID_REQUEST")
    assert_error(poll(sb, "no-such-exec-" + uuid.uuid4().hex[:8]), 404, "EXEC_NOT_FOUND")
    assert_error(poll(sb, exec_id, generation=sb.generation + 1), 409, "STALE_SANDBOX_ROUTE")
    assert poll(sb, exec_id).status == 200
    assert sb.release().status == 200
    assert_error(poll(sb, exec_id), 409, "STALE_SANDBOX_ROUTE")
    assert_error(poll(sb, exec_id, generation=sb.generation + 1), 409, "STALE_SANDBOX_ROUTE")
    assert_error(cancel(sb, exec_id), 409, "STALE_SANDBOX_ROUTE")


def test_old_generation_record_is_polled_and_replayed_after_reresolve(sb):
    """Records are keyed by (sandbox_id, exec_id) across generations (§3.10, §4.3)."""
    exec_id = new_id("gen")
    first = exec_ok(sb, ["sh", "-c", "echo gen-one"], exec_id=exec_id)
    assert first["stdout"] == "gen-one\n"
    old_gen = sb.generation
    assert sb.release().status == 200
    r = sb.resolve()
    assert r.status == 200 and r.body["generation"] == old_gen + 2, r
    assert sb.connect().status == 200
    r = poll(sb, exec_id)
    assert r.status == 200, r
    assert (r.body["status"], r.body["stdout"]) == ("SUCCEEDED", "gen-one\n"), r
    again = exec_ok(sb, ["sh", "-c", "echo gen-three > /workspace/m"], exec_id=exec_id)
    assert (again["stdout"], again["duration_ms"]) == ("gen-one\n", None), again
    assert sb.read("/workspace/m").status == 400, "the replay must not run the new argv"


# -- cancel (§3.11, §4.6) ----------------------------------------------------------------
def test_cancel_background_run(sb):
    exec_id = start_bg(sb, ["sh", "-c", "sleep 30.101 & sleep 30.102; wait"])
    assert wait_for(lambda: len([p for p in uid_processes(sb.uid, "sleep 30.10")
                                 if p[1].startswith("sleep ")]) == 2, 5), uid_processes(sb.uid)
    t0 = time.monotonic()
    r = cancel(sb, exec_id)
    assert r.status == 200 and r.body == {"cancelled": True}, r
    b = wait_done(sb, exec_id)
    elapsed = time.monotonic() - t0
    # Client cancel is FAILED with the launcher's signal, never CANCELLED
    # (§4.6); our additive termination_reason names it (docs/ARCHITECTURE.md).
    assert b["status"] == "FAILED" and b["exit_code"] == -15, b
    assert b["termination_reason"] == "CANCELLED_BY_CLIENT", b
    assert elapsed < GRACE + 2, f"cancel took {elapsed:.2f} s to end a SIGTERM-able command"
    # The whole process group is gone, the child `sleep` included.
    assert wait_for(lambda: not uid_processes(sb.uid, "sleep 30.10"), 3), uid_processes(sb.uid)
    # Finished / unknown ids: cancelled false, never 404.
    r = cancel(sb, exec_id)
    assert r.status == 200 and r.body == {"cancelled": False}, r
    r = cancel(sb, "never-ran-" + uuid.uuid4().hex[:8])
    assert r.status == 200 and r.body == {"cancelled": False}, r
    # The sandbox works afterwards.
    assert exec_ok(sb, ["true"])["status"] == "SUCCEEDED"


def test_cancel_sigterm_ignoring_command_is_killed_after_grace(sb):
    exec_id = start_bg(sb, ["sh", "-c", "trap '' TERM; sleep 30.201"])
    # Wait for the `sleep` itself (the trap is set by then), not just the shell.
    assert wait_for(lambda: count_processes({sb.uid}, "sleep 30.201"), 5), uid_processes(sb.uid)
    t0 = time.monotonic()
    r = cancel(sb, exec_id)
    assert r.status == 200 and r.body == {"cancelled": True}, r
    b = wait_done(sb, exec_id)
    elapsed = time.monotonic() - t0
    assert b["status"] == "FAILED" and b["exit_code"] == -9, b
    assert b["termination_reason"] == "CANCELLED_BY_CLIENT", b
    assert GRACE - 0.1 <= elapsed < GRACE + 3, \
        f"SIGKILL should follow SIGTERM after the {GRACE} s grace; took {elapsed:.2f} s"
    assert wait_for(lambda: not uid_processes(sb.uid, "sleep 30.201"), 3), uid_processes(sb.uid)


def test_cancel_synchronous_run_from_another_request(sb):
    exec_id = new_id("sync-cancel")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(sb.exec, ["sleep", "30.301"], exec_id, None, None)
        assert wait_for(lambda: uid_processes(sb.uid, "sleep 30.301"), 5), uid_processes(sb.uid)
        r = cancel(sb, exec_id)
        assert r.status == 200 and r.body == {"cancelled": True}, r
        resp = fut.result(timeout=10)
    assert resp.status == 200, resp
    assert resp.body["status"] == "FAILED" and resp.body["exit_code"] == -15, resp
    assert resp.body["termination_reason"] == "CANCELLED_BY_CLIENT", resp
    assert isinstance(resp.body["duration_ms"], int), resp


def test_cancel_refusals(sb):
    exec_id = start_bg(sb, ["sleep", "30.401"])
    for bad in (False, 0, "x"):
        assert_error(cancel(sb, exec_id, generation=bad), 422, "SANDBOX_INVALID_REQUEST")
    assert_error(cancel(sb, exec_id, generation=sb.generation + 1), 409, "STALE_SANDBOX_ROUTE")
    # None of the refused cancels touched the run.
    r = poll(sb, exec_id)
    assert r.status == 200 and r.body["status"] == "RUNNING", r
    assert cancel(sb, exec_id).body == {"cancelled": True}
    assert wait_done(sb, exec_id)["exit_code"] == -15


# -- timeout and termination (§4.2, §4.6) ---------------------------------------------------
def test_timeout_kills_the_whole_process_group(sb):
    t0 = time.monotonic()
    b = exec_ok(sb, ["sh", "-c", "sleep 30.501 & sleep 30.502 & sleep 30.503; wait"],
                timeout_seconds=1)
    elapsed = time.monotonic() - t0
    assert b["status"] == "TIMED_OUT" and b["termination_reason"] == "TIMED_OUT", b
    assert b["exit_code"] == -15, b
    assert 1.0 <= elapsed < 1 + GRACE + 2, f"timeout 1 s, the call took {elapsed:.2f} s"
    assert isinstance(b["duration_ms"], int) and b["duration_ms"] >= 950, b
    # The command's children (same process group) died with it.
    assert wait_for(lambda: not uid_processes(sb.uid, "sleep 30.50"), 3), uid_processes(sb.uid)
    # The stored record agrees (termination_reason is recorded too).
    r = poll(sb, b["exec_id"])
    assert (r.body["status"], r.body["termination_reason"], r.body["exit_code"]) == \
        ("TIMED_OUT", "TIMED_OUT", -15), r


def test_timeout_of_a_sigterm_ignoring_command_ends_with_sigkill(sb):
    t0 = time.monotonic()
    b = exec_ok(sb, ["sh", "-c", "trap '' TERM; sleep 30.601 & sleep 30.602; wait"],
                timeout_seconds=1)
    elapsed = time.monotonic() - t0
    assert b["status"] == "TIMED_OUT" and b["termination_reason"] == "TIMED_OUT", b
    assert b["exit_code"] == -9, b
    assert 1 + GRACE - 0.1 <= elapsed < 1 + 2 * GRACE + 3, \
        f"timeout 1 s + grace {GRACE} s, the call took {elapsed:.2f} s"
    assert wait_for(lambda: not uid_processes(sb.uid, "sleep 30.60"), 3), uid_processes(sb.uid)


def test_timeout_spares_a_daemonised_process_of_the_warm_session(sb):
    """Contrast for the scans above: a setsid'd background process left by a
    command that ended by itself lives on in the warm session (COMPAT.md
    §2), and a later command's timeout does not touch it; the timed-out
    command's own processes die, its setsid'd ones included (each command
    has a cgroup of its own: the hardening issue, fault 3)."""
    b = exec_ok(sb, ["sh", "-c", "setsid sleep 30.701 >/dev/null 2>&1 </dev/null &"])
    assert b["status"] == "SUCCEEDED", b
    b = exec_ok(sb, ["sh", "-c", "setsid sleep 30.703 >/dev/null 2>&1 </dev/null & "
                                 "sleep 30.702"], timeout_seconds=1)
    assert b["status"] == "TIMED_OUT", b
    assert wait_for(lambda: not uid_processes(sb.uid, "sleep 30.702") and
                    not uid_processes(sb.uid, "sleep 30.703"), 3), uid_processes(sb.uid)
    assert count_processes({sb.uid}, "sleep 30.701") == 1, \
        f"the setsid'd process should survive in the warm session: {uid_processes(sb.uid)}"
    assert sb.release().status == 200
    assert wait_for(lambda: not uid_processes(sb.uid), 3), uid_processes(sb.uid)


def exec_cgroups(uid):
    """The execution cgroups (x<seq>) under the sandbox's cgroup in the
    hierarchy that holds them here (v1: pids; v2: the one tree)."""
    for root in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
        for dirpath, dirnames, _ in os.walk(root):
            if os.path.basename(dirpath) == f"sb-{uid}":
                return sorted(d for d in dirnames if d.startswith("x"))
            dirnames[:] = [d for d in dirnames if not d.startswith("x")]
    return None


def test_a_warm_sandbox_reuses_one_empty_execution_cgroup(sb):
    """A command that ended by itself and left nothing hands its cgroup to the
    next one (mkdir and rmdir of a cgroup are the dearest steps of a warm
    command): twenty commands leave one execution cgroup, not twenty and not
    none. A command killed at its deadline (its cgroup's pids.max was set to
    0 to stop its forks) never hands its cgroup on: the next command forks."""
    for _ in range(20):
        assert exec_ok(sb, ["true"])["status"] == "SUCCEEDED"
    held = exec_cgroups(sb.uid)
    assert held is not None, "no cgroup of the sandbox found: this host runs commands in one"
    assert len(held) == 1, f"one spare execution cgroup expected, found {held}"
    b = exec_ok(sb, ["sleep", "30.711"], timeout_seconds=1)
    assert b["status"] == "TIMED_OUT", b
    b = exec_ok(sb, ["sh", "-c", "sh -c 'echo forked'; echo $?"])
    assert (b["status"], b["stdout"]) == ("SUCCEEDED", "forked\n0\n"), b
    assert len(exec_cgroups(sb.uid)) == 1, exec_cgroups(sb.uid)
    # One that leaves a background job keeps its cgroup to itself.
    exec_ok(sb, ["sh", "-c", "setsid sleep 30.712 >/dev/null 2>&1 </dev/null &"])
    exec_ok(sb, ["true"])
    assert len(exec_cgroups(sb.uid)) == 2, exec_cgroups(sb.uid)


def test_background_timeout(sb):
    exec_id = start_bg(sb, ["sleep", "30.801"], timeout_seconds=1)
    b = wait_done(sb, exec_id, seconds=1 + GRACE + 4)
    assert (b["status"], b["termination_reason"], b["exit_code"]) == \
        ("TIMED_OUT", "TIMED_OUT", -15), b
    assert cancel(sb, exec_id).body == {"cancelled": False}


# -- exec_id idempotency (§4.3) -------------------------------------------------------------
def test_replay_of_a_running_background_exec_does_not_wait(sb):
    exec_id = start_bg(sb, ["sh", "-c", "sleep 2; echo original"])
    t0 = time.monotonic()
    # Synchronous request, different argv/env/scope/background: the stored
    # RUNNING record comes back at once; nothing new runs.
    b = exec_ok(sb, ["sh", "-c", "echo replayed > /workspace/replayed"], exec_id=exec_id,
                env={"X": "y"}, exec_scope="other-scope", timeout_seconds=5)
    assert time.monotonic() - t0 < 1.0, "a replay of a running exec must not wait for it"
    # Ours: the answer says it is the earlier command's.
    assert b["replayed"] is True and "used before with a different request" in b["warnings"][0], b
    assert spec_fields(b) == {"exec_id": exec_id, "status": "RUNNING", "exit_code": None, "stdout": "",
                 "stderr": "", "duration_ms": None, "truncated": False,
                 "termination_reason": None}, b
    # The replay is also not refused by the unscoped run it replays (replay
    # comes before the scope check).
    final = wait_done(sb, exec_id)
    assert (final["status"], final["stdout"]) == ("SUCCEEDED", "original\n"), final
    assert sb.read("/workspace/replayed").status == 400, "the replayed argv must not run"
    # Replay of the finished background record, as a background request.
    r = sb.exec(["false"], exec_id=exec_id, background=True)
    assert r.status == 200, r
    assert spec_fields(r.body) == {"exec_id": exec_id, "status": "SUCCEEDED", "exit_code": 0,
                      "stdout": "original\n", "stderr": "", "duration_ms": None,
                      "truncated": False, "termination_reason": None}, r


def test_replay_comes_before_the_parallel_limit(sb):
    ids = [start_bg(sb, ["sleep", "30.901"], exec_scope=f"lim-{i}") for i in range(MAX_PARALLEL)]
    # At the limit a new id is refused, a known id replays.
    assert_error(sb.exec(["true"], exec_scope="lim-new"), 429, "SANDBOX_PARALLEL_EXEC_LIMIT")
    b = exec_ok(sb, ["true"], exec_id=ids[0], exec_scope="lim-new")
    assert b["status"] == "RUNNING" and b["exec_id"] == ids[0], b
    for i in ids:
        assert cancel(sb, i).body == {"cancelled": True}
    for i in ids:
        assert wait_done(sb, i)["status"] == "FAILED"


# -- exec_scope concurrency (§4.4) -----------------------------------------------------------
def test_different_scopes_run_in_parallel(sb):
    t0 = time.monotonic()
    a = start_bg(sb, ["sh", "-c", "sleep 1.5; echo a"], exec_scope="scope-a")
    b = start_bg(sb, ["sh", "-c", "sleep 1.5; echo b"], exec_scope="scope-b")
    assert poll(sb, a).body["status"] == "RUNNING" and poll(sb, b).body["status"] == "RUNNING"
    ra, rb = wait_done(sb, a), wait_done(sb, b)
    elapsed = time.monotonic() - t0
    assert (ra["status"], ra["stdout"], rb["status"], rb["stdout"]) == \
        ("SUCCEEDED", "a\n", "SUCCEEDED", "b\n"), (ra, rb)
    assert elapsed < 2.8, f"two scopes of 1.5 s each took {elapsed:.2f} s: they did not overlap"


def test_scope_conflicts(sb):
    def refused(r, status, code):
        assert_error(r, status, code)

    # Scoped A running.
    a = start_bg(sb, ["sleep", "30.111"], exec_scope="scope-a")
    same = new_id("same")
    refused(sb.exec(["true"], exec_id=same, exec_scope="scope-a"), 409, "SANDBOX_EXEC_SCOPE_BUSY")
    unscoped = new_id("unscoped")
    refused(sb.exec(["true"], exec_id=unscoped), 409, "SANDBOX_EXEC_SCOPE_BUSY")
    refused(sb.exec(["true"], exec_id=new_id("bgsame"), exec_scope="scope-a", background=True),
            409, "SANDBOX_EXEC_SCOPE_BUSY")
    # Refusals write no record.
    assert_error(poll(sb, same), 404, "EXEC_NOT_FOUND")
    assert_error(poll(sb, unscoped), 404, "EXEC_NOT_FOUND")
    # A different scope is admitted alongside.
    b = exec_ok(sb, ["sh", "-c", "echo b"], exec_scope="scope-b")
    assert (b["status"], b["stdout"]) == ("SUCCEEDED", "b\n"), b
    assert cancel(sb, a).body == {"cancelled": True}
    assert wait_done(sb, a)["status"] == "FAILED"

    # Unscoped running: scoped and unscoped requests are refused.
    u = start_bg(sb, ["sleep", "30.112"])
    refused(sb.exec(["true"], exec_scope="scope-c"), 409, "SANDBOX_EXEC_SCOPE_BUSY")
    refused(sb.exec(["true"]), 409, "SANDBOX_EXEC_SCOPE_BUSY")
    assert cancel(sb, u).body == {"cancelled": True}
    assert wait_done(sb, u)["status"] == "FAILED"
    # Nothing running any more: anything is admitted.
    assert exec_ok(sb, ["true"])["status"] == "SUCCEEDED"
    assert exec_ok(sb, ["true"], exec_scope="scope-a")["status"] == "SUCCEEDED"


def test_parallel_limit_is_checked_before_scope_conflicts(sb):
    a = start_bg(sb, ["sleep", "30.121"], exec_scope="scope-a")
    b = start_bg(sb, ["sleep", "30.122"], exec_scope="scope-b")
    for fields in ({"exec_scope": "scope-c"}, {"exec_scope": "scope-a"}, {},
                   {"exec_scope": "scope-c", "background": True}):
        exec_id = new_id("over")
        assert_error(sb.exec(["true"], exec_id=exec_id, **fields), 429,
                     "SANDBOX_PARALLEL_EXEC_LIMIT")
        assert_error(poll(sb, exec_id), 404, "EXEC_NOT_FOUND")
    assert cancel(sb, a).body == {"cancelled": True}
    assert wait_done(sb, a)["status"] == "FAILED"
    # One slot free: a conflicting scope is now a scope conflict, a new scope runs.
    assert_error(sb.exec(["true"], exec_scope="scope-b"), 409, "SANDBOX_EXEC_SCOPE_BUSY")
    assert_error(sb.exec(["true"]), 409, "SANDBOX_EXEC_SCOPE_BUSY")
    assert exec_ok(sb, ["true"], exec_scope="scope-c")["status"] == "SUCCEEDED"
    assert cancel(sb, b).body == {"cancelled": True}
    assert wait_done(sb, b)["status"] == "FAILED"


def test_unscoped_command_locks_the_file_api(sb):
    assert sb.write("/workspace/f.txt", b"before").status == 200
    u = start_bg(sb, ["sleep", "30.131"])
    assert wait_for(lambda: uid_processes(sb.uid, "sleep 30.131"), 5)
    for name, r in (("write", sb.write("/workspace/f.txt", b"during")),
                    ("read", sb.read("/workspace/f.txt")),
                    ("list", sb.list("/workspace")),
                    ("mkdir", sb.mkdir("/workspace/d")),
                    ("delete", sb.rm("/workspace/f.txt")),
                    ("move", sb.move("/workspace/f.txt", "/workspace/g.txt"))):
        assert r.status == 409, f"{name} during an unscoped command: {r!r}"
        assert_error(r, 409, "SANDBOX_FILE_PATH_LOCKED")
    assert cancel(sb, u).body == {"cancelled": True}
    assert wait_done(sb, u)["status"] == "FAILED"
    assert sb.read_bytes("/workspace/f.txt") == b"before", "a refused write changed the file"
    assert sb.write("/workspace/f.txt", b"after").status == 200


def test_scoped_commands_and_file_calls_run_concurrently(sb):
    s = start_bg(sb, ["sh", "-c", "sleep 30.141"], exec_scope="scope-f")
    assert wait_for(lambda: uid_processes(sb.uid, "sleep 30.141"), 5)
    r = sb.write("/workspace/f.txt", b"while scoped")
    assert r.status == 200, r
    assert sb.read_bytes("/workspace/f.txt") == b"while scoped"
    r = sb.list("/workspace")
    assert r.status == 200 and "f.txt" in [e["name"] for e in r.body["entries"]], r
    assert sb.mkdir("/workspace/d").status == 200
    assert poll(sb, s).body["status"] == "RUNNING"
    assert cancel(sb, s).body == {"cancelled": True}
    assert wait_done(sb, s)["status"] == "FAILED"


# -- caller environment (§4.5) -------------------------------------------------------------
def test_env_rules_use_the_upper_cased_name(sb):
    for name in ("http_proxy", "no_proxy", "ld_preload", "Ld_Library_Path", "bash_env",
                 "tmpdir", "Path"):
        b = exec_ok(sb, ["sh", "-c", "echo ran > /workspace/env-ran"], env={name: "x"})
        assert b["status"] == "FAILED" and b["exit_code"] is None, (name, b)
        assert b["stderr"].startswith("ValueError: this environment variable is sandbox-managed "
                                      "and cannot be overridden: "), (name, b)
        assert b["stderr"].rstrip("\n").lower().endswith(name.lower()), (name, b)
    assert sb.read("/workspace/env-ran").status == 400, "a refused env must not run the command"
    # Not reserved: ordinary names, including lower-case look-alikes.
    b = exec_ok(sb, ["sh", "-c", 'printf "%s|%s|%s" "$my_var" "$_U" "$PATHX"'],
                env={"my_var": "1", "_U": "2", "PATHX": "3"})
    assert (b["status"], b["stdout"]) == ("SUCCEEDED", "1|2|3"), b
    b = exec_ok(sb, ["true"], env={"A-B": "x"})
    assert b["status"] == "FAILED" and b["exit_code"] is None, b
    assert b["stderr"].startswith("ValueError: invalid environment variable name: 'A-B'"), b
    # The same rules in a background run: a FAILED record, not an HTTP error.
    r = sb.exec(["true"], background=True, env={"LD_PRELOAD": "x"}, exec_id=new_id("bgenv"))
    assert r.status == 200, r
    final = wait_done(sb, r.body["exec_id"])
    assert final["status"] == "FAILED" and final["exit_code"] is None, final
    assert final["stderr"].startswith("ValueError: this environment variable is sandbox-managed"), \
        final


# -- output capping (§4.2) -------------------------------------------------------------------
def test_output_is_capped_per_stream_without_blocking_the_command(sb):
    t0 = time.monotonic()
    b = exec_ok(sb, ["sh", "-c", "yes | head -c 10000000; yes e | head -c 3000000 >&2; "
                                 "echo tail-done > /workspace/out-done"], timeout_seconds=30)
    elapsed = time.monotonic() - t0
    assert b["status"] == "SUCCEEDED" and b["exit_code"] == 0, \
        {k: (v[:80] if isinstance(v, str) else v) for k, v in b.items()}
    assert elapsed < 10, f"10 MB of output took {elapsed:.1f} s: the pipe was not drained"
    assert b["stdout"] == "y\n" * (MAX_OUTPUT // 2), f"stdout kept {len(b['stdout'])} chars"
    assert b["stderr"] == "e\n" * (MAX_OUTPUT // 2), f"stderr kept {len(b['stderr'])} chars"
    assert b["truncated"] is True, b["truncated"]
    assert sb.read_bytes("/workspace/out-done") == b"tail-done\n"
    # The stored record is the capped one.
    r = poll(sb, b["exec_id"])
    assert (r.body["stdout"], r.body["stderr"], r.body["truncated"]) == \
        (b["stdout"], b["stderr"], True), r


def test_truncated_flag_boundaries(sb):
    exact = exec_ok(sb, ["sh", "-c", f"head -c {MAX_OUTPUT} /dev/zero | tr '\\0' a"])
    assert exact["stdout"] == "a" * MAX_OUTPUT and exact["truncated"] is False, exact
    over = exec_ok(sb, ["sh", "-c", f"head -c {MAX_OUTPUT + 1} /dev/zero | tr '\\0' a"])
    assert over["stdout"] == "a" * MAX_OUTPUT and over["truncated"] is True, over
    err_only = exec_ok(sb, ["sh", "-c", f"echo small; head -c {MAX_OUTPUT + 1} /dev/zero | "
                                        "tr '\\0' b >&2"])
    assert err_only["stdout"] == "small\n" and err_only["stderr"] == "b" * MAX_OUTPUT, err_only
    assert err_only["truncated"] is True, err_only


def test_background_output_is_capped_and_not_blocking(sb):
    exec_id = start_bg(sb, ["sh", "-c", "yes | head -c 10000000"], timeout_seconds=30)
    b = wait_done(sb, exec_id, seconds=10)
    assert b["status"] == "SUCCEEDED", {k: (v[:80] if isinstance(v, str) else v)
                                        for k, v in b.items()}
    assert b["stdout"] == "y\n" * (MAX_OUTPUT // 2) and b["truncated"] is True, len(b["stdout"])


# -- many commands in flight, few threads ----------------------------------------------------
def test_hundreds_of_commands_in_flight_with_few_threads(sandloomd_binary):
    n_sandboxes, bg_per, sync_per = 13, 8, 8  # 208 in flight, 16 per sandbox (the default limit)
    seconds = "4.017"  # a unique command line to count
    d = Daemon(sandloomd_binary, engine_env()).spawn()
    try:
        d.wait_healthy()
        c = d.client()
        boxes = [ready(c, "many") for _ in range(n_sandboxes)]
        uids = {b.uid for b in boxes}
        assert len(uids) == n_sandboxes
        threads_before = daemon_threads(d.proc.pid)
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(n_sandboxes * (bg_per + sync_per)) as pool:
            bg, sync = [], []
            for b in boxes:
                for i in range(bg_per):
                    bg.append((b, pool.submit(b.exec, ["sleep", seconds], new_id("bg"), None, 30,
                                              background=True, exec_scope=f"bg-{i}")))
                for i in range(sync_per):
                    sync.append(pool.submit(b.exec, ["sleep", seconds], new_id("sync"), None, 30,
                                            exec_scope=f"sync-{i}"))
            # Sample the daemon while the synchronous requests are held open.
            peak_threads, peak_procs = 0, 0
            while not all(f.done() for f in sync) and time.monotonic() - t0 < 20:
                peak_threads = max(peak_threads, daemon_threads(d.proc.pid))
                peak_procs = max(peak_procs, count_processes(uids, f"sleep {seconds}"))
                time.sleep(0.05)
            results = [f.result(timeout=30) for f in sync]
            sync_elapsed = time.monotonic() - t0
            stubs = [(b, f.result(timeout=30)) for b, f in bg]
        for r in results:
            assert r.status == 200, r
            assert r.body["status"] == "SUCCEEDED" and r.body["exit_code"] == 0, r.body
            assert isinstance(r.body["duration_ms"], int) and r.body["duration_ms"] >= 4000, r.body
        for b, r in stubs:
            assert r.status == 200 and r.body["status"] == "RUNNING", r
        for b, r in stubs:
            final = wait_done(b, r.body["exec_id"], seconds=15)
            assert (final["status"], final["exit_code"]) == ("SUCCEEDED", 0), final
        total = n_sandboxes * (bg_per + sync_per)
        print(f"in flight: {peak_procs}/{total} processes, daemon threads peak {peak_threads} "
              f"(before {threads_before}), synchronous batch {sync_elapsed:.1f} s")
        assert peak_procs >= 0.8 * total, \
            f"only {peak_procs} of {total} commands were running at the same time"
        assert peak_threads < 64, \
            f"daemon used {peak_threads} threads (before: {threads_before}) for {total} commands"
        assert sync_elapsed < 20, f"{total} parallel 4 s commands took {sync_elapsed:.1f} s"
    finally:
        d.cleanup()


# -- worker shutdown (§1.2, §4.2) -------------------------------------------------------------
def test_daemon_shutdown_cancels_running_background_exec(daemon_factory):
    env = engine_env()
    d1 = daemon_factory(env)
    sb = ready(d1.client(), "shut")
    done_id = new_id("done")
    assert exec_ok(sb, ["true"], exec_id=done_id)["status"] == "SUCCEEDED"
    # A command that cleans up on SIGTERM: the shutdown gives it the
    # termination sequence (§4.6), and what it printed is kept (the
    # hardening issue, fault 9; the reference records empty output).
    argv = ["sh", "-c", "trap 'echo got TERM; exit 7' TERM; echo started; sleep 30.991 & wait"]
    exec_id = start_bg(sb, argv)
    assert wait_for(lambda: uid_processes(sb.uid, "sleep 30.991"), 5)
    t0 = time.monotonic()
    d1.proc.send_signal(signal.SIGTERM)
    rc = d1.proc.wait(timeout=15)
    assert rc == 0, f"SIGTERM shutdown exit status {rc}"
    assert time.monotonic() - t0 < 5 + GRACE, "shutdown took too long"
    assert not uid_processes(sb.uid, "sleep 30.991"), "the command outlived the daemon"

    def rows():
        return dict(d1.sql("SELECT exec_id, status FROM agent_sandbox_exec WHERE sandbox_id = ?",
                           (sb.id,)))

    assert rows() == {exec_id: "CANCELLED", done_id: "SUCCEEDED"}, rows()
    d2 = daemon_factory(env, state_dir=d1.state, token=d1.token, port=d1.port)
    sb2 = Sandbox(d2.client(), sb.id, sb.scope)
    sb2.generation = sb.generation
    assert rows() == {exec_id: "CANCELLED", done_id: "SUCCEEDED"}, rows()
    # The admin exec-detail route reads the record whatever the route's state
    # (§3.18): CANCELLED, with the output and the exit code of its TERM handler.
    r = d2.client().get(f"/api/v1/admin/execs/{sb.id}/{exec_id}")
    assert r.status == 200, r
    assert (r.body["status"], r.body["exit_code"], r.body["stdout"], r.body["stderr"]) == \
        ("CANCELLED", 7, "started\ngot TERM\n", ""), r
    assert r.body["termination_reason"] == "WORKER_SHUTDOWN", r
    assert r.body["argv"] == argv and r.body["finished_at"], r
    # The old generation is fenced off after the restart.
    assert_error(poll(sb2, exec_id), 409, "STALE_SANDBOX_ROUTE")
    assert_error(cancel(sb2, exec_id), 409, "STALE_SANDBOX_ROUTE")
    # A new generation still replays the old record, stored as CANCELLED.
    r = sb2.resolve()
    assert r.status == 200 and r.body["generation"] > sb.generation, r
    assert sb2.connect().status == 200
    r = poll(sb2, exec_id)
    assert r.status == 200, r
    assert (r.body["status"], r.body["exit_code"], r.body["stdout"], r.body["stderr"]) == \
        ("CANCELLED", 7, "started\ngot TERM\n", ""), r
    r = sb2.exec(["true"], exec_id=exec_id)
    assert r.status == 200 and r.body["status"] == "CANCELLED", r
    assert sb2.release().status == 200
