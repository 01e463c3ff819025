"""Sandbox escape attempts against the filesystem boundary: the daemon's
state, other tenants' files, host secrets, the read-only system trees,
/proc and /sys, inherited descriptors, and symlinks planted for the
daemon's own writes. Every attempt runs inside a real sandbox; every host
effect is checked from the test process (root on the host)."""

import os
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from sec_helpers import (GVISOR, assert_proc_as_reported, execution_backend, file_fingerprint,
                         gvisor_host_pids, hold_until_released, host_processes, isolation, probe,
                         release_holder, reverse, sandbox_processes, sh, wait_for)


# ---------------------------------------------------------------------------
# 1
def test_daemon_database_is_unreachable(daemon, ready_sandbox):
    """Attempt: from inside a sandbox, read the daemon's SQLite database by
    its host path (and its -wal/-shm companions), through /proc/1/root and
    /proc/self/root, list the workspace root and the state directory, open
    the database with python's sqlite3, and look for any file named like it.
    Must hold: none of those host paths exists inside, nothing readable
    starts with the SQLite header, and on the host the database is 0600
    root-owned and unchanged in content by the attempt."""
    sb = ready_sandbox
    db = str(daemon.db_path)
    assert os.path.isfile(db), "the daemon's database should exist on the host"
    before = Path(db).read_bytes()[:16]
    assert before.startswith(b"SQLite format 3"), before
    paths = [db, db + "-wal", db + "-shm", str(daemon.state), str(daemon.sandbox_root),
             str(daemon.sandbox_root / sb.id), str(daemon.sandbox_root / sb.id / "workspace"),
             "/proc/1/root" + db, "/proc/self/root" + db, "/proc/1/cwd/sandloom.db"]
    R, body = probe(sb, r'''
        R["exists"] = [p for p in P["paths"] if os.path.lexists(p)]
        R["readable"] = {}
        for p in P["paths"]:
            try:
                R["readable"][p] = read_bytes(p, 64).hex()
            except OSError as e:
                pass
        R["listable"] = [p for p in P["paths"] if oserr(os.listdir, p) == "OK"]
        try:
            import sqlite3
            c = sqlite3.connect("file:%s?mode=ro" % P["db"], uri=True)
            R["sqlite"] = c.execute("select name from sqlite_master").fetchall()
        except Exception as e:
            R["sqlite_error"] = type(e).__name__
        found = []
        for top in ("/", ):
            for d, dirs, files in os.walk(top):
                if d in ("/proc", "/usr", "/sys"):
                    dirs[:] = []
                    continue
                for f in files:
                    if f.startswith("sandloom.db"):
                        found.append(os.path.join(d, f))
        R["found"] = found
        ''', {"paths": paths, "db": db})
    assert R["exists"] == [], f"daemon state paths visible inside the sandbox: {R['exists']}"
    assert R["readable"] == {}, f"daemon state readable inside the sandbox: {R['readable']}"
    assert R["listable"] == [], f"daemon directories listable inside: {R['listable']}"
    assert "sqlite" not in R, f"the daemon database opened inside the sandbox: {R['sqlite']}"
    assert R["found"] == [], f"files named like the database inside the sandbox: {R['found']}"
    st = os.stat(db)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600), (st.st_uid, oct(st.st_mode))
    assert Path(db).read_bytes()[:16] == before


