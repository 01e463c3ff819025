"""The full client walk of API.md §2.2 rule 6 / §3.5–§3.14, plus what the
host sees on disk (RUNTIME.md §9, API.md §5.2)."""

import base64
import hashlib
import os
import re
import socket
import stat

from sandloom_client import NAIVE_TS, assert_bad_arg, assert_error

OFFSET_TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$")

RESOLVE_FIELDS = {"sandbox_id", "worker_id", "worker_epoch", "worker_endpoint", "generation",
                  "sandbox_uid", "status", "storage_mode"}
ROUTE_FIELDS = {"sandbox_id", "workspace_scope_id", "worker_id", "worker_epoch", "generation",
                "sandbox_uid", "profile_id", "profile_hash", "status", "storage_mode",
                "last_active_at", "created_at", "updated_at", "generation_started_at",
                "generation_created_by", "ready_at", "last_released_generation",
                "last_released_at", "last_release_reason", "last_released_by",
                "last_lifetime_ms", "lifecycle_count", "total_lifetime_ms", "lifecycle_history"}
ROUTE_TIMESTAMPS = ("last_active_at", "created_at", "updated_at", "generation_started_at",
                    "ready_at", "last_released_at")
AUDIT_FIELDS = {"sandbox_id", "workspace_scope_id", "generation", "status", "first_created_at",
                "generation_started_at", "generation_created_by", "ready_at", "last_active_at",
                "active_duration_ms", "last_released_generation", "last_released_at",
                "last_release_reason", "last_released_by", "last_lifetime_ms",
                "lifecycle_count", "total_lifetime_ms", "history_retention_days",
                "history_max_entries", "history_max_bytes", "history"}
# The reference's seven fields plus ours, additive: termination_reason
# (null, "TIMED_OUT" or "OOM_KILLED").
EXEC_FIELDS = {"exec_id", "status", "exit_code", "stdout", "stderr", "duration_ms", "truncated",
               "termination_reason", "session_idle_stop_at", "idle_release_at"}
ALL_BYTES = bytes(range(256))


def check_route_record(r, sb, status, generation):
    assert r.status == 200, r
    rec = r.body
    missing = ROUTE_FIELDS - set(rec)
    assert not missing, f"route record lacks {sorted(missing)}: {rec!r}"
    assert rec["sandbox_id"] == sb.id
    assert rec["workspace_scope_id"] == sb.scope
    assert rec["status"] == status, rec
    assert rec["generation"] == generation, rec
    assert rec["sandbox_uid"] == sb.uid
    assert rec["profile_id"] == "coding-default"
    assert rec["storage_mode"] == "local"
    for key in ROUTE_TIMESTAMPS:
        value = rec[key]
        if value is not None:
            assert isinstance(value, str) and NAIVE_TS.match(value), \
                f"{key} must be a naive ISO-8601 timestamp without offset, got {value!r}"
    for key in ("last_active_at", "created_at", "updated_at", "generation_started_at"):
        assert rec[key] is not None, f"{key} is null: {rec!r}"
    assert isinstance(rec["lifecycle_history"], list)
    return rec


def check_exec(r, status, exit_code):
    assert r.status == 200, r
    assert set(r.body) == EXEC_FIELDS, f"exec response fields: {r.body!r}"
    assert r.body["status"] == status, r
    assert r.body["exit_code"] == exit_code, r
    return r.body


