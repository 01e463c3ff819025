"""Sandbox escape and denial-of-service attempts against processes: ptrace
and signals across sandboxes and at the daemon, a fork bomb, and (not
run) a memory bomb."""

import os
import secrets
import time

import pytest

from sec_helpers import (GVISOR, Background, assert_proc_as_reported, execution_backend,
                         gvisor_container_processes, gvisor_guest_processes, gvisor_host_pids,
                         hold_until_released,
                         host_processes, isolation, probe, release_holder, run, sh, wait_for)


# ---------------------------------------------------------------------------
# 7
def test_ptrace_and_signals_cannot_cross_the_boundary(daemon, make_sandbox):
    """Attempt: while sandbox B runs `sleep 20`, sandbox A calls
    ptrace(PTRACE_ATTACH) on every pid in its /proc and on the host pids of
    B's processes and of the daemon (read by the test from the host), and
    sends SIGKILL to those host pids (os.kill, then `kill -9 <pid>` and
    `kill -9 -1` from sh).
    Must hold: A's /proc shows none of B's processes; every attach and kill
    aimed at B or the daemon fails (ESRCH/EPERM); an attach that succeeds
    can only be on A's own processes (A already controls them) and is
    detached cleanly; B's command is untouched (not traced, finishes
    normally) and the daemon keeps answering. pidfd_send_signal(SIGKILL)
    through a pidfd of each of those host pids fails too (pidfd_open ESRCH
    in a PID namespace; EPERM on the signal at basic).
    At basic there is no PID namespace and no /proc (asserted): A lists
    no process at all, and the only process of its own it knows, its init
    (getppid), stands in for "every pid in its /proc"; the attacks on B's
    and the daemon's host pids are the same and must fail the same way.
    Under gVisor B's processes live in B's Sentry (test environment): B's
    own /proc shows when its command runs, B's host pids are its runsc
    processes (found by B's cgroup), and "B is not traced" is checked on
    both sides: inside B every process has TracerPid 0, and on the host
    each of B's processes is traced by nobody or by B's own Sentry (the
    ptrace platform traces its stubs), never by anything of A's. This
    Sentry has no pidfd_open (ENOSYS): there is no pidfd to signal with."""
    iso = isolation(daemon)
    gvisor = execution_backend(daemon) == GVISOR
    a, b = make_sandbox(daemon, "pt-a"), make_sandbox(daemon, "pt-b")
    marker = "pt-marker-" + secrets.token_hex(8)
    b_ws = daemon.sandbox_root / b.id / "workspace"
    holder = hold_until_released(b, marker, "stop-pt", pre="touch /workspace/ready;")
    try:
        if gvisor:
            assert wait_for(lambda: (b_ws / "ready").exists() and any(
                "sleep 20" in c for _, _, c, _ in gvisor_guest_processes(b)), 20), "B never started"
            b_pids = gvisor_host_pids(b.uid)
        else:
            assert wait_for(lambda: (b_ws / "ready").exists() and any(
                "sleep 20" in c for _, _, c in host_processes(b.uid)), 10), "B never started"
            b_pids = [pid for pid, _, _ in host_processes(b.uid)]
        dpid = daemon.proc.pid
        R, body = probe(a, r'''
            me = os.getpid()
            res, attached = {}, {}
            R["proc_present"] = PROC
            visible = [int(p) for p in os.listdir("/proc") if p.isdigit()] if PROC else []
            # Without /proc the only process of its own A knows is its init.
            R["own"] = visible if PROC else [os.getppid()]
            R["visible_cmdlines"] = {}
            for pid in visible:
                try:
                    R["visible_cmdlines"][pid] = read_bytes("/proc/%d/cmdline" % pid, 300).replace(b"\0", b" ").decode()
                except OSError:
                    pass
            targets = [p for p in R["own"] if p != me] + P["b_pids"] + [P["dpid"]]
            for pid in targets:
                r, e = libcall("ptrace", 16, pid, None, None)  # PTRACE_ATTACH
                res[str(pid)] = e or "OK"
                if r == 0:
                    os.waitpid(pid, 0x40000000)  # __WALL
                    libcall("ptrace", 17, pid, None, None)  # PTRACE_DETACH, no signal
                    attached[pid] = R["visible_cmdlines"].get(pid, "?")
            R["attach"] = res
            R["attached"] = attached
            R["kill"] = {str(p): oserr(os.kill, p, 9) for p in P["b_pids"] + [P["dpid"]]}
            R["pidfd kill"] = {}
            for p in P["b_pids"] + [P["dpid"]]:
                try:
                    fd = os.pidfd_open(p)
                except OSError as e:
                    R["pidfd kill"][str(p)] = errno.errorcode.get(e.errno, str(e.errno))
                    continue
                R["pidfd kill"][str(p)] = sc("pidfd_send_signal", fd, 9, None, 0)[1] or "OK"
                os.close(fd)
            ''', {"b_pids": b_pids, "dpid": dpid})
        tracers = {}
        for pid in b_pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    tracers[pid] = [l.split()[1] for l in f if l.startswith("TracerPid:")][0]
            except OSError:
                pass
        if gvisor:
            guest_tracers = {pid: t for pid, _, _, t in gvisor_guest_processes(b)}
            # The tracer's thread group: the ptrace platform's Sentry threads
            # trace its stubs; anything else would be a foreign tracer.
            tracer_groups = {}
            for pid, t in tracers.items():
                if t == "0":
                    continue
                try:
                    with open(f"/proc/{t}/status") as f:
                        tracer_groups[pid] = int([l.split()[1] for l in f if l.startswith("Tgid:")][0])
                except OSError as e:
                    tracer_groups[pid] = repr(e)
        shell = sh(a, f"kill -9 {dpid} {' '.join(map(str, b_pids))} 2>/dev/null; "
                      f"echo kill-rc=$?; kill -9 -1; echo survived")
    finally:
        release_holder(daemon, b, "stop-pt")
        held = holder.result()
    assert_proc_as_reported(iso, R["proc_present"], "sandbox A")
    assert not any(marker in c or "sleep 20" in c for c in R["visible_cmdlines"].values()), \
        f"A sees B's processes: {R['visible_cmdlines']}"
    for pid in b_pids + [dpid]:
        assert R["attach"][str(pid)] in ("ESRCH", "EPERM"), \
            f"ptrace attach to host pid {pid} (B or daemon) gave {R['attach'][str(pid)]}"
        assert R["kill"][str(pid)] in ("ESRCH", "EPERM"), R["kill"]
        assert R["pidfd kill"][str(pid)] in ("ESRCH", "EPERM") + (("ENOSYS",) if gvisor else ()), \
            R["pidfd kill"]
    for pid, cmd in R["attached"].items():
        if R["proc_present"]:
            assert int(pid) in [int(p) for p in R["visible_cmdlines"]], R
        else:
            assert int(pid) in R["own"], R
    if gvisor:
        assert b_pids and guest_tracers, (b_pids, guest_tracers)
        assert all(t == 0 for t in guest_tracers.values()), \
            f"B's processes are being traced (B's view): {guest_tracers}"
        assert all(g in b_pids for g in tracer_groups.values()), \
            f"B's host processes are traced from outside B: {tracers} {tracer_groups} {b_pids}"
    else:
        assert all(t == "0" for t in tracers.values()), f"B's processes are being traced: {tracers}"
    assert "kill-rc=0" not in shell["stdout"], shell
    assert held["status"] == "SUCCEEDED" and held["stdout"] == "held\n", \
        f"B's command was disturbed: {held}"
    assert daemon.proc.poll() is None, "the daemon died"
    r = daemon.client().get("/health", auth=False)
    assert r.status == 200 and r.raw.strip() == b"ok", r
    assert run(b, ["true"])["status"] == "SUCCEEDED"


