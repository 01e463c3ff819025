"""One sandbox filling the disk every sandbox shares (hardening issue,
attack 12): a sandbox allocated 8 GB in seconds and filled a shared
filesystem; the others then got I/O errors. SANDBOX_WORKSPACE_QUOTA_BYTES
and SANDBOX_WORKSPACE_QUOTA_INODES bound each sandbox's whole tree.

  * On btrfs (made here on a loop device) every sandbox root is a
    subvolume with a qgroup limit: a command writing past the quota fails
    (EDQUOT) at the quota, and a neighbour can still write; /healthz says
    resource_control.sandbox_disk_quota true, mode btrfs-qgroup.
  * Elsewhere (ext4 here) the filesystem cannot: /healthz says false, mode
    accounting, with the reason; the maintenance cycle counts usage and
    the file API refuses writes past the quota (507 SANDBOX_DISK_FULL),
    the inode quota too.
"""
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from sec_helpers import sh

MiB = 1024 * 1024


@pytest.fixture
def btrfs_root():
    work = Path(tempfile.mkdtemp(prefix="sandloom-btrfs-quota-"))
    os.chmod(work, 0o711)
    img, mnt = work / "fs.img", work / "mnt"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(512 * MiB)
    mkfs = shutil.which("mkfs.btrfs")
    if not mkfs:
        pytest.fail("mkfs.btrfs is missing (scripts/install-deps.sh installs btrfs-progs)",
                    pytrace=False)
    subprocess.run([mkfs, "-q", str(img)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True)
    os.chmod(mnt, 0o711)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(work, ignore_errors=True)


def rc(d):
    return d.client().get("/healthz").body["worker"]["capabilities"]["resource_control"]


def qgroup_stops_the_hog(d, make_sandbox, label):
    """On a daemon whose quota is a 32 MiB btrfs qgroup: a 128 MiB write of
    one sandbox stops at the quota, a neighbour can still write. The hog
    and the output of its write, for more checks."""
    r = rc(d)
    assert r["sandbox_disk_quota"] is True and r["sandbox_disk_quota_mode"] == "btrfs-qgroup", r
    hog, neighbour = make_sandbox(d, "hog"), make_sandbox(d, "neighbour")
    out = sh(hog, "dd if=/dev/urandom of=/workspace/big bs=1M count=128 2>&1; sync; "
                  "stat -c %s /workspace/big")
    written = int(out["stdout"].split()[-1])
    assert written <= 34 * MiB, f"a 32 MiB quota let {written / MiB:.0f} MiB through: {out}"
    print(f"\n{label}, 32 MiB quota: a 128 MiB write stopped at {written / MiB:.1f} MiB")
    # The neighbour is unaffected.
    mine = sh(neighbour, "dd if=/dev/urandom of=/workspace/mine bs=1M count=16 2>&1 && echo OK")
    assert mine["stdout"].strip().endswith("OK"), mine
    return hog, out


def test_btrfs_qgroups_stop_a_sandbox_at_its_quota(daemon_factory, make_sandbox, btrfs_root):
    d = daemon_factory({"SANDBOX_LOCAL_ROOT": str(btrfs_root / "sandboxes"),
                        "SANDBOX_WORKSPACE_QUOTA_BYTES": str(32 * MiB),
                        "SANDBOX_MIN_FREE_BYTES": str(MiB)})
    hog, out = qgroup_stops_the_hog(d, make_sandbox, "btrfs qgroup")
    assert "quota" in out["stdout"].lower(), out
    # Home counts too (the whole tree is one subvolume).
    out = sh(hog, "head -c 4M /dev/urandom > \"$HOME/more\" 2>&1 && sync || echo REFUSED; true")
    assert "REFUSED" in out["stdout"], out


def test_the_workspace_image_enforces_the_quota_on_any_host_filesystem(daemon_factory,
                                                                       make_sandbox):
    """The state directory is on the host's own filesystem (not btrfs):
    with SANDBOX_WORKSPACE_IMAGE_BYTES the daemon mounts a btrfs image of
    its own there, so the quota is a qgroup limit inside commands too."""
    d = daemon_factory({"SANDBOX_WORKSPACE_IMAGE_BYTES": str(512 * MiB),
                        "SANDBOX_WORKSPACE_QUOTA_BYTES": str(32 * MiB),
                        "SANDBOX_MIN_FREE_BYTES": str(MiB)})
    qgroup_stops_the_hog(d, make_sandbox, "workspace image")


def test_without_filesystem_quotas_the_api_refuses_past_the_quota(daemon_factory, make_sandbox):
    d = daemon_factory({"SANDBOX_WORKSPACE_IMAGE_BYTES": "0",
                        "SANDBOX_WORKSPACE_QUOTA_BYTES": str(16 * MiB),
                        "SANDBOX_WORKSPACE_QUOTA_INODES": "500",
                        "SANDBOX_MAINTENANCE_INTERVAL_SECONDS": "1"})
    r = rc(d)
    assert r["sandbox_disk_quota"] is False and r["sandbox_disk_quota_mode"] == "accounting", r
    assert "accounting" in r["sandbox_disk_quota_note"], r
    assert r["sandbox_quotas"]["disk_bytes"] == 16 * MiB, r
    sb = make_sandbox(d, "acct")
    assert sb.write("/workspace/ok.txt", "fits").status == 200
    sh(sb, "head -c 20M /dev/urandom > /workspace/big")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = sb.write("/workspace/more.txt", "x")
        if r.status != 200:
            break
        time.sleep(0.3)
    assert r.status == 507 and r.body["detail"]["code"] == "SANDBOX_DISK_FULL", r
    assert r.body["detail"]["message"] == "the sandbox's disk quota is exceeded", r
    # Freed: writes are accepted again after the next count.
    sh(sb, "rm /workspace/big")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = sb.write("/workspace/more.txt", "x")
        if r.status == 200:
            break
        time.sleep(0.3)
    assert r.status == 200, r
    # Inodes: 600 files against a quota of 500.
    sh(sb, "mkdir /workspace/many && cd /workspace/many && for i in $(seq 600); do : > f$i; done")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = sb.mkdir("/workspace/another")
        if r.status != 200:
            break
        sb.rm("/workspace/another")
        time.sleep(0.3)
    assert r.status == 507 and r.body["detail"]["code"] == "SANDBOX_DISK_FULL", r