# ---------------------------------------------------------------------------
# 2
def test_other_sandbox_is_invisible(daemon, make_sandbox):
    """Attempt: sandbox A reads sandbox B's files by B's host path, looks for
    B's secret in every place A can write or see (/workspace, /home/sandbox,
    /cache, /envs, /tmp, /dev/shm, every /proc/<pid>/cmdline and environ)
    while B is running a command that put the secret in its /tmp, /dev/shm
    and command line; A also tries to become B's uid (setuid, setresuid) and
    to create files owned by B's uid (chown, lchown).
    Must hold: A never sees the secret or B's marker, every impersonation
    fails, and on the host every file in A's workspace is owned by A's uid
    and B's workspace holds only what B wrote. A signal 0 from A to B's
    host pids fails (ESRCH without a shared PID namespace, EPERM at basic).
    At basic (no PID namespace, no procfs) /proc must be absent in A, so
    there is no process listing to read B's command line from; with a
    private procfs, every /proc/<pid> is searched as above.
    Under gVisor B's processes exist only in B's Sentry: the premise (B's
    command line carries the marker) is read from B's own /proc, and B's
    host pids, at which A aims its signal, are B's runsc processes (the
    Sentry, gofer and stubs in B's cgroup)."""
    iso = isolation(daemon)
    gvisor = execution_backend(daemon) == GVISOR
    a, b = make_sandbox(daemon, "iso-a"), make_sandbox(daemon, "iso-b")
    assert a.uid != b.uid
    secret = "b-secret-" + secrets.token_hex(12)
    marker = "b-marker-" + secrets.token_hex(12)
    assert b.write("/workspace/b-secret.txt", secret.encode()).status == 200
    b_host_ws = daemon.sandbox_root / b.id / "workspace"
    # B keeps a command running that holds the secret in its private /tmp
    # and /dev/shm and the marker in its command line while A looks.
    holder = hold_until_released(
        b, marker, "stop-holder",
        pre=f"echo {secret} > /tmp/b-tmp; echo {secret} > /dev/shm/b-shm; touch /workspace/b-ready;")
    try:
        assert wait_for(lambda: (b_host_ws / "b-ready").exists(), 10), \
            "B's holder command never started"
        if gvisor:
            b_procs = sandbox_processes(b)
            assert any(marker in c for _, _, c in b_procs), b_procs
            b_pids = gvisor_host_pids(b.uid)
        else:
            assert any(marker in c for _, _, c in host_processes(b.uid)), host_processes(b.uid)
            b_pids = [pid for pid, _, _ in host_processes(b.uid)]
        R, body = probe(a, r'''
            secret, marker = P["secret"][::-1], P["marker"][::-1]
            R["host_paths"] = {p: oserr(read_bytes, p) for p in P["host_paths"]}
            R["host_dirs"] = {p: oserr(os.listdir, p) for p in P["host_dirs"]}
            hits = []
            for top in ("/workspace", "/home/sandbox", "/cache", "/envs", "/tmp", "/dev/shm"):
                for d, dirs, files in os.walk(top):
                    for f in files + dirs:
                        p = os.path.join(d, f)
                        if secret in f or marker in f:
                            hits.append(p)
                        try:
                            if os.path.isfile(p) and (secret.encode() in read_bytes(p) or
                                                      marker.encode() in read_bytes(p)):
                                hits.append(p)
                        except OSError:
                            pass
            procs = {}
            R["proc_present"] = PROC
            for pid in (os.listdir("/proc") if PROC else ()):
                if not pid.isdigit():
                    continue
                for leaf in ("cmdline", "environ"):
                    try:
                        data = read_bytes("/proc/%s/%s" % (pid, leaf))
                    except OSError:
                        continue
                    if secret.encode() in data or marker.encode() in data:
                        hits.append("/proc/%s/%s" % (pid, leaf))
                try:
                    procs[pid] = read_bytes("/proc/%s/cmdline" % pid, 200).replace(b"\0", b" ").decode()[:80]
                except OSError:
                    pass
            R["hits"] = hits
            R["procs"] = procs
            R["signal0 B"] = {str(p): oserr(os.kill, p, 0) for p in P["b_pids"]}
            buid = P["buid"]
            R["setuid"] = oserr(os.setuid, buid)
            R["setresuid"] = oserr(os.setresuid, buid, buid, buid)
            R["setgid"] = oserr(os.setgid, buid)
            open("/workspace/a-file", "w").close()
            R["chown"] = oserr(os.chown, "/workspace/a-file", buid, buid)
            os.symlink("a-file", "/workspace/a-link")
            R["lchown"] = oserr(os.lchown, "/workspace/a-link", buid, buid)
            def write_map(path, line):
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
            R["uid_map_write"] = oserr(write_map, "/proc/self/uid_map", "0 %d 1" % buid)
            R["setgroups_write"] = oserr(write_map, "/proc/self/setgroups", "allow")
            ''', {"secret": reverse(secret), "marker": reverse(marker), "buid": b.uid, "b_pids": b_pids,
                  "host_paths": [str(b_host_ws / "b-secret.txt"),
                                 str(daemon.sandbox_root / b.id / "home" / ".profile")],
                  "host_dirs": [str(b_host_ws), str(daemon.sandbox_root / b.id),
                                str(daemon.sandbox_root)]})
    finally:
        release_holder(daemon, b, "stop-holder")
        held = holder.result()
    assert held["status"] == "SUCCEEDED" and held["stdout"] == "held\n", held
    assert all(v != "OK" for v in R["host_paths"].values()), f"B's files read by A: {R['host_paths']}"
    assert all(v != "OK" for v in R["host_dirs"].values()), f"B's dirs listed by A: {R['host_dirs']}"
    assert R["hits"] == [], f"B's secret/marker visible in A at {R['hits']}"
    assert_proc_as_reported(iso, R["proc_present"], "sandbox A")
    assert not any(marker in c for c in R["procs"].values()), R["procs"]
    assert b_pids and all(v in ("ESRCH", "EPERM") for v in R["signal0 B"].values()), \
        f"A can signal B's processes: {R['signal0 B']}"
    for k in ("setuid", "setresuid", "setgid", "chown", "lchown", "uid_map_write", "setgroups_write"):
        assert R[k] != "OK", f"A could {k} to B's uid {b.uid}: {R}"
    # Host: A's files are A's; B's workspace holds B's file plus the stop file only.
    a_ws = daemon.sandbox_root / a.id / "workspace"
    for p in a_ws.iterdir():
        assert os.lstat(p).st_uid == a.uid, (p, os.lstat(p).st_uid)
    assert sorted(os.listdir(b_host_ws)) == ["b-ready", "b-secret.txt", "stop-holder"], os.listdir(b_host_ws)
    assert (b_host_ws / "b-secret.txt").read_text() == secret


