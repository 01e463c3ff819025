"""What a sandbox learns about the host (hardening issue, attack 17).

/proc/config.gz gave away the host kernel's exact build, and the
unauthenticated /healthz named the database's path. Each probe reads from
inside a real sandbox; the host side is the test process.
"""
import json

from sec_helpers import GVISOR, assert_proc_as_reported, execution_backend, isolation, probe

MASKED_FILES = ["config.gz", "kcore", "keys", "key-users", "timer_list", "sched_debug",
                "kallsyms", "modules", "vmallocinfo", "slabinfo", "iomem", "ioports",
                "partitions", "diskstats", "buddyinfo", "pagetypeinfo"]
MASKED_DIRS = ["acpi", "scsi", "asound", "driver", "fs"]


def test_host_kernel_details_are_masked_in_proc(ready_sandbox):
    """Attempt: read /proc/config.gz, kallsyms, modules, timer_list, keys,
    iomem ... and list /proc/acpi, /proc/fs ...; write to them.
    Must hold (with a private /proc; at basic there is none, asserted): every
    file that exists on the host reads as empty (a write goes into
    /dev/null and changes nothing), every directory lists nothing;
    /proc/self and /proc/cpuinfo still work.
    Under gVisor /proc is the Sentry's own procfs, which has none of these
    host kernel files to mask: each must be absent or empty there (never
    the host's content), each directory absent or empty."""
    sb = ready_sandbox
    iso = isolation(sb)
    gvisor = execution_backend(sb) == GVISOR
    R, _ = probe(sb, r'''
        R["proc"] = PROC
        if PROC:
            out = {}
            for name in P["files"]:
                path = "/proc/" + name
                try:
                    with open(path, "rb") as f:
                        out[name] = len(f.read(4096))
                except FileNotFoundError:
                    out[name] = "absent"
                except OSError as e:
                    out[name] = errno.errorcode.get(e.errno, str(e.errno))
                try:
                    # The cover is /dev/null: a write goes nowhere.
                    with open(path, "wb") as f:
                        f.write(b"x")
                    with open(path, "rb") as f:
                        out[name + " after write"] = len(f.read(4096))
                except OSError as e:
                    out[name + " after write"] = errno.errorcode.get(e.errno, str(e.errno))
            R["files"] = out
            dirs = {}
            for name in P["dirs"]:
                try:
                    dirs[name] = os.listdir("/proc/" + name)
                except FileNotFoundError:
                    dirs[name] = "absent"
            R["dirs"] = dirs
            R["self"] = os.readlink("/proc/self") != ""
            R["cpuinfo"] = len(open("/proc/cpuinfo").read()) > 0
        ''', {"files": MASKED_FILES, "dirs": MASKED_DIRS})
    assert_proc_as_reported(iso, R["proc"])
    if not R["proc"]:
        return
    import os
    for name in MASKED_FILES:
        if not os.path.exists("/proc/" + name):
            continue
        if gvisor:
            assert R["files"][name] in (0, "absent"), \
                f"/proc/{name} is neither absent nor empty under gVisor: {R['files']}"
        else:
            assert R["files"][name] == 0, f"/proc/{name} does not read empty: {R['files']}"
        assert R["files"][name + " after write"] in (0, "EACCES", "EPERM", "EROFS"), R["files"]
    for name in MASKED_DIRS:
        if os.path.isdir("/proc/" + name) and os.listdir("/proc/" + name):
            if gvisor:
                assert R["dirs"][name] in ([], "absent"), \
                    f"/proc/{name} lists {R['dirs'][name][:5]} under gVisor"
            else:
                assert R["dirs"][name] == [], f"/proc/{name} lists {R['dirs'][name][:5]}"
    assert R["self"] and R["cpuinfo"], R


def test_unauthenticated_answers_name_no_host_path(daemon, ready_sandbox):
    """Attempt: from inside the sandbox (host network mode), read /healthz,
    /health, /openapi.json, /docs and /admin without a token.
    Must hold: none of them contains the daemon's state directory, its
    workspace root or its database path."""
    sb = ready_sandbox
    R, _ = probe(sb, r'''
        import urllib.request
        out = {}
        for path in ("/healthz", "/health", "/openapi.json", "/docs", "/admin"):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{P['port']}{path}", timeout=5) as r:
                    out[path] = r.read().decode("utf-8", "replace")
            except Exception as e:
                out[path] = "ERROR " + repr(e)
        R["answers"] = out
        ''', {"port": daemon.port})
    secrets_of_layout = [str(daemon.state), str(daemon.sandbox_root), str(daemon.db_path)]
    for path, body in R["answers"].items():
        assert not body.startswith("ERROR"), (path, body)
        for s in secrets_of_layout:
            assert s not in body, f"{path} names {s}"
    assert json.loads(R["answers"]["/healthz"])["db"]["database"] == daemon.db_path.name


