"""GET /healthz status document: API.md §3.2, RUNTIME.md §1, §8, §10."""

import json
import os
import re

import pytest

BASIC_FEATURES = {"resource_limits", "no_new_privileges", "uid_separation", "user_namespace",
                  "mount_namespace", "ipc_namespace", "uts_namespace", "private_tmp",
                  "readonly_system_mounts"}
RECLAMATION_DEFAULTS = {
    "maintenance_interval_seconds": 60.0,
    "heartbeat_interval_seconds": 10.0,
    "heartbeat_ttl_seconds": 30,
    "idle_ttl_seconds": 1800,
    "orphan_running_grace_seconds": 60,
    "orphan_release_grace_seconds": 300,
    "suspended_retention_seconds": 2592000,
    "orphan_dormant_dir_ttl_seconds": 86400,
}


@pytest.fixture(scope="module")
def hz(daemon):
    r = daemon.client().get("/healthz", auth=False)
    assert r.status == 200 and r.is_json and isinstance(r.body, dict), r
    return r.body


def test_top_level(hz):
    assert hz["status"] == "ok", hz
    assert hz["mode"] == "agent-sandbox"
    assert isinstance(hz["logging"], dict) and isinstance(hz["logging"].get("enabled"), bool)
    assert "redacted_validation_v1" in hz["api_capabilities"]
    assert hz["env_type"] == "LOCAL"


def test_db(hz, daemon):
    db = hz["db"]
    assert db["source"] == "url", db
    if daemon.pg_database:
        from conftest import DB_KIND
        assert db["backend"] == DB_KIND and db["database"] == daemon.pg_database, db
        return
    assert db["backend"] == "sqlite", db
    # The file's name only: /healthz needs no token, and where the state
    # lives is not every caller's business (the hardening issue, 17).
    assert db["database"] == daemon.db_path.name, db
    assert "/" not in db["database"] and str(daemon.state) not in json.dumps(hz), db


def test_worker_identity(hz, daemon):
    w = hz["worker"]
    assert w["id"] == f"127.0.0.1-{daemon.port}"
    assert re.fullmatch(r"[0-9a-f]{32}", w["epoch"]), w["epoch"]
    assert w["endpoint"] == f"http://127.0.0.1:{daemon.port}"
    assert w["storage_mode"] == "local"
    assert w["profile_id"] == "coding-default"
    assert isinstance(w["profile_hash"], str) and w["profile_hash"]
    for key in ("running_sessions", "running_execs"):
        assert isinstance(w[key], int) and w[key] >= 0, (key, w[key])
    assert isinstance(w["orphan_reaper"], dict)


def test_epoch_is_stable_within_a_process(hz, daemon):
    again = daemon.client().get("/healthz", auth=False).body
    assert again["worker"]["epoch"] == hz["worker"]["epoch"]


def test_capabilities(hz):
    cap = hz["worker"]["capabilities"]
    assert cap, "capabilities must be filled once the startup probe finished"
    level = cap["selected_level"]
    assert level in ("basic", "standard", "strict"), level
    feats = cap["features"]
    assert isinstance(feats, list) and all(isinstance(f, str) for f in feats), feats
    assert feats == sorted(feats), "features must be sorted"
    assert BASIC_FEATURES <= set(feats), f"missing basic features: {BASIC_FEATURES - set(feats)}"
    if level in ("standard", "strict"):
        assert {"pid_namespace", "private_procfs"} <= set(feats), feats
    if level == "strict":
        assert "cgroup_namespace" in feats, feats
    assert level in cap["supported_levels"], cap["supported_levels"]
    assert cap["pid_namespace"] == ("pid_namespace" in feats)
    assert cap["cgroup_namespace"] == ("cgroup_namespace" in feats)
    assert cap["profile_id"] == "coding-default"
    assert cap["profile_hash"] == hz["worker"]["profile_hash"]
    # SANDBOX_NETWORK_MODE defaults to private (ours; the reference's is host).
    assert cap["network_namespace"] is True and cap["egress_address_filter"] is True
    assert cap["network_mode"] == "private"
    assert cap["toolchains"]["configured"] == ["python", "node"]


def test_the_execution_backend_is_reported(hz):
    """The boundary, its version and its platform; the native one's version
    is the kernel it runs on, and its hash carries no backend suffix."""
    backend = hz["worker"]["capabilities"]["execution_backend"]
    assert backend == {"name": "native", "version": os.uname().release,
                       "platform": "namespaces"}, backend
    assert "-native" not in hz["worker"]["profile_hash"]


def test_reclamation_defaults(hz):
    rec = hz["worker"]["reclamation"]
    assert set(rec) == set(RECLAMATION_DEFAULTS), rec
    for key, value in RECLAMATION_DEFAULTS.items():
        assert rec[key] == value, f"{key}: {rec[key]!r} != {value!r}"
        assert not isinstance(rec[key], bool)


