"""Helpers shared by the sandbox-escape cases.

Probes run *inside* a sandbox through the exec API. Python probes get a
prelude (ctypes libc, a raw-syscall wrapper returning (ret, errno), the
parameters as P, a result dict R printed as one `RESULT {json}` line at
exit) and receive their parameters as argv[1] (JSON), so no probe source
is ever built by string formatting. Secrets a probe must look for are
passed reversed, so the probe's own command line never contains them.
SANDLOOM_SEC_VERBOSE=1 (with pytest -s) prints every probe's result.

Isolation levels: what a sandbox has depends on the level the daemon
selected (RUNTIME.md §3), which `isolation()` reads from the daemon's own
/healthz (never from SANDLOOM_TEST_LEVEL alone). At `basic` there is no
PID namespace and no private procfs: /proc does not exist inside, so a
case that inspects /proc there checks the same attack directly through
syscalls instead (and asserts that /proc is indeed absent), while every
assertion made at standard/strict is kept as it was.
"""

import hashlib
import json
import os
import re
import subprocess
import textwrap
import threading
import time

import pytest

# x86_64 syscall numbers.
NR = {
    "pivot_root": 155, "chroot": 161, "init_module": 175, "delete_module": 176,
    "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308, "process_vm_readv": 310,
    "finit_module": 313, "bpf": 321, "pidfd_send_signal": 424, "fsopen": 430, "pidfd_open": 434,
    "pidfd_getfd": 438,
}

PRELUDE = r'''
import atexit, ctypes, errno, json, os, socket, sys
P = json.loads(sys.argv[1])
R = {}
NR = P.pop("_nr", {})
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
# Whether this sandbox has a /proc at all (not at the basic level).
PROC = os.path.isdir("/proc/self")

def _arg(a):
    if isinstance(a, bool) or isinstance(a, int):
        return ctypes.c_long(int(a))
    if isinstance(a, str):
        return ctypes.c_char_p(a.encode())
    return a

def sc(name, *args):
    """Raw syscall by name: (return value, errno name or None)."""
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR[name]), *[_arg(a) for a in args])
    e = ctypes.get_errno()
    return r, (errno.errorcode.get(e, str(e)) if r < 0 else None)

def libcall(fn, *args):
    ctypes.set_errno(0)
    r = getattr(libc, fn)(*[_arg(a) for a in args])
    e = ctypes.get_errno()
    return r, (errno.errorcode.get(e, str(e)) if r < 0 else None)

def oserr(fn, *a, **kw):
    """Call fn; "OK" on success, else the errno name (or the exception type)."""
    try:
        fn(*a, **kw)
        return "OK"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__

def read_bytes(path, limit=1 << 20):
    with open(path, "rb") as f:
        return f.read(limit)

@atexit.register
def _emit():
    sys.stdout.flush()
    print("RESULT " + json.dumps(R, sort_keys=True, default=str), flush=True)
'''


class Isolation:
    """The isolation profile a daemon reports in GET /healthz
    (worker.capabilities): level, runtime and feature set."""

    def __init__(self, caps):
        self.caps = caps
        self.level = caps["selected_level"]
        self.runtime = caps.get("runtime")
        self.features = frozenset(caps.get("features") or ())
        # /proc exists inside only with a private procfs (standard, strict,
        # or the pid_namespace addition): RUNTIME.md §3 and §4.
        self.private_procfs = "private_procfs" in self.features
        self.pid_namespace = "pid_namespace" in self.features

    def __repr__(self):
        return (f"<isolation level={self.level} runtime={self.runtime} "
                f"features={sorted(self.features)}>")


def _client(target):
    """The API client of target (a Daemon, Client or Sandbox)."""
    if hasattr(target, "c"):  # Sandbox
        return target.c
    if hasattr(target, "client"):  # Daemon
        return target.client()
    return target


def isolation(target):
    """Isolation of the daemon behind target (a Daemon, Client or Sandbox),
    read from its /healthz capabilities (asked every time: ports are
    reused by later daemons). Fails the test
    when the daemon does not say, or when it runs at another level than
    SANDLOOM_TEST_LEVEL asked for."""
    c = _client(target)
    r = c.get("/healthz")
    try:
        caps = r.body["worker"]["capabilities"]
        iso = Isolation(caps)
    except (TypeError, KeyError) as e:
        pytest.fail(f"cannot tell the daemon's isolation level from GET /healthz "
                    f"(worker.capabilities.selected_level, features): {e!r} in {r!r}",
                    pytrace=False)
    wanted = os.environ.get("SANDLOOM_TEST_LEVEL", "").strip().lower()
    if wanted and str(caps.get("requested_level", "")).lower() == wanted and wanted in (
            "basic", "standard", "strict") and iso.level != wanted:
        pytest.fail(f"SANDLOOM_TEST_LEVEL={wanted} but the daemon runs at {iso!r}", pytrace=False)
    return iso