def mountinfo_lines(sb):
    """Attempt: read /proc/self/mountinfo from inside, whose 4th field is
    each mount's path within its filesystem. Its lines, or None where the
    level has no /proc (as the sandbox's isolation says)."""
    iso = isolation(sb)
    R, _ = probe(sb, r'''
        R["proc"] = PROC
        R["mountinfo"] = open("/proc/self/mountinfo").read() if PROC else ""
        ''')
    assert_proc_as_reported(iso, R["proc"])
    return R["mountinfo"].splitlines() if R["proc"] else None


def workspace_root_field(lines):
    ws_line = [l for l in lines if l.split()[4] == "/workspace"]
    assert ws_line, lines
    return ws_line[0].split()[3]


def assert_gvisor_mountinfo_hides_paths(lines):
    """Under gVisor each mount is served by the gofer from its own root
    (9p, aname=/): the 4th field is "/" for every mount, the workspace's
    too, so no path within any host filesystem shows."""
    assert workspace_root_field(lines) == "/", lines
    assert all(l.split()[3] == "/" for l in lines), \
        f"a gVisor mount shows a path within its filesystem: {lines}"


def test_mountinfo_shows_no_host_layout_on_dedicated_filesystems(daemon_factory, make_sandbox):
    """The mountinfo attempt (mountinfo_lines). With the workspace root and the template
    root each a filesystem of their own (tmpfs mounts here, as a deployment
    mounts volumes there), that path is "/<sandbox-id>/workspace" and no
    host path of the state layout shows; /healthz says host_layout.hidden.
    A daemon whose roots sit inside the host's filesystem says hidden false,
    with the fix in the note (mountinfo cannot be rewritten from a mount
    namespace). Under gVisor the gofer serves every mount from its own
    root: the field is "/" for each, and still no host path shows."""
    import os
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path
    tmp_path = Path(tempfile.mkdtemp(prefix="sandloom-layout-"))
    os.chmod(tmp_path, 0o711)
    ws, tpl = tmp_path / "ws", tmp_path / "tpl"
    for m in (ws, tpl):
        m.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0711", "tmpfs", str(m)],
                       check=True)
    try:
        d = daemon_factory({"SANDBOX_LOCAL_ROOT": str(ws), "SANDBOX_TEMPLATE_ROOT": str(tpl),
                            "SANDBOX_MIN_FREE_BYTES": "1048576"})
        layout = d.client().get("/healthz").body["worker"]["capabilities"]["host_layout"]
        assert layout["hidden"] is True, layout
        sb = make_sandbox(d)
        lines = mountinfo_lines(sb)
        if lines is not None:
            if execution_backend(d) == GVISOR:
                assert_gvisor_mountinfo_hides_paths(lines)
            else:
                assert workspace_root_field(lines) == f"/{sb.id}/workspace", lines
            for l in lines:
                assert str(tmp_path) not in l and str(d.state) not in l, l
    finally:
        for m in (ws, tpl):
            subprocess.run(["umount", "-l", str(m)], check=False)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_the_workspace_image_hides_the_host_layout(daemon_factory, make_sandbox):
    """The same attempt against the default layout (both roots inside the
    test's state directory on the host's filesystem) with
    SANDBOX_WORKSPACE_IMAGE_BYTES set: the daemon mounts its own btrfs
    image at both roots, so the 4th field is "/sandboxes/<id>/workspace"
    and nothing in mountinfo names the state directory (under gVisor the
    field is "/" for every mount, as above)."""
    d = daemon_factory({"SANDBOX_WORKSPACE_IMAGE_BYTES": str(512 * 1024 * 1024),
                        "SANDBOX_MIN_FREE_BYTES": "1048576"})
    layout = d.client().get("/healthz").body["worker"]["capabilities"]["host_layout"]
    assert layout["hidden"] is True and layout["workspace_image"] is True, layout
    sb = make_sandbox(d)
    lines = mountinfo_lines(sb)
    if lines is not None:
        if execution_backend(d) == GVISOR:
            assert_gvisor_mountinfo_hides_paths(lines)
        else:
            assert workspace_root_field(lines) == f"/sandboxes/{sb.id}/workspace", lines
        for l in lines:
            assert str(d.state) not in l, l


def test_roots_inside_the_host_filesystem_are_reported(daemon_factory):
    d = daemon_factory({"SANDBOX_WORKSPACE_IMAGE_BYTES": "0"})
    layout = d.client().get("/healthz").body["worker"]["capabilities"]["host_layout"]
    assert layout["hidden"] is False and layout["workspace_image"] is False, layout
    assert "SANDBOX_WORKSPACE_IMAGE_BYTES" in layout["note"], layout
    assert "mount a filesystem" in layout["note"], layout
