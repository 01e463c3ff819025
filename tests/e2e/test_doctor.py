"""sandloom-doctor: the isolation probe without the service (RUNTIME.md §14)."""

import json
import os
import subprocess
from pathlib import Path


def doctor(sandloomd_binary, *args, env=None):
    binary = Path(sandloomd_binary).parent / "sandloom-doctor"
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    full.update(env or {})
    return subprocess.run([str(binary), *args], capture_output=True, text=True, env=full,
                          timeout=120)


def test_doctor_reports_a_usable_host(sandloomd_binary):
    r = doctor(sandloomd_binary, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["schema_version"] == 1 and d["product"] == "Sandloom"
    assert d["status"] == "ready" and d["can_start"] is True and d["errors"] == []
    caps = d["capabilities"]
    assert caps["selected_level"] in caps["supported_levels"]
    assert caps["seccomp"] is True and caps["seccomp_policy"] == "sandloom-default-v2"
    assert "host" in caps["network_modes"]
    if os.geteuid() == 0:  # the private mode's parts (nftables, forwarding) need root
        assert caps["network_modes"] == ["host", "isolated", "private"], caps["network_modes"]
    assert caps["toolchains"]["python"]["status"] == "available", caps["toolchains"]
    assert set(caps["cgroups"]) >= {"version", "memory_quota", "pids_quota", "cpu_quota"}
    assert len(d["operator_guidance"]) == 4


def test_doctor_without_json_prints_a_status_line(sandloomd_binary):
    r = doctor(sandloomd_binary)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "Sandloom doctor: ready"


def test_doctor_blocked_policy_exits_2(sandloomd_binary):
    r = doctor(sandloomd_binary, "--json", env={"SANDBOX_ISOLATION_LEVEL": "bogus-level"})
    assert r.returncode == 2, (r.stdout, r.stderr)
    d = json.loads(r.stdout)
    assert d["status"] == "blocked" and d["can_start"] is False and d["errors"], d
    assert "bogus-level" not in r.stdout


def test_doctor_reports_the_quota_the_workspace_image_gives(sandloomd_binary, tmp_path):
    """With SANDBOX_WORKSPACE_IMAGE_BYTES the service mounts a btrfs image,
    so the quota is a qgroup limit even though the workspace root (here on
    the host's filesystem, not mounted) is not btrfs; without it, the same
    root answers accounting."""
    env = {"SANDBOX_LOCAL_ROOT": str(tmp_path / "sandboxes")}
    r = doctor(sandloomd_binary, "--json", env=env)
    # Every call checks the exit status first: a sanitizer's report at exit
    # (a leak) ends the process before stdout is flushed, so the status and
    # stderr say what happened where the empty stdout would not.
    assert r.returncode == 0, (r.returncode, r.stderr)
    plain = json.loads(r.stdout)
    assert plain["capabilities"]["disk_quota"]["mode"] == "accounting", plain
    assert plain["capabilities"]["disk_quota"]["workspace_image"] is False
    r = doctor(sandloomd_binary, "--json",
               env={**env, "SANDBOX_WORKSPACE_IMAGE_BYTES": str(1 << 30)})
    assert r.returncode == 0, (r.returncode, r.stderr)
    disk = json.loads(r.stdout)["capabilities"]["disk_quota"]
    assert disk["workspace_image"] is True and disk["mode"] == "btrfs-qgroup", disk
    assert disk["sandbox_disk_quota"] is True, disk
    # Nothing was made or mounted by asking.
    assert not (tmp_path / "sandboxes.img").exists()