def test_lifecycle_walk(daemon, client, new_sandbox):
    sb = new_sandbox("walk")

    # -- resolve: a fresh route -------------------------------------------
    r = sb.resolve()
    assert r.status == 200, r
    assert set(r.body) == RESOLVE_FIELDS, f"resolve must answer exactly 8 fields: {r.body!r}"
    first = r.body
    assert first["sandbox_id"] == sb.id
    assert first["status"] == "ASSIGNED"
    assert first["generation"] == 1
    lo = int(daemon.env["SANDBOX_UID_START"])
    assert isinstance(first["sandbox_uid"], int) and lo <= first["sandbox_uid"] <= lo + 999, first
    assert first["storage_mode"] == "local"
    assert first["worker_id"] == daemon.worker_id
    assert first["worker_endpoint"] == f"http://127.0.0.1:{daemon.port}"
    hz = client.get("/healthz", auth=False).body
    assert first["worker_epoch"] == hz["worker"]["epoch"]
    uid = first["sandbox_uid"]

    # -- resolve is idempotent --------------------------------------------
    r = sb.resolve()
    assert r.status == 200, r
    assert r.body == first, "a second resolve of a healthy route must change nothing"

    # -- exec before connect is fenced by the worker -----------------------
    assert_error(sb.exec(["true"]), 409, "STALE_SANDBOX_GENERATION")

    # -- connect ----------------------------------------------------------
    sessions_before = client.get("/healthz", auth=False).body["worker"]["running_sessions"]
    r = sb.connect()
    assert r.status == 200, r
    assert r.body == {"sandbox_id": sb.id, "generation": 1, "uid": uid, "status": "READY"}, r
    sessions_live = client.get("/healthz", auth=False).body["worker"]["running_sessions"]
    assert sessions_live == sessions_before + 1, (sessions_before, sessions_live)
    r = sb.connect()
    assert r.status == 200 and r.body["generation"] == 1, "connect is idempotent"

    r = sb.audit()
    assert r.status == 200, r
    assert r.body["status"] == "READY" and r.body["history"] == []
    assert isinstance(r.body["active_duration_ms"], int) and r.body["active_duration_ms"] >= 0
    for key in ("first_created_at", "generation_started_at", "ready_at", "last_active_at"):
        assert isinstance(r.body[key], str) and OFFSET_TS.match(r.body[key]), \
            f"audit {key} must carry a UTC offset: {r.body[key]!r}"

    rec = check_route_record(sb.route(), sb, "READY", 1)
    assert rec["ready_at"] is not None
    assert rec["worker_id"] == daemon.worker_id
    assert rec["generation_created_by"] == f"workspace:{sb.scope}"
    assert rec["lifecycle_count"] == 1
    assert rec["total_lifetime_ms"] == 0
    assert rec["lifecycle_history"] == []

    # -- exec -------------------------------------------------------------
    r = sb.exec(["sh", "-lc", "echo hello from $(hostname); python3 -V"])
    body = check_exec(r, "SUCCEEDED", 0)
    assert "hello from " + socket.gethostname() in body["stdout"], body
    assert "Python 3." in body["stdout"], f"python3 -V prints to stdout: {body!r}"
    assert isinstance(body["duration_ms"], int) and body["duration_ms"] >= 0
    assert body["truncated"] is False
    assert sb.route().body["status"] == "READY", "route must return to READY after the exec"

    # -- directories --------------------------------------------------------
    r = sb.mkdir("/workspace/proj")
    assert r.status == 200, r
    assert r.body == {"status": "ok", "path": "/workspace/proj"}
    assert_bad_arg(sb.mkdir("/workspace/proj"), "path already exists")
    assert_bad_arg(sb.mkdir("/workspace/proj/deep/er"), "parent directory does not exist")
    r = sb.mkdir("/workspace/proj/deep/er", parents=True)
    assert r.status == 200, r
    r = sb.mkdir("/workspace/proj/deep/er", parents=True)
    assert r.status == 200, f"mkdir parents=true of an existing directory succeeds: {r!r}"

    # -- binary write (relative path form) ----------------------------------
    r = sb.write("proj/a.txt", ALL_BYTES)
    assert r.status == 200, r
    assert r.body == {"status": "ok", "path": "proj/a.txt"}, "write echoes the path as sent"

    r = sb.list("/workspace/proj")
    assert r.status == 200, r
    listing = r.body
    assert listing["path"] == "/workspace/proj"
    assert listing["total"] == 2 and listing["has_more"] is False, listing
    assert [e["name"] for e in listing["entries"]] == ["a.txt", "deep"], listing
    for e in listing["entries"]:
        assert set(e) == {"name", "path", "type", "size_bytes", "modified_at", "mode"}, e
        assert isinstance(e["size_bytes"], int) and isinstance(e["mode"], int), e
        assert isinstance(e["modified_at"], (int, float)) and not isinstance(e["modified_at"], bool)
    a, deep = listing["entries"]
    assert a["path"] == "/workspace/proj/a.txt" and a["type"] == "file"
    assert a["size_bytes"] == 256 and a["mode"] == 0o600 == 384, a
    assert deep["path"] == "/workspace/proj/deep" and deep["type"] == "directory"
    assert deep["mode"] == 0o700, deep

    r = sb.read("/workspace/proj/a.txt")
    assert r.status == 200, r
    assert r.body["path"] == "/workspace/proj/a.txt"
    assert base64.b64decode(r.body["content_base64"], validate=True) == ALL_BYTES

    # -- the sandbox sees the same bytes ------------------------------------
    body = check_exec(sb.exec(["sha256sum", "/workspace/proj/a.txt"]), "SUCCEEDED", 0)
    assert body["stdout"].split()[0] == hashlib.sha256(ALL_BYTES).hexdigest(), body

    # -- the file API sees what the sandbox writes --------------------------
    check_exec(sb.exec(["sh", "-c", "printf 'from-sandbox\\n' > /workspace/proj/b.txt"]),
               "SUCCEEDED", 0)
    assert sb.read_bytes("/workspace/proj/b.txt") == b"from-sandbox\n"

    # -- move ---------------------------------------------------------------
    r = sb.move("/workspace/proj/b.txt", "/workspace/proj/c.txt")
    assert r.status == 200, r
    assert r.body == {"status": "ok", "source": "/workspace/proj/b.txt",
                      "destination": "/workspace/proj/c.txt"}
    assert sb.read_bytes("/workspace/proj/c.txt") == b"from-sandbox\n"
    assert_bad_arg(sb.read("/workspace/proj/b.txt"), "path does not exist")

    # -- delete -------------------------------------------------------------
    assert_bad_arg(sb.rm("/workspace/proj"), "directory is not empty or is busy")
    r = sb.rm("/workspace/proj", recursive=True)
    assert r.status == 200, r
    assert r.body == {"status": "ok", "path": "/workspace/proj"}
    r = sb.list("/workspace")
    assert r.status == 200, r
    assert "proj" not in [e["name"] for e in r.body["entries"]], r

    # -- release ------------------------------------------------------------
    r = sb.exec(["sh", "-c", "echo h > /home/sandbox/h && echo c > /cache/c && echo e > /envs/e"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = sb.release()
    assert r.status == 200, r
    assert r.body == {"status": "RELEASED"}
    assert not (daemon.sandbox_root / sb.id / "workspace" / "proj").exists()
    assert not (daemon.sandbox_root / sb.id / "cache" / "c").exists(), \
        "release destroys the sandbox directories"
    sessions_after = client.get("/healthz", auth=False).body["worker"]["running_sessions"]
    assert sessions_after == sessions_before, (sessions_before, sessions_after)

    rec = check_route_record(sb.route(), sb, "RELEASED", 2)
    assert rec["last_release_reason"] == "CLIENT_RELEASE", rec
    assert rec["last_released_generation"] == 1, rec
    assert rec["last_released_by"] == f"workspace:{sb.scope}", rec
    assert rec["last_released_at"] is not None
    assert len(rec["lifecycle_history"]) == 1, rec
    entry = rec["lifecycle_history"][0]
    assert entry["release_reason"] == "CLIENT_RELEASE" and entry["generation"] == 1, entry
    assert OFFSET_TS.match(entry["released_at"]), f"history timestamps end in Z: {entry!r}"
    assert rec["last_lifetime_ms"] == entry["lifetime_ms"], rec
    assert rec["total_lifetime_ms"] == entry["lifetime_ms"], rec

    r = sb.audit()
    assert r.status == 200, r
    audit = r.body
    missing = AUDIT_FIELDS - set(audit)
    assert not missing, f"audit lacks {sorted(missing)}"
    assert audit["sandbox_id"] == sb.id and audit["workspace_scope_id"] == sb.scope
    assert audit["status"] == "RELEASED" and audit["generation"] == 2
    assert audit["active_duration_ms"] is None, "active_duration_ms is null when RELEASED"
    assert audit["last_release_reason"] == "CLIENT_RELEASE"
    assert (audit["history_retention_days"], audit["history_max_entries"],
            audit["history_max_bytes"]) == (15, 256, 65536)
    assert len(audit["history"]) == 1, audit
    h = audit["history"][0]
    assert h["release_reason"] == "CLIENT_RELEASE", h
    assert h["generation"] == 1, h
    assert h["released_by"] == f"workspace:{sb.scope}", h
    assert isinstance(h["lifetime_ms"], int) and h["lifetime_ms"] >= 0, h

    # -- release again is a no-op -----------------------------------------
    r = sb.release()
    assert r.status == 200 and r.body == {"status": "RELEASED"}, r
    assert sb.route().body["generation"] == 2, "a second release must not bump the generation"

    # -- resolve again: new generation, same uid, empty workspace ----------
    r = sb.resolve()
    assert r.status == 200, r
    assert r.body["generation"] == 3, r
    assert r.body["sandbox_uid"] == uid, "the uid is kept for the life of the id"
    assert r.body["status"] == "ASSIGNED", r
    r = sb.connect()
    assert r.status == 200, r
    assert r.body == {"sandbox_id": sb.id, "generation": 3, "uid": uid, "status": "READY"}
    r = sb.list("/workspace")
    assert r.status == 200, r
    assert r.body["entries"] == [] and r.body["total"] == 0, f"workspace must be empty: {r!r}"
    # Empty but for what the service makes before a command: the login
    # profile and the python toolchain's environment (made anew here).
    r = sb.exec(["sh", "-c", "ls -A /cache /envs; ls -A /home/sandbox | grep -vx .profile; "
                             "ls -A /envs/python-venv/lib/python3*/site-packages; true"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    assert r.body["stdout"].split() == ["/cache:", "/envs:", "python-venv"], \
        f"a new generation starts with empty directories: {r.body['stdout']!r}"
    r = sb.audit()
    assert r.body["lifecycle_count"] == 2 and len(r.body["history"]) == 1, r


def _owner_mode(path):
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode)


def test_host_side_ownership_and_modes(daemon, ready_sandbox):
    sb = ready_sandbox
    uid = sb.uid
    root = daemon.sandbox_root / sb.id
    assert root.is_dir() and not root.is_symlink(), f"sandbox root missing on the host: {root}"

    owner_uid, owner_gid, mode, is_dir = _owner_mode(root)
    assert (owner_uid, owner_gid, mode) == (uid, uid, 0o700), \
        f"sandbox root must be {uid}:{uid} 0700, is {owner_uid}:{owner_gid} {oct(mode)}"
    for sub in ("workspace", "home", "cache", "envs", "logs"):
        p = root / sub
        assert p.is_dir() and not p.is_symlink(), f"missing {sub}/ under the sandbox root"
        owner_uid, owner_gid, mode, _ = _owner_mode(p)
        assert (owner_uid, owner_gid, mode) == (uid, uid, 0o700), \
            f"{sub}/ must be {uid}:{uid} 0700, is {owner_uid}:{owner_gid} {oct(mode)}"

    # File API write: parents created, everything owned by the uid.
    r = sb.write("/workspace/d1/d2/f.bin", b"\x00payload\xff")
    assert r.status == 200, r
    f = root / "workspace" / "d1" / "d2" / "f.bin"
    assert f.read_bytes() == b"\x00payload\xff"
    assert _owner_mode(f)[:3] == (uid, uid, 0o600), f"written file: {_owner_mode(f)}"
    for d in (root / "workspace" / "d1", root / "workspace" / "d1" / "d2"):
        assert _owner_mode(d)[:3] == (uid, uid, 0o700), f"{d.name}: {_owner_mode(d)}"
    assert _owner_mode(root / "workspace")[:3] == (uid, uid, 0o700)

    # Replacing a file with another mode yields 0600 again.
    r = sb.exec(["chmod", "0644", "/workspace/d1/d2/f.bin"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    assert _owner_mode(f)[2] == 0o644
    r = sb.write("/workspace/d1/d2/f.bin", b"v2")
    assert r.status == 200, r
    assert f.read_bytes() == b"v2"
    assert _owner_mode(f)[:3] == (uid, uid, 0o600), f"replaced file: {_owner_mode(f)}"

    # A file created from inside the sandbox is owned by the sandbox uid on
    # the host (uid 0 inside is mapped to the per-sandbox uid, never host root).
    r = sb.exec(["sh", "-c", "echo x > /workspace/from-exec && mkdir /workspace/dir-exec"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    assert _owner_mode(root / "workspace" / "from-exec")[0] == uid
    assert _owner_mode(root / "workspace" / "dir-exec")[0] == uid
    # No temporary write files left behind.
    leftovers = [n for n in os.listdir(root / "workspace" / "d1" / "d2")
                 if n.startswith(".sandbox-write-")]
    assert leftovers == [], leftovers
