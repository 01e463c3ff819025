"""What a process inside the sandbox sees and may do (RUNTIME.md §4–§7,
API.md §4.2–§4.4, §3.14): filesystem view, limits, login profile, output
cap, concurrency rules."""

import os
import tempfile
import threading
import time
import uuid

import pytest

from sandloom_client import Sandbox, assert_error


def run(sb, argv, **kw):
    r = sb.exec(argv, **kw)
    assert r.status == 200, r
    return r.body


@pytest.fixture(scope="module")
def level(daemon):
    return daemon.client().get("/healthz", auth=False).body["worker"]["capabilities"][
        "selected_level"]


def test_filesystem_view(daemon, ready_sandbox):
    sb = ready_sandbox
    # A host file in the host's /tmp (where the state directory lives too).
    fd, host_tmp = tempfile.mkstemp(prefix="sandloom-host-")
    os.close(fd)
    try:
        script = (
            f"test ! -e {host_tmp} && echo tmp-private; "
            f"test ! -e {daemon.state} && echo state-hidden; "
            "test -d /workspace -a -d /home/sandbox -a -d /cache -a -d /envs && echo persist-dirs; "
            "for d in /sys /run /var /root; do test -e $d && echo present:$d; done; "
            "touch /etc/sandloom-ro-test 2>/dev/null || echo etc-ro; "
            "touch /usr/sandloom-ro-test 2>/dev/null || echo usr-ro; "
            "echo x > /home/sandbox/h && echo x > /cache/c && echo x > /envs/e && echo rw-ok; "
            "command -v python3")
        b = run(sb, ["sh", "-c", script])
    finally:
        os.unlink(host_tmp)
    lines = b["stdout"].splitlines()
    for want in ("tmp-private", "state-hidden", "persist-dirs", "etc-ro", "usr-ro", "rw-ok"):
        assert want in lines, f"{want} missing from {b!r}"
    assert not [l for l in lines if l.startswith("present:")], \
        f"no /sys, /run, /var or /root inside the sandbox: {lines}"
    assert lines[-1] == "/opt/agent-sandbox/python-runtime/bin/python3", lines
    assert not os.path.exists("/etc/sandloom-ro-test") and not os.path.exists(
        "/usr/sandloom-ro-test")


def test_other_sandboxes_are_invisible(daemon, new_sandbox):
    a, b = new_sandbox("iso-a"), new_sandbox("iso-b")
    for sb in (a, b):
        assert sb.resolve().status == 200 and sb.connect().status == 200
    assert a.write("/workspace/secret.txt", b"a-secret").status == 200
    host_secret = daemon.sandbox_root / a.id / "workspace" / "secret.txt"
    out = run(b, ["sh", "-c", f"cat {host_secret} /workspace/secret.txt 2>/dev/null; echo done"])
    assert out["stdout"] == "done\n", out
    out = run(b, ["sh", "-c", "ls -a / /workspace /home/sandbox /tmp"])
    assert "secret.txt" not in out["stdout"] and a.id not in out["stdout"], out
    assert a.uid != b.uid


def test_process_limits(ready_sandbox):
    code = ("import resource as r\n"
            "for n in ('CPU','NPROC','NOFILE','FSIZE','CORE'):\n"
            "    print(n, *r.getrlimit(getattr(r, 'RLIMIT_' + n)))\n")
    b = run(ready_sandbox, ["python3", "-c", code])
    assert b["status"] == "SUCCEEDED", b
    got = dict((l.split()[0], tuple(map(int, l.split()[1:]))) for l in b["stdout"].splitlines())
    assert got == {"CPU": (300, 300), "NPROC": (64, 64), "NOFILE": (512, 512),
                   "FSIZE": (1073741824, 1073741824), "CORE": (0, 0)}, got