# ---------------------------------------------------------------------------
# 13
BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"


def test_fork_bomb_is_contained(daemon, make_sandbox):
    """Attempt: a python fork bomb that keeps forking forever (failures
    ignored) with timeout_seconds=5.
    Must hold: the exec ends as TIMED_OUT or FAILED; the daemon answers
    /health throughout and after; another sandbox runs `true` meanwhile;
    the bomb never holds more processes than RLIMIT_NPROC (64); afterwards
    no live process of the bomb's uid remains on the host (zombies awaiting
    the host's reaper are ignored).
    Under gVisor the bomb's processes are not host processes of its uid
    (test environment): they are counted, during and after, in the
    Sentry's own process table (`runsc ps` of the sandbox's container from
    the host), where only init may remain."""
    gvisor = execution_backend(daemon) == GVISOR
    bomb, other = make_sandbox(daemon, "bomb"), make_sandbox(daemon, "calm")
    if gvisor:
        assert run(bomb, ["true"])["status"] == "SUCCEEDED"
        assert [c for _, c in gvisor_container_processes(daemon, bomb.uid)] == ["init"], \
            "premise: runsc ps lists the bomb's sandbox, only its init between commands"
    c = daemon.client()
    t0 = time.monotonic()
    job = Background(run, bomb, ["python3", "-c", BOMB], timeout_seconds=5, http_timeout=60)
    health, peak = [], 0
    other_result = None
    while job.thread.is_alive() and time.monotonic() - t0 < 30:
        s = time.monotonic()
        try:
            r = c.get("/health", auth=False, timeout=10)
            health.append((r.status, round(time.monotonic() - s, 3)))
        except OSError as e:
            health.append((repr(e), round(time.monotonic() - s, 3)))
        if gvisor:
            peak = max(peak, len([p for p in gvisor_container_processes(daemon, bomb.uid)
                                  if p[1] != "init"]))
        else:
            peak = max(peak, len(host_processes(bomb.uid)))
        if other_result is None and time.monotonic() - t0 > 1.5:
            other_result = run(other, ["true"], http_timeout=30)
        time.sleep(0.2)
    body = job.result(60)
    assert body["status"] in ("TIMED_OUT", "FAILED"), body
    if other_result is None:
        # The bomb ended first (under gVisor its Sentry can be killed whole
        # at the sandbox's pids limit): the neighbour still works after it.
        other_result = run(other, ["true"], http_timeout=30)
    assert other_result["status"] == "SUCCEEDED", other_result
    assert health and all(h[0] == 200 for h in health), f"/health during the bomb: {health}"
    r = c.get("/health", auth=False)
    assert r.status == 200 and r.raw.strip() == b"ok"
    assert peak <= 64, f"the bomb held {peak} processes, above RLIMIT_NPROC=64"
    if gvisor:
        assert peak > 1, f"premise: the bomb's processes were counted in its Sentry ({peak})"
    if os.environ.get("SANDLOOM_SEC_VERBOSE"):
        print(f"\nfork bomb: peak {peak} processes")
    # Only the sandbox's warm-session init may remain (it stays for the next
    # command); nothing the bomb started.
    def bomb_left():
        if gvisor:
            return [p for p in gvisor_container_processes(daemon, bomb.uid) if p[1] != "init"]
        return [p for p in host_processes(bomb.uid) if "sandloom-init" not in str(p)]
    left = wait_for(lambda: not bomb_left(), 5)
    assert left, f"processes of the bomb's uid survive: {bomb_left()[:10]}"
    assert run(bomb, ["true"])["status"] == "SUCCEEDED", "the bomb's sandbox is usable again"