# ---------------------------------------------------------------------------
# 3
def test_host_secrets_and_daemon_token_unreachable(daemon, ready_sandbox):
    """Attempt: read /root, /etc/shadow, /proc/1/root/etc/shadow and the
    daemon's /proc/<host pid>/{environ,cmdline,root,cwd,fd} and its memory
    with process_vm_readv(2); search for the
    daemon's bearer token in the sandbox's own environment (`env`), in every
    /proc/*/environ and cmdline, and in every file under /etc, /opt,
    /workspace, /home/sandbox, /cache, /envs, /tmp, /dev/shm (the 8 GB
    read-only /usr is not searched: the daemon never writes there); and
    call the daemon's API over loopback without the token.
    Must hold: every read fails, the token appears nowhere, the API answers
    401. Premise checked on the host: the token *is* in the daemon's
    environment, so the search is meaningful. At basic (no procfs) /proc
    must be absent inside, so no process's environ or cmdline is readable
    at all; with a private procfs every /proc/*/environ is searched."""
    sb = ready_sandbox
    iso = isolation(daemon)
    dpid = daemon.proc.pid
    token = daemon.token
    with open(f"/proc/{dpid}/environ", "rb") as f:
        assert token.encode() in f.read(), "premise: the token is in the daemon's environment"
    env_out = sh(sb, "env")
    assert env_out["status"] == "SUCCEEDED", env_out
    assert token not in env_out["stdout"] and "SANDBOX_INTERNAL_TOKEN" not in env_out["stdout"], \
        "the daemon token leaks into the sandbox environment"
    R, body = probe(sb, r'''
        token = P["token"][::-1].encode()
        dpid = P["dpid"]
        R["reads"] = {}
        for p in ["/root", "/etc/shadow", "/etc/gshadow", "/proc/1/root/etc/shadow",
                  "/proc/1/root/root", "/proc/%d/environ" % dpid, "/proc/%d/cmdline" % dpid,
                  "/proc/%d/root/etc/shadow" % dpid, "/proc/%d/cwd" % dpid,
                  "/proc/%d/fd" % dpid, "/proc/%d/mem" % dpid]:
            if os.path.isdir(p):
                R["reads"][p] = oserr(os.listdir, p)
            else:
                R["reads"][p] = oserr(read_bytes, p)
        # The daemon's memory directly, without /proc/<pid>/mem.
        class IOV(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
        buf = ctypes.create_string_buffer(64)
        local, remote = IOV(ctypes.addressof(buf), 64), IOV(0x400000, 64)
        R["reads"]["process_vm_readv daemon"] = sc("process_vm_readv", dpid, ctypes.byref(local), 1,
                                                   ctypes.byref(remote), 1, 0)[1] or "OK"
        hits = []
        if any(token in v.encode() for v in os.environ.values()):
            hits.append("os.environ")
        R["proc_present"] = PROC
        for pid in (os.listdir("/proc") if PROC else ()):
            if pid.isdigit():
                for leaf in ("environ", "cmdline"):
                    try:
                        if token in read_bytes("/proc/%s/%s" % (pid, leaf)):
                            hits.append("/proc/%s/%s" % (pid, leaf))
                    except OSError:
                        pass
        scanned = 0
        for top in ("/etc", "/opt", "/workspace", "/home/sandbox", "/cache", "/envs", "/tmp", "/dev/shm"):
            for d, dirs, files in os.walk(top):
                for f in files:
                    p = os.path.join(d, f)
                    try:
                        if os.path.isfile(p) and not os.path.islink(p):
                            scanned += 1
                            if token in read_bytes(p, 4 << 20):
                                hits.append(p)
                    except OSError:
                        pass
        R["scanned"] = scanned
        R["hits"] = hits
        import http.client
        try:
            c = http.client.HTTPConnection("127.0.0.1", P["port"], timeout=5)
            c.request("GET", "/api/v1/sandboxes/" + P["sid"])
            r = c.getresponse()
            R["api_status"] = r.status
            R["api_body_has_token"] = token in r.read()
            c = http.client.HTTPConnection("127.0.0.1", P["port"], timeout=5)
            c.request("GET", "/healthz")
            r = c.getresponse()
            R["healthz_has_token"] = token in r.read()
        except OSError as e:
            R["api_error"] = str(e)
        ''', {"token": reverse(token), "dpid": dpid, "port": daemon.port, "sid": sb.id})
    assert all(v != "OK" for v in R["reads"].values()), \
        f"host secrets / daemon process readable: {R['reads']}"
    assert R["hits"] == [], f"the daemon token is readable inside the sandbox at {R['hits']}"
    assert_proc_as_reported(iso, R["proc_present"])
    assert R["scanned"] > 50, f"the token search scanned too little to mean anything: {R}"
    if "api_error" not in R:  # host network mode (the default): the port is reachable
        assert R["api_status"] == 401, f"the API answered a token-less sandbox: {R}"
        assert not R["api_body_has_token"] and not R["healthz_has_token"], R


