"""Templates that cost the host more disk than they hold (hardening issue,
attack 14): a 1000 MB sparse file (4 KB on disk) became 1001 MB of real
blocks in the template root, and unpublishing left the tree on disk.
"""
import os
import uuid
from pathlib import Path

from sec_helpers import sh

TEMPLATES = "/api/v1/templates"
MiB = 1024 * 1024


def disk_usage(path):
    total = 0
    for root, dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def test_sparse_files_stay_sparse_and_unpublished_trees_go(daemon, make_sandbox):
    sb = make_sandbox(daemon)
    name = "sparse-" + uuid.uuid4().hex[:8]
    body = sh(sb, "mkdir -p /workspace/tpl && truncate -s 1000M /workspace/tpl/hole && "
                  "echo data > /workspace/tpl/small && du -k /workspace/tpl/hole")
    assert body["exit_code"] == 0, body
    r = sb.c.post(f"{sb.path}/templates", json={"generation": sb.generation, "name": name,
                                                "source_path": "/workspace/tpl"})
    assert r.status == 200, r
    digest = r.body["digest"]
    tree = Path(daemon.sandbox_root).parent / "templates" / name / f"sha256-{digest[7:]}"
    assert (tree / "hole").stat().st_size == 1000 * MiB
    used = disk_usage(tree)
    assert used < 4 * MiB, f"the template tree takes {used / MiB:.0f} MiB on disk"

    # Attached and read through a sandbox: the hole reads as zeros.
    user = make_sandbox(daemon)
    r = user.c.put(f"{user.path}/templates",
                   json={"generation": user.generation, "templates": [name]})
    assert r.status == 200, r
    out = sh(user, f"stat -c %s /envs/{name}/hole; head -c 4096 /envs/{name}/hole | tr -d '\\0' | wc -c; "
                   f"cat /envs/{name}/small")
    assert out["stdout"] == f"{1000 * MiB}\n0\ndata\n", out

    # Unpublished while mounted: the mounted tree stays; once nothing
    # mounts it, the maintenance sweep would take it (grace: ten minutes).
    # Unpublished with nothing mounting it: the tree and its archive go now.
    assert user.release().status == 200
    r = daemon.client().delete(f"{TEMPLATES}/{name}")
    assert r.status == 200 and r.body["status"] == "REMOVED", r
    assert not tree.exists(), "the unpublished tree is still on disk"
    archives = Path(daemon.sandbox_root).parent / "templates" / ".archives" / name
    assert not archives.exists(), "the unpublished template's archive is still on disk"