GVISOR = "gvisor"


def execution_backend(target):
    """The execution backend of the daemon behind target (a Daemon, Client
    or Sandbox): "native" or "gvisor" (docs/GVISOR.md), read from its
    /healthz (worker.capabilities.execution_backend.name; asked every time,
    as isolation() is). Fails the test when the daemon does not say.

    Under gVisor a case asserts the same security property as natively,
    the way the Sentry provides it: its own errno for a refusal, its own
    /proc and /sys, the effect rather than the native mechanism."""
    r = _client(target).get("/healthz")
    try:
        name = r.body["worker"]["capabilities"]["execution_backend"]["name"]
    except (TypeError, KeyError) as e:
        pytest.fail(f"cannot tell the daemon's execution backend from GET /healthz "
                    f"(worker.capabilities.execution_backend.name): {e!r} in {r!r}",
                    pytrace=False)
    assert name in ("native", GVISOR), f"unknown execution backend {name!r}"
    return name


def assert_proc_as_reported(iso, proc_present, where="the sandbox"):
    """/proc exists inside exactly when the daemon reports a private procfs.
    With it, the /proc-based checks of a case are meaningful (a /proc that
    is missing would make them vacuous); without it (basic), RUNTIME.md §4
    says there is no /proc, so a /proc inside would be something the
    profile does not account for (the probes inspect it anyway)."""
    if iso.private_procfs:
        assert proc_present, (f"{iso!r} reports private_procfs but {where} has no /proc: the "
                              f"/proc-based checks of this case could not run")
    else:
        assert not proc_present, (f"{iso!r} reports no private_procfs, yet {where} has a /proc "
                                  f"(RUNTIME.md §4: /proc only with a PID namespace)")


def run(sb, argv, *, timeout_seconds=None, http_timeout=90, **fields):
    """Exec argv; assert HTTP 200; return the record body."""
    if timeout_seconds is not None:
        fields["timeout_seconds"] = timeout_seconds
    r = sb.exec(argv, timeout=http_timeout, **fields)
    assert r.status == 200, f"exec was not accepted: {r!r}"
    return r.body


def sh(sb, script, **kw):
    return run(sb, ["sh", "-c", script], **kw)


def probe(sb, code, params=None, **kw):
    """Run a python probe inside sb. Returns (R, exec body)."""
    params = dict(params or {})
    params["_nr"] = NR
    src = PRELUDE + "\n" + textwrap.dedent(code)
    body = run(sb, ["python3", "-c", src, json.dumps(params)], **kw)
    for line in reversed(body.get("stdout", "").splitlines()):
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
            if os.environ.get("SANDLOOM_SEC_VERBOSE"):
                print(f"\n[probe in {sb.id}] {json.dumps(result, sort_keys=True)[:4000]}")
            return result, body
    pytest.fail(f"the in-sandbox probe printed no RESULT line (did python3 start?): "
                f"status={body.get('status')} exit={body.get('exit_code')} "
                f"stdout={body.get('stdout', '')[-1500:]!r} stderr={body.get('stderr', '')[-1500:]!r}",
                pytrace=False)


def require_tools(sb, tools):
    """pytest.fail (never skip) when the sandbox lacks a tool a case needs."""
    script = "; ".join(f"command -v {t} >/dev/null 2>&1 || echo missing:{t}" for t in tools)
    body = sh(sb, script + "; true")
    missing = [l.split(":", 1)[1] for l in body["stdout"].splitlines() if l.startswith("missing:")]
    if missing:
        pytest.fail(f"this host cannot run the case: {', '.join(missing)} not found inside the "
                    f"sandbox (it is mounted from the host's read-only /usr)", pytrace=False)


def reverse(s):
    return s[::-1]


def file_fingerprint(path):
    """(sha256, uid, gid, mode, mtime_ns, size) of a host file, without following links."""
    st = os.lstat(path)
    data = b""
    if os.path.isfile(path) and not os.path.islink(path):
        with open(path, "rb") as f:
            data = f.read()
    return (hashlib.sha256(data).hexdigest(), st.st_uid, st.st_gid, st.st_mode, st.st_mtime_ns,
            st.st_size)