# ---------------------------------------------------------------------------
# 4
def test_system_trees_are_read_only(ready_sandbox):
    """Attempt: create, append to, chmod, delete and rename files in /usr,
    /etc, /opt/agent-sandbox and /, and remount /usr and /etc read-write.
    Must hold: every attempt fails (EROFS/EPERM/EACCES), and on the host
    /etc/passwd, /etc/hostname are unchanged and no new file appeared."""
    sb = ready_sandbox
    tag = "sandloom-sec-" + secrets.token_hex(6)
    watched = ["/etc/passwd", "/etc/hostname", "/etc/hosts"]
    before = {p: file_fingerprint(p) for p in watched if os.path.exists(p)}
    R, body = probe(sb, r'''
        tag = P["tag"]
        def create(p):
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        def append(p):
            fd = os.open(p, os.O_WRONLY | os.O_APPEND)
            os.write(fd, b"x")
        for d in ("/usr", "/usr/local", "/usr/bin", "/etc", "/", "/opt/agent-sandbox",
                  "/opt/agent-sandbox/python-runtime", "/opt/agent-sandbox/runtime", "/home"):
            R["create " + d] = oserr(create, os.path.join(d, tag))
            R["mkdir " + d] = oserr(os.mkdir, os.path.join(d, tag + "-d"))
        for f in ("/etc/passwd", "/etc/hostname", "/usr/bin/env"):
            R["append " + f] = oserr(append, f)
            R["chmod " + f] = oserr(os.chmod, f, 0o777)
            R["unlink " + f] = oserr(os.unlink, f)
            R["rename " + f] = oserr(os.rename, f, f + "-" + tag)
            R["utime " + f] = oserr(os.utime, f)
        R["remount /usr"] = libcall("mount", None, "/usr", None, 32 | 4096, None)[1] or "OK"  # MS_REMOUNT|MS_BIND
        R["remount /etc"] = libcall("mount", None, "/etc", None, 32, None)[1] or "OK"
        ''', {"tag": tag})
    ok = {k: v for k, v in R.items() if v == "OK"}
    assert ok == {}, f"writes to read-only trees succeeded inside the sandbox: {ok}"
    for p, fp in before.items():
        assert file_fingerprint(p) == fp, f"host {p} changed"
    for d in ("/usr", "/usr/local", "/usr/bin", "/etc", "/"):
        assert not os.path.lexists(os.path.join(d, tag)) and not os.path.lexists(
            os.path.join(d, tag + "-d")), f"{d}/{tag} appeared on the host"


# ---------------------------------------------------------------------------
# 18
# /sys directories that hold the host kernel's objects.
SYS_HOST_DIRS = ["kernel", "module", "firmware", "block", "bus", "power", "dev"]