def test_no_privileges_inside(ready_sandbox, level):
    if level == "basic":
        pytest.skip("no /proc at basic level")
    b = run(ready_sandbox, ["sh", "-c", "grep -E '^(NoNewPrivs|CapEff|CapPrm|CapBnd):' "
                                        "/proc/self/status; cat /proc/self/uid_map"])
    assert b["status"] == "SUCCEEDED", b
    fields = dict(l.split(":", 1) for l in b["stdout"].splitlines() if ":" in l)
    assert fields["NoNewPrivs"].strip() == "1", b
    assert int(fields["CapEff"].strip(), 16) == 0, f"effective capabilities inside: {b!r}"
    uid_map = [l.split() for l in b["stdout"].splitlines() if ":" not in l and l.strip()]
    assert uid_map and uid_map[0][0] == "0" and int(uid_map[0][1]) == ready_sandbox.uid \
        and uid_map[0][2] == "1", f"uid 0 inside must map to the sandbox uid only: {uid_map}"


def test_login_profile(daemon, ready_sandbox):
    sb = ready_sandbox
    assert run(sb, ["true"])["status"] == "SUCCEEDED"
    prof = daemon.sandbox_root / sb.id / "home" / ".profile"
    assert prof.is_file(), "home/.profile is written before every execution"
    st = prof.stat()
    assert (st.st_uid, st.st_mode & 0o7777) == (sb.uid, 0o644), (st.st_uid, oct(st.st_mode))
    assert prof.read_text().splitlines()[0].startswith("# managed by agent-sandbox"), \
        prof.read_text()
    # A user-owned .profile (no marker) is left alone.
    b = run(sb, ["sh", "-c", "printf 'export MINE=1\\n' > /home/sandbox/.profile"])
    assert b["status"] == "SUCCEEDED", b
    b = run(sb, ["sh", "-lc", "echo $MINE; cat /home/sandbox/.profile"])
    assert b["stdout"] == "1\nexport MINE=1\n", b


def test_exec_id_replays_across_generations(ready_sandbox):
    sb = ready_sandbox
    exec_id = "gen-replay-" + uuid.uuid4().hex[:8]
    first = run(sb, ["sh", "-c", "echo gen1"], exec_id=exec_id)
    assert first["stdout"] == "gen1\n", first
    assert sb.release().status == 200
    assert sb.resolve().status == 200 and sb.generation == 3
    assert sb.connect().status == 200
    again = run(sb, ["sh", "-c", "echo gen3"], exec_id=exec_id)
    assert again["stdout"] == "gen1\n" and again["duration_ms"] is None, again


def test_missing_cwd_fails(ready_sandbox):
    b = run(ready_sandbox, ["pwd"], cwd="/workspace/does-not-exist")
    assert b["status"] == "FAILED", b
    assert b["exit_code"] != 0, b


def test_output_cap(daemon_factory):
    d = daemon_factory({"SANDBOX_MAX_OUTPUT_BYTES": "1000"})
    sb = Sandbox(d.client(), "cap-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    b = run(sb, ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a; head -c 300 /dev/zero "
                             "| tr '\\0' b >&2"])
    assert b["status"] == "SUCCEEDED", {k: v for k, v in b.items() if k not in ("stdout",)}
    assert b["stdout"] == "a" * 1000, len(b["stdout"])
    assert b["stderr"] == "b" * 300
    assert b["truncated"] is True
    b = run(sb, ["sh", "-c", "head -c 1000 /dev/zero | tr '\\0' a"])
    assert len(b["stdout"]) == 1000 and b["truncated"] is False, b["truncated"]


