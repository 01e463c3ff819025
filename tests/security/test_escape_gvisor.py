"""What only a user-space kernel stops (docs/GVISOR.md): under
SANDBOX_EXECUTION_BACKEND=gvisor the sandbox's system calls are answered by
gVisor's Sentry, not by the host kernel. A kernel bug reachable through an
allowed call is the way out of a namespace sandbox; these cases check that
under gVisor the calls a kernel exploit starts from never reach the host:
the kernel the sandbox talks to is the Sentry, the host kernel's own
interfaces are absent, an unusual syscall surface is answered by the
Sentry (and the sandbox survives it), and the Sentry itself is confined on
the host by a seccomp filter. The rest of the escape suite runs at this
backend too (scripts/run-tests.sh: security@gvisor)."""
import os
import re

import pytest

from sec_helpers import probe, sh

pytestmark = pytest.mark.gvisor_cases


@pytest.fixture
def gv_sandbox(gvisor_daemon, make_sandbox):
    return make_sandbox(gvisor_daemon, "gvsec")


def host_pids_of(uid):
    """Host processes of the gVisor sandbox of uid: the runsc processes
    whose command line names its container (sl-<uid>-<n>)."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if re.search(rb"\bsl-%d-\d+\b" % uid, cmd) and b"runsc" in cmd:
            found.append(int(p))
    return found


def test_the_kernel_the_sandbox_sees_is_the_sentry(gv_sandbox):
    body = sh(gv_sandbox, "uname -r; cat /proc/version; dmesg 2>&1 | head -5")
    out = body["stdout"]
    release = out.splitlines()[0]
    assert release != os.uname().release, out
    with open("/proc/version") as f:
        assert f.read().strip() not in out, "the host's /proc/version shows inside"
    assert "gVisor" in out, out


def test_host_kernel_interfaces_are_absent(gv_sandbox):
    R, _ = probe(gv_sandbox, """
        for path in ("/proc/kallsyms", "/proc/modules", "/proc/kcore", "/proc/keys",
                     "/proc/sys/kernel/modprobe", "/sys/kernel/debug", "/sys/fs/bpf",
                     "/dev/kmsg", "/dev/mem", "/sys/firmware"):
            R[path] = oserr(read_bytes, path, 64) if not os.path.isdir(path) else \\
                ("DIR" if os.listdir(path) else "EMPTY")
    """)
    # Absent, unreadable or empty: never the host's.
    for path, v in R.items():
        assert v in ("ENOENT", "EACCES", "EPERM", "EMPTY", "ENOTDIR", "EINVAL"), (path, v)


def test_an_unusual_syscall_surface_is_answered_by_the_sentry(gv_sandbox):
    """Calls that kernel exploits start from (io_uring, perf events, bpf,
    userfaultfd, keyrings, module loading, kexec, fanotify, file handles)
    and numbers no kernel defines: each is refused by the Sentry, and the
    sandbox lives on."""
    calls = {"io_uring_setup": (425, 8, 0), "perf_event_open": (298, 0, 0, -1, -1, 0),
             "bpf": (321, 0, 0, 0), "userfaultfd": (323, 0), "keyctl": (250, 0, 0),
             "add_key": (248, 0, 0, 0, 0, 0), "init_module": (175, 0, 0, 0),
             "kexec_load": (246, 0, 0, 0, 0), "fanotify_init": (300, 0, 0),
             "open_by_handle_at": (304, -1, 0, 0), "lookup_dcookie": (212, 0, 0, 0),
             "undefined_335": (335,), "undefined_460": (460,), "undefined_1000": (1000,)}
    R, body = probe(gv_sandbox, """
        for name, args in P["calls"].items():
            ctypes.set_errno(0)
            r = libc.syscall(*[ctypes.c_long(a) for a in args])
            e = ctypes.get_errno()
            R[name] = "OK" if r >= 0 else errno.errorcode.get(e, str(e))
        R["alive"] = True
    """, {"calls": calls})
    assert R.pop("alive") is True, body
    # Python names errno 95 ENOTSUP (EOPNOTSUPP is the same number): the
    # Sentry's answer to open_by_handle_at. ENODEV is perf_event_open's
    # "no such PMU" (the Sentry has none), accepted for it alone.
    refusals = ("ENOSYS", "EPERM", "EINVAL", "EFAULT", "EBADF", "EACCES", "EOPNOTSUPP", "ENOTSUP")
    for name, v in R.items():
        assert v != "OK", f"{name} succeeded under gVisor"
        assert v in refusals + (("ENODEV",) if name == "perf_event_open" else ()), (name, v)
    # Undefined numbers: the Sentry's ENOSYS.
    assert R["undefined_1000"] == "ENOSYS", R


def test_the_sentry_is_itself_confined_on_the_host(gvisor_daemon, gv_sandbox):
    """The host side: the processes that run the sandbox are runsc's, each
    under a seccomp filter of its own (Seccomp: 2 in /proc/<pid>/status),
    and none runs as a real root without one."""
    sh(gv_sandbox, "true")  # the session runs
    pids = host_pids_of(gv_sandbox.uid)
    assert pids, "no runsc process names the sandbox's container"
    filtered = []
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")
        if b"boot" in cmd or b"gofer" in cmd:
            filtered.append(int(fields["Seccomp"].strip()) == 2)
    assert filtered and all(filtered), (pids, filtered)
