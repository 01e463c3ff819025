"""Warm sessions (ours, COMPAT.md §2): a sandbox keeps its namespaces between
executions, so background processes and /tmp live on for the next command;
an idle session with nothing running stops (a dormant sandbox costs no
process); release ends everything."""

import os
import time
import uuid

import pytest

from sandloom_client import Sandbox


def uid_processes(uid):
    """Live host processes whose real uid is `uid` (read from status: a
    non-dumpable process's /proc directory is owned by root)."""
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
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            found.append((int(pid), cmd))
    return found


def sandbox_processes(uid):
    """The host processes of the sandbox of uid on either backend: its own
    (natively, and under gVisor's user namespace), and the runsc processes
    that run its gVisor sandbox, whose command lines name its container
    (sl-<uid>-<n>, runtime/gvisor.c) whatever uid they run as."""
    found = uid_processes(uid)
    mark = f"sl-{uid}-".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or any(p == int(pid) for p, _ in found):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                raw = f.read()
            with open(f"/proc/{pid}/status") as f:
                zombie = any(l.startswith("State:") and "Z" in l.split()[1] for l in f)
        except (OSError, IndexError):
            continue
        if mark in raw and b"runsc" in raw and not zombie:
            found.append((int(pid), raw.replace(b"\0", b" ").decode(errors="replace").strip()))
    return found