def test_concurrency_rules(ready_sandbox):
    """While an unscoped command runs: another unscoped exec -> 409
    SANDBOX_EXEC_SCOPE_BUSY, file calls -> 409 SANDBOX_FILE_PATH_LOCKED,
    release -> 409 SANDBOX_BUSY_OR_STALE, route status RUNNING."""
    sb = ready_sandbox
    result = {}

    def long_exec():
        result["r"] = sb.exec(["sh", "-c", "sleep 3; echo done"], exec_id="long-" + uuid.uuid4().hex[:8])

    t = threading.Thread(target=long_exec)
    t.start()
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and sb.route().body["status"] != "RUNNING":
            time.sleep(0.05)
        assert sb.route().body["status"] == "RUNNING"
        assert_error(sb.exec(["true"]), 409, "SANDBOX_EXEC_SCOPE_BUSY")
        assert_error(sb.exec(["true"], exec_scope="scope-a"), 409, "SANDBOX_EXEC_SCOPE_BUSY")
        assert_error(sb.write("/workspace/during.txt", b"x"), 409, "SANDBOX_FILE_PATH_LOCKED")
        assert_error(sb.release(), 409, "SANDBOX_BUSY_OR_STALE")
    finally:
        t.join(15)
    r = result["r"]
    assert r.status == 200 and r.body["status"] == "SUCCEEDED" and r.body["stdout"] == "done\n", r
    assert sb.route().body["status"] == "READY"


