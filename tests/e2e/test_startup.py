"""Startup refusals (CONFIG.md §4, FLEET.md §2.4) and the generated token
outside prod (COMPAT.md §2)."""

import os
import re
import shutil
import sqlite3
import tempfile
import uuid
from pathlib import Path

import pytest

from sandloom_client import API, assert_error

BAD_VALUE = "bogusQ7xZ3kP"

REFUSALS = [
    # (env overrides, variable(s) one of which must be named on stderr,
    #  value that must not be echoed)
    ({"SANDBOX_PORT": "abc"}, "SANDBOX_PORT", None),
    ({"SANDBOX_PORT": BAD_VALUE}, "SANDBOX_PORT", BAD_VALUE),
    ({"SANDBOX_PORT": "70000"}, "SANDBOX_PORT", None),
    ({"SANDBOX_WORKER_CAPACITY": "0"}, "SANDBOX_WORKER_CAPACITY", None),
    ({"SANDBOX_TOOLCHAINS": "cobol"}, "SANDBOX_TOOLCHAINS", None),
    ({"SANDBOX_ISOLATION_LEVEL": BAD_VALUE}, "SANDBOX_ISOLATION_LEVEL", BAD_VALUE),
    ({"SANDBOX_ENVIRONMENT": BAD_VALUE}, "SANDBOX_ENVIRONMENT", BAD_VALUE),
    ({"SANDBOX_UID_START": "500", "SANDBOX_UID_END": "400"},
     ("SANDBOX_UID_START", "SANDBOX_UID_END"), None),
    # Our quota variables are validated like the reference's.
    ({"SANDBOX_MEMORY_LIMIT_BYTES": "-1"}, "SANDBOX_MEMORY_LIMIT_BYTES", None),
    ({"SANDBOX_PIDS_LIMIT": BAD_VALUE}, "SANDBOX_PIDS_LIMIT", BAD_VALUE),
    ({"SANDBOX_CPU_LIMIT": "-0.5"}, "SANDBOX_CPU_LIMIT", None),
]


@pytest.mark.parametrize("env,variable,secret", REFUSALS,
                         ids=[f"{next(iter(e))}={list(e.values())[0][:8]}" for e, _, _ in REFUSALS])
def test_bad_setting_refuses_startup(daemon_factory, env, variable, secret):
    rc, stderr = daemon_factory(env, expect_exit=True)
    assert rc == 3, f"expected exit status 3, got {rc}; stderr:\n{stderr}"
    names = (variable,) if isinstance(variable, str) else variable
    assert any(n in stderr for n in names), f"stderr must name {' or '.join(names)}:\n{stderr}"
    if secret:
        assert secret not in stderr, f"stderr echoes the input value:\n{stderr}"


def test_empty_token_refused_in_prod(daemon_factory):
    # A non-loopback advertise host, so the token is the only preflight error.
    rc, stderr = daemon_factory({"SANDBOX_ENVIRONMENT": "prod",
                                 "SANDBOX_ADVERTISE_HOST": "sandloom-e2e.invalid"},
                                token=None, expect_exit=True)
    assert rc == 3, f"expected exit status 3, got {rc}; stderr:\n{stderr}"
    assert "SANDBOX_INTERNAL_TOKEN" in stderr, stderr


def _columns(db, table):
    with sqlite3.connect(db) as con:
        return [row[1] for row in con.execute(f"PRAGMA table_info({table})")]


@pytest.mark.sqlite_file
def test_schema_drift_missing_column_refuses_startup(daemon_factory):
    first = daemon_factory()
    # Leave a route behind so the table has data.
    c = first.client()
    r = c.post(f"{API}/resolve", json={"sandbox_id": "drift-1", "workspace_scope_id": "s"})
    assert r.status == 200, r
    first.stop()
    db = first.db_path
    assert db.is_file(), f"no SQLite database at {db}"
    assert "ready_at" in _columns(db, "agent_sandbox_route")
    with sqlite3.connect(db) as con:
        con.execute("ALTER TABLE agent_sandbox_route DROP COLUMN ready_at")
    assert "ready_at" not in _columns(db, "agent_sandbox_route")

    rc, stderr = daemon_factory(state_dir=first.state, expect_exit=True)
    assert rc == 3, f"expected exit status 3 on schema drift, got {rc}; stderr:\n{stderr}"
    assert "agent_sandbox_route.ready_at" in stderr, stderr
    # Auto-DDL never ALTERs: the column is still missing.
    assert "ready_at" not in _columns(db, "agent_sandbox_route")


@pytest.mark.sqlite_file
def test_schema_drift_missing_table_refuses_startup(daemon_factory):
    first = daemon_factory()
    first.stop()
    with sqlite3.connect(first.db_path) as con:
        con.execute("ALTER TABLE agent_sandbox_exec RENAME TO renamed_exec_table")
    rc, stderr = daemon_factory(state_dir=first.state, expect_exit=True,
                                env={"SANDBOX_DATABASE_AUTO_DDL": "false"})
    assert rc == 3, f"expected exit status 3, got {rc}; stderr:\n{stderr}"
    assert "agent_sandbox_exec" in stderr, stderr