def test_proc_and_sys_are_not_writable(ready_sandbox):
    """Attempt: find /sys (and mount sysfs); write /proc/sys/kernel/sysrq and
    /proc/sysrq-trigger; rewrite (with their current values, so a failure
    of the boundary changes nothing) /proc/sys/kernel/core_pattern,
    /proc/sys/kernel/hostname, /proc/sys/kernel/modprobe,
    /proc/sys/user/max_user_namespaces and /proc/sys/vm/overcommit_memory,
    directly and through /proc/self/root/proc/sys and /proc/1/root/proc/sys;
    unmount the read-only cover of /proc/sys.
    Must hold: /sys is absent; every write fails; /proc/sys is mounted
    read-only; the host's values are unchanged. At basic (no procfs,
    RUNTIME.md §4) /proc itself must be absent and cannot be made: creating
    /proc and mounting a procfs fail (every write above then fails too, and
    the host's values are still compared).
    (This kernel has no CONFIG_MAGIC_SYSRQ: /proc/sys/kernel/sysrq and
    /proc/sysrq-trigger do not exist on the host either; they are attempted
    anyway and the other files carry the check.)
    Under gVisor /sys and /proc/sys are the Sentry's own (its sysfs is
    mounted, and no read-only cover is needed): there every file under
    /sys and /proc/sys is rewritten with its current value and each write
    must fail, the host kernel's object directories of /sys (kernel,
    module, firmware, block, bus, power, dev) must be empty, and the
    attempts above must fail as natively."""
    sb = ready_sandbox
    iso = isolation(sb)
    gvisor = execution_backend(sb) == GVISOR
    files = ["/proc/sys/kernel/sysrq", "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname",
             "/proc/sys/kernel/modprobe", "/proc/sys/user/max_user_namespaces",
             "/proc/sys/vm/overcommit_memory"]
    host_before = {}
    for f in files:
        try:
            host_before[f] = Path(f).read_bytes()
        except OSError:
            pass
    R, body = probe(sb, r'''
        R["sys_exists"] = os.path.lexists("/sys")
        R["mount_sysfs"] = libcall("mount", "sysfs", "/tmp", "sysfs", 0, None)[1] or "OK"
        def rewrite(p, data=None):
            if data is None:
                with open(p, "rb") as f:
                    data = f.read()
            fd = os.open(p, os.O_WRONLY)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        R["writes"] = {}
        for f in P["files"]:
            for prefix in ("", "/proc/self/root", "/proc/1/root"):
                p = prefix + f
                if f.endswith("sysrq"):
                    R["writes"][p] = oserr(rewrite, p, b"0")
                else:
                    R["writes"][p] = oserr(rewrite, p)
        R["writes"]["/proc/sysrq-trigger"] = oserr(rewrite, "/proc/sysrq-trigger", b"h")
        R["umount /proc/sys"] = libcall("umount2", "/proc/sys", 2)[1] or "OK"  # MNT_DETACH
        R["proc_present"] = PROC
        if PROC:
            R["proc_sys_opts"] = [l.split()[3] for l in open("/proc/self/mounts") if l.split()[1] == "/proc/sys"]
        R["mkdir /proc"] = oserr(os.mkdir, "/proc")
        R["mount proc"] = libcall("mount", "proc", "/tmp", "proc", 0, None)[1] or "OK"
        R["sh_echo"] = os.system("echo 1 > /proc/sys/kernel/sysrq 2>/dev/null")
        if P["gvisor"]:
            # The Sentry's own /sys and /proc/sys: every file, rewritten.
            R["walk"] = {}
            for top in ("/sys", "/proc/sys"):
                for d, dirs, names in os.walk(top):
                    for n in names:
                        R["walk"][os.path.join(d, n)] = oserr(rewrite, os.path.join(d, n))
            R["sys_dirs"] = {d: oserr(os.listdir, "/sys/" + d) if not os.path.isdir("/sys/" + d)
                             else os.listdir("/sys/" + d) for d in P["host_dirs"]}
        ''', {"files": files, "gvisor": gvisor, "host_dirs": SYS_HOST_DIRS})
    if gvisor:
        assert R["sys_exists"] is True, "premise: the Sentry's sysfs is mounted at /sys"
        ok = {k: v for k, v in R["walk"].items() if v == "OK"}
        assert ok == {}, f"files under /sys or /proc/sys written inside the sandbox: {ok}"
        assert len([k for k in R["walk"] if k.startswith("/proc/sys/")]) >= 20, \
            f"too few /proc/sys files to mean anything: {sorted(R['walk'])}"
        host_full = [d for d in SYS_HOST_DIRS if os.path.isdir("/sys/" + d) and os.listdir("/sys/" + d)]
        assert host_full, "premise: the host's /sys has kernel objects"
        full = {d: v for d, v in R["sys_dirs"].items() if v not in ([], "ENOENT")}
        assert full == {}, f"host kernel objects in the sandbox's /sys: {full}"
    else:
        assert R["sys_exists"] is False, "/sys exists inside the sandbox"
    assert R["mount_sysfs"] != "OK"
    ok = {k: v for k, v in R["writes"].items() if v == "OK"}
    assert ok == {}, f"/proc writes succeeded inside the sandbox: {ok}"
    assert R["umount /proc/sys"] != "OK", "the read-only cover of /proc/sys could be removed"
    assert R["mkdir /proc"] != "OK" and R["mount proc"] != "OK", f"a procfs could be made: {R}"
    assert_proc_as_reported(iso, R["proc_present"])
    if R["proc_present"] and not gvisor:
        assert R["proc_sys_opts"] and all(o.split(",")[0] == "ro" for o in R["proc_sys_opts"]), R
    assert R["sh_echo"] != 0
    for f, v in host_before.items():
        assert Path(f).read_bytes() == v, f"host {f} changed"