def test_disk(hz):
    disk = hz["disk"]
    assert set(disk) == {"available", "total_bytes", "used_bytes", "free_bytes", "used_percent"}
    assert isinstance(disk["available"], bool)
    for key in ("total_bytes", "used_bytes", "free_bytes", "used_percent"):
        assert isinstance(disk[key], int) and disk[key] >= 0, (key, disk[key])
    assert disk["total_bytes"] > 0
    assert disk["used_percent"] == disk["used_bytes"] * 100 // disk["total_bytes"], disk
    assert 0 <= disk["used_percent"] <= 100


def test_the_host_mode_keeps_the_reference_capabilities(daemon_factory):
    caps = daemon_factory({"SANDBOX_NETWORK_MODE": "host"}).client().get(
        "/healthz").body["worker"]["capabilities"]
    assert caps["network_namespace"] is False and caps["egress_address_filter"] is False
    assert caps["network_mode"] == "host" and "private_network" not in caps
    assert caps["profile_hash"].endswith("-net-host"), caps["profile_hash"]


def test_nested_user_namespaces_are_disabled_and_hash_says_so(client):
    caps = client.get("/healthz").body["worker"]["capabilities"]
    assert caps["disable_nested_userns"] is True
    level = caps["selected_level"]
    assert caps["profile_hash"] == f"bubblewrap-0.11.2-generic-v12-{level}-net-private", caps


def test_database_is_private(daemon, client):
    """The database stores command lines and environments: no one but the
    service may read it (0600), whatever the umask it was started with."""
    import os
    import stat
    assert client.get("/healthz").status == 200
    for path in daemon.state.glob("sandloom.db*"):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode & 0o077 == 0, f"{path.name} has mode {oct(mode)}"


def test_seccomp_is_reported(client):
    caps = client.get("/healthz").body["worker"]["capabilities"]
    assert caps["seccomp"] is True and caps["seccomp_policy"] == "sandloom-default-v2", caps


def test_toolchain_checks_are_measured(client):
    """Each enabled toolchain (python,node by default, plus typescript) was
    launched in a real sandbox at startup (RUNTIME.md §8.2)."""
    tc = client.get("/healthz").body["worker"]["capabilities"]["toolchains"]
    assert tc["configured"] == ["python", "node"], tc
    assert set(tc["checks"]) == {"python", "node", "typescript"}, tc
    py = tc["checks"]["python"]
    assert py == {"status": "available", "check": "launch", "exit_code": 0, "detail": "42"}, py
    for name, check in tc["checks"].items():
        assert check["check"] == "launch"
        assert check["status"] in ("available", "missing", "failed", "timed_out"), check
        if check["status"] == "missing":
            assert check["exit_code"] == 127 and check["detail"].startswith(
                "sandbox-tool-missing:"), check
    assert tc["available"] == [n for n, c in tc["checks"].items() if c["status"] == "available"]


def test_feature_additions_are_negotiated(daemon_factory):
    """basic + required pid_namespace + optional cgroup_namespace: both are
    probed and added on top of the level (RUNTIME.md §3.1 step 5), the
    profile is 'custom' and the hash names the additions (§3.2); the
    sandbox really gets a private /proc."""
    d = daemon_factory({"SANDBOX_ISOLATION_LEVEL": "basic", "SANDBOX_NETWORK_MODE": "host",
                        "SANDBOX_ISOLATION_REQUIRED_FEATURES": "pid_namespace",
                        "SANDBOX_ISOLATION_OPTIONAL_FEATURES": "cgroup_namespace"})
    caps = d.client().get("/healthz").body["worker"]["capabilities"]
    assert caps["selected_level"] == "basic", caps
    assert caps["profile_mode"] == "custom"
    assert caps["feature_policy"]["required"] == ["pid_namespace"]
    assert caps["feature_policy"]["optional"] == ["cgroup_namespace"]
    assert caps["feature_policy"]["enabled_additions"] == ["cgroup_namespace", "pid_namespace"]
    assert caps["feature_policy"]["skipped_optional"] == {}
    assert {"pid_namespace", "private_procfs", "cgroup_namespace"} <= set(caps["features"])
    assert caps["features"] == sorted(caps["features"])
    assert caps["pid_namespace"] is True and caps["cgroup_namespace"] is True
    assert caps["profile_hash"] == ("bubblewrap-0.11.2-generic-v12-basic-net-host-with-"
                                    "cgroup_namespace-pid_namespace"), caps["profile_hash"]
    import uuid
    from sandloom_client import Sandbox
    sb = Sandbox(d.client(), "feat-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    r = sb.exec(["sh", "-c", "ls /proc | grep -c '^[0-9]'"])
    assert r.status == 200 and int(r.body["stdout"]) <= 4, r