# ---------------------------------------------------------------------------
def test_memory_bomb_is_contained(daemon_factory, make_sandbox):
    """Attempt: many processes each touching as much anonymous memory as
    they can (RLIMIT_AS is not set; RLIMIT_NPROC=64 processes per run).
    Must hold: the sandbox's aggregate memory quota (a 256 MiB cgroup here)
    stops it: the exec ends reported OOM_KILLED, the daemon keeps answering
    and another sandbox still runs. Runs only where the quota is enforced:
    without it the kernel's OOM killer would act host-wide, so the test
    fails (never runs the bomb) when /healthz says the quota is off."""
    daemon = daemon_factory({"SANDBOX_MEMORY_LIMIT_BYTES": str(256 << 20)})
    rc = daemon.client().get("/healthz").body["worker"]["capabilities"]["resource_control"]
    if not rc.get("sandbox_memory_quota"):
        pytest.fail(f"no aggregate memory quota on this host ({rc.get('cgroup_note')}): "
                    f"the memory bomb cannot be contained, so it is not run", pytrace=False)
    bomb, other = make_sandbox(daemon, "mem"), make_sandbox(daemon, "calm")
    code = ("import os\nfor _ in range(32):\n    if os.fork() == 0: break\nchunks = []\n"
            "while True:\n    chunks.append(bytearray(64 << 20))\n")
    job = Background(run, bomb, ["python3", "-c", code], timeout_seconds=20, http_timeout=90)
    assert run(other, ["true"], http_timeout=60)["status"] == "SUCCEEDED"
    body = job.result(90)
    # Which process the kernel's OOM killer picks is its choice: when the
    # command's main process survives the kills of its children it runs into
    # the deadline. Either way the quota's kills are reported.
    assert body["status"] in ("FAILED", "TIMED_OUT"), body
    assert body.get("termination_reason") == "OOM_KILLED", body
    r = daemon.client().get("/health", auth=False)
    assert r.status == 200