# ---------------------------------------------------------------------------
# 19
def test_only_stdio_descriptors_reach_the_sandbox(daemon, ready_sandbox):
    """Attempt: list the open descriptors of the sandbox's PID 1
    (sandloom-init), of the command's shell, and of a process it starts
    (`ls -l /proc/self/fd`), looking for anything the daemon had open
    (database, sockets, other sandboxes' pipes, event fds).
    Must hold: each holds exactly 0, 1, 2 (ls also its own /proc/self/fd
    directory); 0 is /dev/null, 1 and 2 are pipes.
    At basic there is no /proc to list (asserted): the command init started
    and a process started by a shell then fstat(2) every descriptor below
    RLIMIT_NOFILE, with the same expectation, and init's descriptors are
    attacked directly: pidfd_open(getppid()) (init, confirmed from the
    host) and pidfd_getfd(2) of descriptors 0-63 must all fail.
    Under gVisor every descriptor the daemon passes shows as "host:[n]" and
    init's can be listed (this Sentry does not hide a non-dumpable
    process's descriptors): _stdio_only_under_gvisor checks what they
    give instead."""
    sb = ready_sandbox
    iso = isolation(sb)
    if execution_backend(sb) == GVISOR:
        _stdio_only_under_gvisor(daemon, sb, iso)
        return
    if not iso.private_procfs:
        _stdio_only_without_procfs(sb, iso)
        return
    body = sh(sb, "echo init; ls -l /proc/1/fd; echo shell; ls -l /proc/$$/fd; "
                  "echo self; ls -l /proc/self/fd")
    assert body["status"] == "SUCCEEDED", body
    sections, cur = {}, None
    for line in body["stdout"].splitlines():
        if line in ("init", "shell", "self"):
            cur = sections.setdefault(line, {})
        elif "->" in line:
            left, target = line.split(" -> ", 1)
            cur[int(left.split()[-1])] = target.strip()
    assert set(sections) == {"init", "shell", "self"}, body
    # A warm session's init holds its control and status sockets: they must
    # be unreachable from the sandbox (init is not dumpable, so /proc/1/fd
    # cannot be listed or opened). A one-shot init holds only stdio.
    init_fds = sections["init"]
    assert not init_fds or set(init_fds) == {0, 1, 2}, \
        f"init's descriptors are reachable from the sandbox: {init_fds}"
    if not init_fds:
        probe = sh(sb, "ls /proc/1/fd 2>&1; cat /proc/1/fd/3 2>&1 | head -c 200; exit 0")
        assert "Permission denied" in probe["stdout"], probe
    fds = sections["shell"]
    assert set(fds) == {0, 1, 2}, f"shell has descriptors beyond stdio: {fds}"
    self_fds = dict(sections["self"])
    extra = {fd: t for fd, t in self_fds.items() if fd > 2}
    assert all(t.startswith("/proc/") and t.endswith("/fd") for t in extra.values()) and \
        len(extra) <= 1, f"descriptors beyond stdio in a child process: {self_fds}"
    for fds in (f for f in sections.values() if f):
        assert fds[0] == "/dev/null", fds
        assert fds[1].startswith("pipe:") and fds[2].startswith("pipe:"), fds


FD_LISTER = r'''
import json, os, resource, stat
def list_fds():
    null = os.stat("/dev/null").st_rdev
    out = {}
    for fd in range(resource.getrlimit(resource.RLIMIT_NOFILE)[0]):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        m = st.st_mode
        out[str(fd)] = ("/dev/null" if stat.S_ISCHR(m) and st.st_rdev == null else
                        "pipe" if stat.S_ISFIFO(m) else "socket" if stat.S_ISSOCK(m) else
                        "file" if stat.S_ISREG(m) else "dir" if stat.S_ISDIR(m) else oct(m))
    return out
'''