def test_scoped_execs_run_in_parallel(ready_sandbox):
    """Two scoped commands run at the same time: each announces itself and
    waits (up to 10 s) for the other's announcement, which only succeeds if
    they overlap. No timing assumption beyond that generous bound."""
    sb = ready_sandbox
    results = {}
    script = ("touch /workspace/up-{me}; i=0; "
              "while [ ! -e /workspace/up-{other} ]; do "
              "i=$((i+1)); [ $i -gt 200 ] && exit 3; sleep 0.05; done; "
              "sleep 2; echo {me}")

    def scoped(me, other):
        results[me] = sb.exec(["sh", "-c", script.format(me=me, other=other)], exec_scope=me)

    threads = [threading.Thread(target=scoped, args=p)
               for p in (("scope-a", "scope-b"), ("scope-b", "scope-a"))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        names = {e["name"] for e in (sb.list("/workspace").body or {}).get("entries", [])}
        if {"up-scope-a", "up-scope-b"} <= names:
            break
        time.sleep(0.02)
    # Both are running: the same scope is busy; a file call runs alongside.
    assert_error(sb.exec(["true"], exec_scope="scope-a"), 409, "SANDBOX_EXEC_SCOPE_BUSY")
    assert sb.write("/workspace/alongside.txt", b"ok").status == 200
    for t in threads:
        t.join(20)
    for n in ("scope-a", "scope-b"):
        r = results[n]
        assert r.status == 200 and r.body["status"] == "SUCCEEDED" and r.body["stdout"] == n + "\n", r


def test_parallel_exec_limit(daemon_factory):
    d = daemon_factory({"SANDBOX_MAX_PARALLEL_EXECS_PER_SANDBOX": "2"})
    sb = Sandbox(d.client(), "par-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    results = {}

    def scoped(name):
        results[name] = sb.exec(["sh", "-c", f"touch /workspace/started-{name}; sleep 3"],
                                exec_scope=name)

    threads = [threading.Thread(target=scoped, args=(n,)) for n in ("scope-a", "scope-b")]
    for t in threads:
        t.start()
    # Probe only once both commands are running (their marker files exist),
    # so the probe cannot take a slot before them. File calls run beside
    # scoped commands.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        names = {e["name"] for e in (sb.list("/workspace").body or {}).get("entries", [])}
        if {"started-scope-a", "started-scope-b"} <= names:
            break
        time.sleep(0.05)
    try:
        assert_error(sb.exec(["true"], exec_scope="scope-c"), 429, "SANDBOX_PARALLEL_EXEC_LIMIT")
    finally:
        for t in threads:
            t.join(15)
    for n, r in results.items():
        assert r.status == 200 and r.body["status"] == "SUCCEEDED", (n, r)


def _uid_processes(uid):
    """Live (not zombie) host processes of a uid. A killed process may stay
    a zombie until the host's PID 1 reaps it; it runs nothing."""
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid != uid:
                    continue
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                pids.append(int(pid))
    return pids


def test_release_kills_escaped_processes_at_basic(daemon_factory):
    """At basic there is no PID namespace: a process that leaves its
    execution's process group (setsid) outlives the execution. Release must
    still leave nothing of the sandbox running."""
    d = daemon_factory({"SANDBOX_ISOLATION_LEVEL": "basic"})
    sb = Sandbox(d.client(), "esc-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    # The command waits until the escaped process has its own session (it
    # writes its pid after setsid), so the escape itself is not raced.
    r = sb.exec(["sh", "-c",
                 "setsid sh -c 'echo $$ > /workspace/escaped.pid; exec sleep 300' "
                 ">/dev/null 2>&1 < /dev/null & "
                 "while [ ! -s /workspace/escaped.pid ]; do sleep 0.05; done; echo started"])
    assert r.status == 200 and r.body["stdout"] == "started\n", r
    uid = sb.uid
    deadline = time.monotonic() + 5
    while not _uid_processes(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _uid_processes(uid), "the escaped process should be running before release (basic)"
    assert sb.release().status == 200
    # Release kills synchronously; allow only the moment the kernel needs
    # to reap the killed process.
    deadline = time.monotonic() + 1
    while _uid_processes(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _uid_processes(uid), f"processes of uid {uid} survive release"


def test_non_utf8_names_are_listed_not_hidden(ready_sandbox):
    """A name that is not UTF-8 is shown with U+FFFD, never dropped: a
    sandbox must not be able to hide files from the file API's listing."""
    sb = ready_sandbox
    r = sb.exec(["sh", "-c", "touch /workspace/ok.txt \"/workspace/bad$(printf '\\377')name\""])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = sb.list("/workspace")
    assert r.status == 200, r
    names = sorted(e["name"] for e in r.body["entries"])
    assert r.body["total"] == 2 and len(names) == 2, r
    assert "bad\ufffdname" in names and "ok.txt" in names, names


def test_memory_quota_kill_is_reported(daemon_factory):
    """A sandbox over its aggregate memory quota is OOM-killed inside its own
    cgroup (the host is untouched) and the execution says so:
    termination_reason OOM_KILLED, never a bare failure."""
    d = daemon_factory({"SANDBOX_MEMORY_LIMIT_BYTES": str(64 * 1024 * 1024)})
    caps = d.client().get("/healthz").body["worker"]["capabilities"]["resource_control"]
    assert caps["sandbox_memory_quota"] is True, caps
    sb = Sandbox(d.client(), "oom-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    r = sb.exec(["python3", "-c", "b = bytearray(400 * 1024 * 1024); print('allocated')"])
    assert r.status == 200, r
    b = r.body
    assert b["status"] == "FAILED" and b["termination_reason"] == "OOM_KILLED", b
    assert "allocated" not in b["stdout"], b
    # The sandbox is fine afterwards.
    r = sb.exec(["true"])
    assert r.body["status"] == "SUCCEEDED" and r.body["termination_reason"] is None, r


def test_pids_quota_contains_a_fork_bomb(daemon_factory):
    """A fork bomb hits the sandbox's pids quota: the daemon keeps answering,
    another sandbox keeps working, and nothing of the bomb survives."""
    d = daemon_factory({"SANDBOX_PIDS_LIMIT": "40"})
    c = d.client()
    assert c.get("/healthz").body["worker"]["capabilities"]["resource_control"][
        "sandbox_pid_quota"] is True
    bomb = Sandbox(c, "bomb-" + uuid.uuid4().hex[:8], "scope")
    other = Sandbox(c, "calm-" + uuid.uuid4().hex[:8], "scope")
    for sb in (bomb, other):
        assert sb.resolve().status == 200 and sb.connect().status == 200
    result = {}
    t = threading.Thread(target=lambda: result.setdefault(
        "r", bomb.exec(["sh", "-c", "b() { b | b & }; b; sleep 3"], timeout_seconds=4)))
    t.start()
    time.sleep(1)
    assert c.get("/health", auth=False).status == 200
    r = other.exec(["sh", "-c", "echo alive"])
    assert r.status == 200 and r.body["stdout"] == "alive\n", r
    t.join(30)
    assert result["r"].status == 200, result
    assert bomb.release().status == 200
    assert not _uid_processes(bomb.uid), "processes of the fork bomb survive release"