def host_processes(uid, include_zombies=False):
    """[(pid, state, cmdline)] of live host processes owned by uid."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if state == "Z" and not include_zombies:
            continue
        found.append((int(pid), state, cmd))
    return found


def gvisor_host_pids(uid):
    """Host pids of the gVisor sandbox of uid: `runsc run` starts inside the
    sandbox's cgroup (<parent>/sandloom-sandboxes/sb-<uid>), so its Sentry,
    its gofer and the ptrace platform's stub processes are that cgroup's
    processes. They do not run as uid (the Sentry and the stubs are
    nobody's), so host_processes(uid) does not find them."""
    found = []
    suffix = f"/sb-{uid}"
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        if any(l.rstrip("/").endswith(suffix) for l in lines):
            found.append(int(pid))
    return found


def gvisor_container_processes(daemon, uid):
    """[(pid, comm)] of the processes of the gVisor sandbox of uid, from the
    host: `runsc ps` of its container (named sl-<uid>-<n> on its runsc
    processes' command lines), i.e. its Sentry's own process table. []
    when no session of uid runs."""
    runsc = daemon.env.get("SANDBOX_GVISOR_RUNSC", "/usr/bin/runsc")
    ids = set()
    for pid in gvisor_host_pids(uid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        ids.update(re.findall(r"\bsl-%d-\d+\b" % uid, cmd))
    found = []
    for cid in sorted(ids):
        r = subprocess.run([runsc, f"--root={daemon.sandbox_root}/.gvisor/state", "ps", cid],
                           capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
            continue  # the container ended meanwhile
        for line in r.stdout.splitlines()[1:]:
            f = line.split()
            if len(f) >= 8 and f[1].isdigit():
                found.append((int(f[1]), " ".join(f[7:])))
    return found


_GUEST_PS = r'''
import json, os
me = os.getpid()
out = []
for p in os.listdir("/proc"):
    if not p.isdigit() or int(p) == me:
        continue
    try:
        st = dict(l.split(":", 1) for l in open("/proc/%s/status" % p) if ":" in l)
        cmd = open("/proc/%s/cmdline" % p, "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError):
        continue
    out.append([int(p), st["State"].split()[0], cmd, int(st["TracerPid"])])
print(json.dumps(out))
'''


def gvisor_guest_processes(sb):
    """[(pid, state, cmdline, tracer pid)] of the processes of the gVisor
    sandbox sb, as its own Sentry lists them: they are no host processes.
    Read by a command of sb itself (in an exec scope of its own, so it runs
    beside a command being held), which leaves itself out."""
    body = run(sb, ["python3", "-c", _GUEST_PS], exec_scope="observer", http_timeout=60)
    assert body["status"] == "SUCCEEDED", f"could not list the sandbox's processes: {body}"
    return [tuple(p) for p in json.loads(body["stdout"].strip().splitlines()[-1])]


def sandbox_processes(sb):
    """[(pid, state, cmdline)] of sb's live processes, whatever the backend:
    natively its host processes (host_processes(sb.uid)), under gVisor the
    Sentry's (gvisor_guest_processes)."""
    if execution_backend(sb) == GVISOR:
        return [(pid, state, cmd) for pid, state, cmd, _ in gvisor_guest_processes(sb)
                if state != "Z"]
    return host_processes(sb.uid)


def wait_for(pred, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


class Background:
    """Run a callable in a thread; .result() joins and returns its value."""

    def __init__(self, fn, *a, **kw):
        self._out = {}

        def target():
            try:
                self._out["value"] = fn(*a, **kw)
            except BaseException as e:  # reported by result()
                self._out["error"] = e

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def result(self, timeout=60):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "background exec did not finish in time"
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"]


def hold_until_released(sb, marker, stop_name, limit_s=25, pre="", **kw):
    """Start (in a thread) an exec in sb that runs `sleep 20` under a shell
    whose command line carries `marker` (after running `pre`), until
    /workspace/<stop_name> appears (the test creates it on the host) or
    limit_s passes."""
    script = (f": {marker}; {pre} sleep 20 & s=$!; i=0; "
              f"while [ ! -e /workspace/{stop_name} ] && [ $i -lt {limit_s * 10} ]; do "
              f"sleep 0.1; i=$((i+1)); done; kill $s; echo held")
    return Background(sh, sb, script, exec_scope="holder", **kw)


def release_holder(daemon, sb, stop_name):
    stop = daemon.sandbox_root / sb.id / "workspace" / stop_name
    stop.write_bytes(b"")
    os.chown(stop, sb.uid, sb.uid)