@pytest.mark.sqlite_file
def test_schema_extra_column_only_warns(daemon_factory):
    first = daemon_factory()
    c = first.client()
    r = c.post(f"{API}/resolve", json={"sandbox_id": "extra-1", "workspace_scope_id": "s"})
    assert r.status == 200, r
    first.stop()
    with sqlite3.connect(first.db_path) as con:
        con.execute("ALTER TABLE agent_sandbox_route ADD COLUMN rollback_extra TEXT")
    second = daemon_factory(state_dir=first.state)
    c = second.client()
    # The old route survives and new routes can be written.
    r = c.get(f"{API}/extra-1")
    assert r.status == 200 and r.body["sandbox_id"] == "extra-1", r
    r = c.post(f"{API}/resolve", json={"sandbox_id": "extra-2", "workspace_scope_id": "s"})
    assert r.status == 200 and r.body["generation"] == 1, r
    # Restart = new epoch: the old route is reassigned on resolve (WORKER_REASSIGNED).
    r = c.post(f"{API}/resolve", json={"sandbox_id": "extra-1", "workspace_scope_id": "s"})
    assert r.status == 200 and r.body["generation"] == 2, r


TOKEN_RE = re.compile(r"(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])")


def test_generated_token_is_printed_once_and_works(daemon_factory):
    d = daemon_factory(token=None)
    stderr = d.stderr()
    candidates = []
    for line in stderr.splitlines():
        if "token" in line.lower():
            candidates += TOKEN_RE.findall(line)
    assert len(set(candidates)) == 1, \
        f"expected exactly one 43-char URL-safe token on a 'token' line of stderr:\n{stderr}"
    token = candidates[0]
    assert stderr.count(token) == 1, "the generated token must be printed exactly once"
    assert token not in d.stdout()
    startup_log = (d.state / "startup.log")
    if startup_log.exists():
        assert token not in startup_log.read_text(errors="replace"), \
            "the token must not be written to the startup log"

    good = d.client(token=token)
    assert_error(good.get(f"{API}/nosuch-{uuid.uuid4().hex}"), 404, "SANDBOX_NOT_FOUND")
    r = good.post(f"{API}/resolve", json={"sandbox_id": "tok-1", "workspace_scope_id": "s"})
    assert r.status == 200, r
    assert_error(d.client(token="").get(f"{API}/tok-1"), 401, "SANDBOX_UNAUTHORIZED")
    assert_error(d.client(token=token[:-1]).get(f"{API}/tok-1"), 401, "SANDBOX_UNAUTHORIZED")


def test_startup_log_marker(daemon_factory):
    d = daemon_factory()
    text = (d.state / "startup.log").read_text()
    assert f"agent-sandbox,status=success,ready,worker_id=127.0.0.1-{d.port},port={d.port}" \
        in text, text


def test_unreachable_workspace_root_refuses_startup(daemon_factory, tmp_path):
    """Sandbox setup runs as the sandbox's uid, so a workspace root below a
    directory that others cannot search is refused at startup, naming it."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o711)
    rc, stderr = daemon_factory({"SANDBOX_LOCAL_ROOT": str(locked / "sandboxes")},
                                expect_exit=True)
    assert rc == 3, stderr
    assert str(locked) in stderr and "o+x" in stderr, stderr


def test_a_generated_token_is_kept_for_the_next_start(daemon_factory):
    """No SANDBOX_INTERNAL_TOKEN: the first start saves the token it drew in
    <parent of the workspace root>/internal-token (0600) and every later
    start uses it, so the console and MCP clients keep working."""
    first = daemon_factory(token=None)
    token_file = first.state / "internal-token"
    st = token_file.stat()
    assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid(), oct(st.st_mode)
    token = token_file.read_text().strip()
    assert len(token) == 43 and token in first.stderr(), first.stderr()
    assert first.stop() == 0
    second = daemon_factory(token=None, state_dir=first.state, port=first.port)
    assert token not in second.stderr(), "a kept token is not printed again"
    assert f"the one saved in {token_file}" in second.stderr(), second.stderr()
    r = second.client(token=token).post(f"{API}/resolve", json={"sandbox_id": "kept-1",
                                                                "workspace_scope_id": "s"})
    assert r.status == 200, r
    assert second.stop() == 0
    # A token given in the environment wins; the file is left as it is.
    third = daemon_factory(state_dir=first.state, port=first.port)
    assert third.client(token=token).get(f"{API}/kept-1").status == 401
    assert third.client().get(f"{API}/kept-1").status == 200
    assert token_file.read_text().strip() == token


def test_a_token_file_others_can_read_is_refused(daemon_factory):
    state = Path(tempfile.mkdtemp(prefix="sandloom-token-"))
    os.chmod(state, 0o711)
    try:
        (state / "internal-token").write_text("x" * 43 + "\n")
        os.chmod(state / "internal-token", 0o644)
        rc, err = daemon_factory(token=None, state_dir=state, expect_exit=True)
        assert rc == 3, err
        assert "SANDBOX_INTERNAL_TOKEN_FILE" in err and "mode 0600" in err, err
        os.chmod(state / "internal-token", 0o600)
        (state / "internal-token").write_text("short\n")
        rc, err = daemon_factory(token=None, state_dir=state, expect_exit=True)
        assert rc == 3 and "must hold one token of 32 to 512" in err, err
        assert "short" not in err
    finally:
        shutil.rmtree(state, ignore_errors=True)