def _stdio_only_without_procfs(sb, iso):
    """Case 19 where the sandbox has no procfs (basic)."""
    R, body = probe(sb, r'''
        import subprocess
        exec(P["lister"])
        R["proc_present"] = PROC
        R["command"] = list_fds()
        out = subprocess.run(["sh", "-c", 'python3 -c "$0"; true',
                              P["lister"] + "\nprint(json.dumps(list_fds()))"],
                             stdout=subprocess.PIPE, close_fds=False, text=True).stdout
        R["shell child"] = json.loads(out.strip().splitlines()[-1]) if out.strip() else out
        R["ppid"] = os.getppid()
        try:
            pfd = os.pidfd_open(os.getppid())
            R["pidfd_open init"] = "OK"
            R["pidfd_getfd init"] = {str(fd): sc("pidfd_getfd", pfd, fd, 0)[1] or "OK"
                                     for fd in range(64)}
        except OSError as e:
            R["pidfd_open init"] = errno.errorcode.get(e.errno, str(e.errno))
        ''', {"lister": FD_LISTER})
    assert_proc_as_reported(iso, R["proc_present"])
    for who in ("command", "shell child"):
        fds = R[who]
        assert isinstance(fds, dict) and set(fds) == {"0", "1", "2"}, \
            f"the {who} has descriptors beyond stdio: {fds}"
        assert fds == {"0": "/dev/null", "1": "pipe", "2": "pipe"}, f"{who}: {fds}"
    # The parent is the sandbox's init (same PID namespace as the host here).
    try:
        with open(f"/proc/{R['ppid']}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError as e:
        parent = repr(e)
    assert "sandloom-init" in parent, f"the command's parent is not init: {R['ppid']} {parent!r}"
    if R["pidfd_open init"] == "OK":
        got = {fd: v for fd, v in R["pidfd_getfd init"].items() if v == "OK"}
        assert got == {}, f"init's descriptors taken with pidfd_getfd: {got}"
    else:
        assert R["pidfd_open init"] in ("EPERM", "ESRCH"), R


GV_FD_LISTER = r'''
import json, os, resource, stat
def list_fds():
    out = {}
    for fd in range(resource.getrlimit(resource.RLIMIT_NOFILE)[0]):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        m = st.st_mode
        out[str(fd)] = ("chr" if stat.S_ISCHR(m) else "pipe" if stat.S_ISFIFO(m) else
                        "socket" if stat.S_ISSOCK(m) else "file" if stat.S_ISREG(m) else
                        "dir" if stat.S_ISDIR(m) else oct(m))
    return out
'''


def _stdio_only_under_gvisor(daemon, sb, iso):
    """Case 19 under gVisor. The daemon's descriptors are host files to the
    Sentry and show as "host:[n]", so the command and a process a shell
    starts fstat(2) every descriptor below RLIMIT_NOFILE instead: exactly
    0 (a character device that reads end of file: the host's /dev/null),
    1 and 2 (pipes). init's descriptors can be listed here, so each is
    attacked: opened read-only, write-only and read-write through
    /proc/1/fd/<n> and connected to as a unix socket. Each must be refused,
    or be a character device that reads end of file; a marker is written
    through every one that opens, and on the host it must appear in no
    file under the daemon's state directory (runsc's log, the bundles, the
    workspaces, the database). The marker travels reversed and is never
    printed, so only a write through init's descriptors could put it
    there."""
    marker = "init-fd-marker-" + secrets.token_hex(12)
    R, body = probe(sb, r'''
        import stat, subprocess
        exec(P["lister"])
        marker = P["marker"][::-1].encode()
        R["proc_present"] = PROC
        R["command"] = list_fds()
        R["stdin_eof"] = os.read(0, 16) == b""
        out = subprocess.run(["sh", "-c", 'python3 -c "$0"; true',
                              P["lister"] + "\nprint(json.dumps(list_fds()))"],
                             stdout=subprocess.PIPE, close_fds=False, text=True).stdout
        R["shell child"] = json.loads(out.strip().splitlines()[-1]) if out.strip() else out
        try:
            init_fds = sorted(os.listdir("/proc/1/fd"), key=int)
            R["init listed"] = True
        except OSError as e:
            init_fds = [str(fd) for fd in range(64)]
            R["init listed"] = errno.errorcode.get(e.errno, str(e.errno))
        R["init"] = {}
        for fd in init_fds:
            p = "/proc/1/fd/" + fd
            res = {}
            for name, flags in (("rd", os.O_RDONLY), ("wr", os.O_WRONLY), ("rdwr", os.O_RDWR)):
                try:
                    f = os.open(p, flags | os.O_NONBLOCK)
                except OSError as e:
                    res[name] = errno.errorcode.get(e.errno, str(e.errno))
                    continue
                st = os.fstat(f)
                kind = "chr" if stat.S_ISCHR(st.st_mode) else oct(st.st_mode)
                if flags != os.O_WRONLY:
                    try:
                        kind += ":eof" if os.read(f, 16) == b"" else ":data"
                    except OSError as e:
                        kind += ":" + errno.errorcode.get(e.errno, str(e.errno))
                if flags != os.O_RDONLY:
                    try:
                        os.write(f, marker + b"\n")
                    except OSError:
                        pass
                os.close(f)
                res[name] = kind
            def unix_connect():
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(p)
                finally:
                    s.close()
            res["connect"] = oserr(unix_connect)
            R["init"][fd] = res
        ''', {"lister": GV_FD_LISTER, "marker": reverse(marker)})
    assert_proc_as_reported(iso, R["proc_present"])
    for who in ("command", "shell child"):
        assert R[who] == {"0": "chr", "1": "pipe", "2": "pipe"}, \
            f"the {who} has descriptors beyond stdio, or other ones: {R[who]}"
    assert R["stdin_eof"], f"stdin is not the host's /dev/null (it gave data): {R}"
    assert R["init"], f"nothing of init's was tried: {R}"
    for fd, res in R["init"].items():
        assert res["connect"] != "OK", f"init's descriptor {fd} connected to: {res}"
        for how in ("rd", "wr", "rdwr"):
            assert res[how] in ("ENXIO", "ENODEV", "EACCES", "EPERM", "ENOENT", "EBADF") or \
                res[how] in ("chr", "chr:eof"), f"init's descriptor {fd} opened ({how}) onto {res}"
    wrote = marker.encode()
    found = []
    for d, _, names in os.walk(daemon.state):
        for n in names:
            path = os.path.join(d, n)
            try:
                if os.path.isfile(path) and not os.path.islink(path) and \
                        os.path.getsize(path) < (64 << 20):
                    with open(path, "rb") as f:
                        if wrote in f.read():
                            found.append(path)
            except OSError:
                pass
    assert found == [], f"a write through init's descriptors reached host files: {found}"


# ---------------------------------------------------------------------------
# 20
@pytest.fixture
def canary():
    d = Path(tempfile.mkdtemp(prefix="sandloom-sec-canary-"))
    os.chmod(d, 0o755)
    f = d / "keep.txt"
    f.write_bytes(b"canary content\n")
    os.chmod(f, 0o644)
    yield d, f, file_fingerprint(f)
    shutil.rmtree(d, ignore_errors=True)


def _assert_canary(canary):
    d, f, fp = canary
    assert sorted(os.listdir(d)) == ["keep.txt"], f"canary directory modified: {os.listdir(d)}"
    assert file_fingerprint(f) == fp, "canary file rewritten, chowned or chmodded"


def test_planted_symlinks_do_not_redirect_daemon_writes(daemon, ready_sandbox, canary):
    """Attempt: as the sandbox, replace /home/sandbox/.profile (which the
    daemon rewrites before every exec) with a symlink to a host canary file,
    then to /etc/hostname (as named in the brief), and run more execs
    (plain and login shells); plant workspace symlinks to the canary and
    push File API writes/reads/mkdirs through them; hard-link a host file
    into the workspace.
    Must hold: the canary and /etc/hostname keep content, owner, mode and
    mtime (the daemon neither writes through nor chowns the target); the
    planted .profile is left as the user's (a symlink); File API calls
    through links are refused; the hard link fails (EXDEV). /etc/hostname
    is snapshotted and restored should the boundary fail."""
    sb = ready_sandbox
    cdir, cfile, _ = canary
    home = daemon.sandbox_root / sb.id / "home"
    hostname_fp = file_fingerprint("/etc/hostname")
    hostname_data = Path("/etc/hostname").read_bytes()
    try:
        for target in (str(cfile), "/etc/hostname"):
            b = sh(sb, f"ln -sf {target} /home/sandbox/.profile && echo planted")
            assert b["stdout"] == "planted\n", b
            for argv in (["true"], ["sh", "-lc", "echo $PATH"], ["sh", "-c", "cat /home/sandbox/.profile"]):
                r = sb.exec(argv, timeout=60)
                assert r.status == 200, r
            assert os.path.islink(home / ".profile") and os.readlink(home / ".profile") == target, \
                "the daemon replaced the user's planted .profile"
            _assert_canary(canary)
            assert file_fingerprint("/etc/hostname") == hostname_fp, \
                "/etc/hostname changed after planting a .profile symlink to it"
        # A .profile that is a symlink to a directory, and a dangling one.
        for target in (str(cdir), str(cdir / "new-file")):
            assert sh(sb, f"ln -sfn {target} /home/sandbox/.profile")["status"] == "SUCCEEDED"
            assert sb.exec(["true"]).status == 200
            _assert_canary(canary)
        # The daemon's own writes come back once the user removes the link.
        assert sh(sb, "rm /home/sandbox/.profile")["status"] == "SUCCEEDED"
        assert sb.exec(["true"]).status == 200
        st = os.lstat(home / ".profile")
        assert stat.S_ISREG(st.st_mode) and st.st_uid == sb.uid, "managed .profile not rewritten"

        # File API through planted links.
        b = sh(sb, f"ln -s {cfile} /workspace/f-link && ln -s {cdir} /workspace/d-link && "
                   f"ln -s /etc/hostname /workspace/h-link && echo ok")
        assert b["stdout"] == "ok\n", b
        assert sb.write("/workspace/f-link", b"pwned").status in (200, 400)
        assert sb.write("/workspace/h-link", b"pwned").status in (200, 400)
        assert sb.write("/workspace/d-link/keep.txt", b"pwned").status == 400
        assert sb.write("/workspace/d-link/new.txt", b"pwned").status == 400
        assert sb.mkdir("/workspace/d-link/sub", parents=True).status == 400
        for p in ("/workspace/f-link", "/workspace/h-link", "/workspace/d-link/keep.txt"):
            r = sb.read(p)
            assert r.status != 200 or b"canary" not in r.raw, f"File API read through {p}: {r!r}"
        _assert_canary(canary)
        assert file_fingerprint("/etc/hostname") == hostname_fp
        # Hard links to host files cannot be made from inside.
        b = sh(sb, "ln /etc/hostname /workspace/hl 2>&1 || echo refused; "
                   "ln /etc/passwd /home/sandbox/hl2 2>&1 || echo refused")
        assert b["stdout"].count("refused") == 2, b
    finally:
        if Path("/etc/hostname").read_bytes() != hostname_data or \
                file_fingerprint("/etc/hostname")[1:4] != hostname_fp[1:4]:
            Path("/etc/hostname").write_bytes(hostname_data)
            os.chown("/etc/hostname", hostname_fp[1], hostname_fp[2])
            os.chmod("/etc/hostname", stat.S_IMODE(hostname_fp[3]))