def wait_for(cond, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def ready(client, prefix):
    sb = Sandbox(client, f"{prefix}-{uuid.uuid4().hex[:8]}", "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    return sb


def test_background_process_and_tmp_survive_to_the_next_exec(client):
    sb = ready(client, "warm")
    r = sb.exec(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $! > /workspace/bg.pid; "
                             "echo kept > /tmp/note"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = sb.exec(["sh", "-c", "kill -0 $(cat /workspace/bg.pid) && echo alive; cat /tmp/note"])
    assert r.body["stdout"] == "alive\nkept\n", r
    assert any("sleep 300" in cmd for _, cmd in uid_processes(sb.uid))
    # Release ends the session and everything in it.
    assert sb.release().status == 200
    assert wait_for(lambda: not uid_processes(sb.uid), 3), uid_processes(sb.uid)


def test_timeout_in_a_session_kills_the_command_not_the_session(client):
    sb = ready(client, "warm-to")
    r = sb.exec(["sh", "-c", "echo $$ > /workspace/first; sleep 30"], timeout_seconds=1)
    assert r.body["status"] == "TIMED_OUT" and r.body["exit_code"] == -15, r  # SIGTERM ended it (API.md §4.6)
    assert r.body["termination_reason"] == "TIMED_OUT", r
    assert not any("sleep 30" in cmd for _, cmd in uid_processes(sb.uid))
    r = sb.exec(["sh", "-c", "echo still here"])
    assert r.body["status"] == "SUCCEEDED" and r.body["stdout"] == "still here\n", r


def test_idle_session_stops_unless_something_runs(daemon_factory):
    d = daemon_factory({"SANDBOX_SESSION_IDLE_SECONDS": "1",
                        "SANDBOX_HEARTBEAT_INTERVAL_SECONDS": "0.5",
                        "SANDBOX_HEARTBEAT_TTL_SECONDS": "3"})
    c = d.client()
    idle, busy = ready(c, "idle"), ready(c, "busy")
    assert idle.exec(["true"]).body["status"] == "SUCCEEDED"
    assert busy.exec(["sh", "-c", "sleep 300 >/dev/null 2>&1 &"]).body["status"] == "SUCCEEDED"
    assert uid_processes(idle.uid), "the warm session should exist right after an exec"
    # The idle one goes: no process at all for a dormant sandbox.
    assert wait_for(lambda: not uid_processes(idle.uid), 6), uid_processes(idle.uid)
    # The busy one stays (its background job keeps running).
    assert any("sleep 300" in cmd for _, cmd in uid_processes(busy.uid))
    # A new exec on the idle sandbox simply starts a new session.
    assert idle.exec(["sh", "-c", "echo back"]).body["stdout"] == "back\n"
    assert busy.release().status == 200
    assert wait_for(lambda: not uid_processes(busy.uid), 3), uid_processes(busy.uid)


def test_fresh_sandbox_per_exec_when_sessions_are_off(daemon_factory):
    d = daemon_factory({"SANDBOX_SESSION_IDLE_SECONDS": "0"})
    c = d.client()
    caps = c.get("/healthz").body["worker"]["capabilities"]
    assert caps["warm_sessions"] == {"enabled": False, "idle_seconds": 0}
    sb = ready(c, "cold")
    sb.exec(["sh", "-c", "echo x > /tmp/note"])
    r = sb.exec(["sh", "-c", "cat /tmp/note 2>/dev/null || echo gone"])
    assert r.body["stdout"] == "gone\n", r
    assert not uid_processes(sb.uid)


@pytest.mark.parametrize("level", ["auto", "basic"])
def test_release_kills_processes_that_try_to_survive(daemon_factory, level):
    """A process that double-forks, takes a new session and ignores SIGTERM
    and SIGHUP outlives its execution in the warm session; release still
    leaves nothing of the sandbox running, at the strongest level and at
    basic (no PID namespace)."""
    d = daemon_factory({"SANDBOX_ISOLATION_LEVEL": level})
    sb = ready(d.client(), f"survivor-{level}")
    script = ("( trap '' TERM HUP; setsid sh -c \"trap '' TERM HUP; "
              "echo \\$\\$ > /workspace/survivor.pid; exec sleep 300\" "
              ">/dev/null 2>&1 < /dev/null & ) ; "
              "while [ ! -s /workspace/survivor.pid ]; do sleep 0.05; done; echo started")
    r = sb.exec(["sh", "-c", script])
    assert r.status == 200 and r.body["stdout"] == "started\n", r
    assert any("sleep 300" in cmd for _, cmd in uid_processes(sb.uid)), uid_processes(sb.uid)
    assert sb.release().status == 200
    assert wait_for(lambda: not uid_processes(sb.uid), 3), uid_processes(sb.uid)


def test_a_command_ends_when_it_exits_though_its_background_job_holds_the_output(
        daemon_factory):
    """The command exits but a job it left in the background keeps its stdout
    open (`sleep 60 &`, `nohup server &`). Ours (the reference waits for the
    deadline and reports TIMED_OUT): the call ends when the command's own
    process does, with what it printed and its exit code, and the job keeps
    running in the session until the sandbox is released."""
    d = daemon_factory({"SANDBOX_TERMINATE_GRACE_SECONDS": "0.5"})
    sb = Sandbox(d.client(), "holder-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    for script in ("sleep 60 & echo parent done", "nohup sleep 61 & echo parent done"):
        started = time.monotonic()
        r = sb.exec(["sh", "-c", script], timeout_seconds=20)
        elapsed = time.monotonic() - started
        assert r.status == 200, r
        b = r.body
        assert b["status"] == "SUCCEEDED" and b["termination_reason"] is None, b
        assert b["exit_code"] == 0 and b["stdout"] == "parent done\n", b
        assert b["truncated"] is False, b
        assert elapsed < 2.0, f"{script!r} answered after {elapsed:.1f} s"
    assert any("sleep 60" in cmd for _, cmd in uid_processes(sb.uid)), uid_processes(sb.uid)
    assert any("sleep 61" in cmd for _, cmd in uid_processes(sb.uid)), uid_processes(sb.uid)
    # A command that times out still takes what it started with it.
    r = sb.exec(["sh", "-c", "sleep 62 & sleep 30"], timeout_seconds=1)
    assert r.body["status"] == "TIMED_OUT", r.body
    assert wait_for(lambda: not any("sleep 62" in cmd for _, cmd in uid_processes(sb.uid)), 3)
    assert sb.release().status == 200
    assert wait_for(lambda: not uid_processes(sb.uid), 5)


def test_a_background_server_keeps_serving_and_logging(daemon_factory):
    """A server started in the background of one command (`python -m
    http.server &` writing a log line per request to the pipe it inherited)
    serves later commands: its output is drained, never a full pipe that
    blocks it nor a closed one that kills it; the session's idle stop waits
    for it; release ends it."""
    d = daemon_factory({"SANDBOX_SESSION_IDLE_SECONDS": "1"})
    sb = Sandbox(d.client(), "server-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    # Below the kernel's ephemeral range (32768-60999): a port there can be
    # the local port of some client connection of the host at that moment
    # (sandboxes share the host's network here), and the server's bind then
    # fails. The uid keeps concurrent sandboxes apart.
    port = 20000 + (sb.uid % 12000)
    assert sb.write("/workspace/index.html", "hello\n").status == 200
    # GET the page `n` times (each request writes a ~250-byte log line to
    # the server's stderr: 300 of them would fill a pipe nobody reads).
    assert sb.write("/workspace/get.py", (
        "import sys, time, urllib.request\n"
        f"url = 'http://127.0.0.1:{port}/index.html?pad=' + 'x' * 200\n"
        "for attempt in range(50):\n"
        "    try:\n"
        "        body = urllib.request.urlopen(url).read().decode(); break\n"
        "    except OSError:\n"
        "        time.sleep(0.1)\n"
        "for _ in range(int(sys.argv[1]) - 1):\n"
        "    urllib.request.urlopen(url).read()\n"
        "sys.stdout.write(body)\n")).status == 200
    r = sb.exec(["sh", "-c", f"cd /workspace && python3 -m http.server {port} --bind 127.0.0.1 "
                             f"& python3 /workspace/get.py 1"], timeout_seconds=20)
    assert r.body["status"] == "SUCCEEDED" and r.body["stdout"] == "hello\n", r.body
    fetch = ["python3", "/workspace/get.py"]
    for _ in range(3):
        r = sb.exec(fetch + ["300"], timeout_seconds=60)
        assert r.body["status"] == "SUCCEEDED" and r.body["stdout"] == "hello\n", r.body
    time.sleep(2.5)  # past the idle period: the session stays for its server
    r = sb.exec(fetch + ["1"])
    assert r.body["stdout"] == "hello\n", r.body
    assert sb.release().status == 200
    assert wait_for(lambda: not uid_processes(sb.uid), 5), uid_processes(sb.uid)
