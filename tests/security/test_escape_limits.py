"""Resource exhaustion through the filesystem: per-file size limit, the
size-limited private /tmp and /dev/shm, and the release purge of a
workspace full of planted symlinks."""

import os
import secrets
import shutil
import tempfile
from pathlib import Path

from sec_helpers import file_fingerprint, probe, sh, wait_for

MiB = 1024 * 1024


# ---------------------------------------------------------------------------
# 14
def test_file_size_limit_holds(daemon_factory, make_sandbox):
    """Attempt: with SANDBOX_MAX_FILE_SIZE_BYTES=1048576, `head -c 2000000
    /dev/zero > /workspace/big`, then from python (SIGXFSZ ignored) write
    2 MB, ftruncate to 2 MB and write at offset 2 MB, in /workspace,
    /home/sandbox and /tmp.
    Must hold: head is killed by SIGXFSZ (exit 153) or fails with EFBIG; the
    python writes stop at 1 MiB with EFBIG; on the host every file is at
    most 1 MiB."""
    d = daemon_factory({"SANDBOX_MAX_FILE_SIZE_BYTES": str(MiB)})
    sb = make_sandbox(d, "fsize")
    b = sh(sb, "head -c 2000000 /dev/zero > /workspace/big; echo rc=$?")
    rc = int(b["stdout"].strip().rsplit("rc=", 1)[1])
    assert rc != 0, f"writing 2 MB past the 1 MiB limit succeeded: {b}"
    assert rc == 128 + 25 or "File too large" in b["stderr"], b
    R, _ = probe(sb, r'''
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        for d in ("/workspace", "/home/sandbox", "/tmp"):
            p = d + "/big2"
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            written, err = 0, None
            chunk = b"\0" * 65536
            while written < 2000000:
                try:
                    written += os.write(fd, chunk)
                except OSError as e:
                    err = errno.errorcode.get(e.errno)
                    break
            R[p] = {"written": written, "err": err,
                    "ftruncate": oserr(os.ftruncate, fd, 2000000),
                    "pwrite": oserr(os.pwrite, fd, b"x", 2000000),
                    "size": os.fstat(fd).st_size}
            os.close(fd)
        ''')
    for p, v in R.items():
        assert v["err"] == "EFBIG" and v["written"] <= MiB, f"{p}: {v}"
        assert v["ftruncate"] == "EFBIG" and v["pwrite"] == "EFBIG", f"{p}: {v}"
        assert v["size"] <= MiB, f"{p}: {v}"
    root = d.sandbox_root / sb.id
    for rel in ("workspace/big", "workspace/big2", "home/big2"):
        assert (root / rel).stat().st_size <= MiB, f"host {rel} is {(root / rel).stat().st_size} bytes"


# ---------------------------------------------------------------------------
# 15
def test_tmp_and_shm_are_size_limited(daemon_factory, make_sandbox):
    """Attempt: with SANDBOX_TMPFS_BYTES=4194304, write 8 MiB to /tmp (with
    head and in 64 KiB chunks from python) and 8 MiB to /dev/shm.
    Must hold: the writes stop with ENOSPC at about 4 MiB (/dev/shm is
    capped at min(SANDBOX_TMPFS_BYTES, 64 MiB)); the host's /tmp and
    /dev/shm keep their free space (within 2 MiB of noise) and gain no file
    from the sandbox; the daemon still answers."""
    d = daemon_factory({"SANDBOX_TMPFS_BYTES": str(4 * MiB)})
    sb = make_sandbox(d, "tmpfs")
    tag = "sandloom-sec-fill-" + secrets.token_hex(6)

    def free(path):
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize

    host_free = {p: free(p) for p in ("/tmp", "/dev/shm") if os.path.isdir(p)}
    b = sh(sb, f"head -c {8 * MiB} /dev/zero > /tmp/{tag}; echo rc=$?")
    assert "rc=0" not in b["stdout"] and "No space left" in b["stderr"], b
    R, _ = probe(sb, r'''
        for d in ("/tmp", "/dev/shm"):
            p = "%s/%s-py" % (d, P["tag"])
            written, err = 0, None
            with open(p, "wb", buffering=0) as f:
                while written < 8 << 20:
                    try:
                        written += f.write(b"\1" * 65536)
                    except OSError as e:
                        err = errno.errorcode.get(e.errno)
                        break
            st = os.statvfs(d)
            R[d] = {"written": written, "err": err, "size_total": st.f_blocks * st.f_frsize}
        ''', {"tag": tag})
    for dname, v in R.items():
        assert v["err"] == "ENOSPC", f"{dname}: {v}"
        assert v["written"] <= 4 * MiB and v["size_total"] <= 4 * MiB, f"{dname}: {v}"
    for p, before in host_free.items():
        assert free(p) >= before - 2 * MiB, f"host {p} lost space: {before} -> {free(p)}"
        assert not any(n.startswith(tag) for n in os.listdir(p)), f"sandbox file in host {p}"
    r = d.client().get("/health", auth=False)
    assert r.status == 200 and r.raw.strip() == b"ok", r


# ---------------------------------------------------------------------------
# 21e
def test_release_purge_does_not_follow_planted_symlinks(daemon_factory, make_sandbox):
    """Attempt: before release, fill every persistent directory (workspace,
    home, cache, envs) with symlinks to a host canary directory and file,
    nested under deep directories and names like `..x`; release, and let
    the maintenance loop (SANDBOX_MAINTENANCE_INTERVAL_SECONDS=1) purge the
    trash with its recursive delete running as root.
    Must hold: the purge removes the sandbox's tree and only it: the canary
    directory and file keep their content, owner, mode and mtime."""
    cdir = Path(tempfile.mkdtemp(prefix="sandloom-sec-canary-"))
    try:
        os.chmod(cdir, 0o755)
        cfile = cdir / "keep.txt"
        cfile.write_bytes(b"canary\n")
        (cdir / "sub").mkdir()
        (cdir / "sub" / "deep.txt").write_bytes(b"deep\n")
        fps = {p: file_fingerprint(p) for p in (cfile, cdir / "sub" / "deep.txt")}
        d = daemon_factory({"SANDBOX_MAINTENANCE_INTERVAL_SECONDS": "1"})
        sb = make_sandbox(d, "purge")
        script = "set -e; for top in /workspace /home/sandbox /cache /envs; do " \
                 "mkdir -p $top/a/b/c/d $top/..x; " \
                 f"ln -s {cdir} $top/dir-link; ln -s {cfile} $top/file-link; " \
                 f"ln -s {cdir} $top/a/b/c/d/dir-link; ln -s {cdir}/sub $top/..x/sub; " \
                 f"done; echo planted"
        b = sh(sb, script)
        assert b["stdout"] == "planted\n", b
        root = d.sandbox_root / sb.id
        assert os.path.islink(root / "workspace" / "dir-link")
        assert sb.release().status == 200
        trash = d.sandbox_root / ".trash"
        emptied = wait_for(lambda: not root.exists() and (not trash.exists() or
                                                            not os.listdir(trash)), 10)
        assert sorted(os.listdir(cdir)) == ["keep.txt", "sub"], os.listdir(cdir)
        assert sorted(os.listdir(cdir / "sub")) == ["deep.txt"]
        for p, fp in fps.items():
            assert file_fingerprint(p) == fp, f"{p} touched by the purge"
        assert emptied, f"the trash was not purged: {os.listdir(trash) if trash.exists() else None}"
    finally:
        shutil.rmtree(cdir, ignore_errors=True)
