"""Harness for the Sandloom end-to-end tests.

Starts the real daemon (env SANDLOOMD, else <repo>/build/sandloomd) on a free
loopback port with a fresh temporary state directory and a clean
environment, and drives it over HTTP like any client.

Fixtures
  sandloomd_binary  session  path of the daemon; FAILS (not skips) if missing
  daemon            module   one shared daemon per test module
  client            module   a Client for `daemon`
  daemon_factory    function start extra daemons with custom env; also an
                             "expect exit" mode returning (returncode, stderr)
  new_sandbox       function make a Sandbox helper with a unique id (released
                             at teardown, best effort)
  ready_sandbox     function a resolved + connected Sandbox

Set SANDLOOM_E2E_KEEP=1 to keep state directories (for post-mortem).

Under tests/db/run-with-postgres.sh or run-with-mariadb.sh
(SANDLOOM_TEST_DATABASE_URL set), every daemon whose test does not name its
own database gets a database of its state directory's own on that server
(made on first use, so a restart on the same state finds its rows) with
auto-DDL on; Daemon.sql() reads and writes the metadata tables behind the
daemon's back on any backend.
"""

import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import sqlite3

from sandloom_client import Client, Sandbox

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 20.0
EXIT_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
_DEFAULT = object()


def find_binary():
    env = os.environ.get("SANDLOOMD")
    return Path(env) if env else REPO / "build" / "sandloomd"


DB_URL = os.environ.get("SANDLOOM_TEST_DATABASE_URL", "")
DB_KIND = "mysql" if DB_URL.startswith("mysql") else "postgresql" if DB_URL else "sqlite"
PG_URL = DB_URL  # (the name the PostgreSQL suites first used)
PG_ADMIN = os.environ.get("SANDLOOM_TEST_PG_ADMIN", "")
MYSQL_ADMIN = os.environ.get("SANDLOOM_TEST_MYSQL_ADMIN", "")


def server_sql(sql, dbname=None):
    """Run SQL on the harness's server as its administrator (psql or the
    mariadb client); rows as tuples of text (None for NULL)."""
    if DB_KIND == "mysql":
        cmd = ["mariadb", *MYSQL_ADMIN.split(), "--batch", "--skip-column-names", "--raw",
               "-e", sql] + ([dbname] if dbname else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return [tuple(None if v == "NULL" else v for v in line.split("\t"))
                for line in out.splitlines()]
    conn = PG_ADMIN if dbname is None else f"{PG_ADMIN} dbname={dbname}"
    out = subprocess.run(["psql", conn, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At",
                          "-F", "\x1f", "-P", "null=\x1e", "-c", sql],
                         check=True, capture_output=True, text=True).stdout
    return [tuple(None if v == "\x1e" else v for v in line.split("\x1f"))
            for line in out.splitlines()]


psql = server_sql


def database_url(name):
    return DB_URL.rsplit("/", 1)[0] + "/" + name


def database_for(state):
    """The database of a state directory (made once): its name, its URL."""
    name = "sl_" + hashlib.sha256(str(state).encode()).hexdigest()[:16]
    if DB_KIND == "mysql":
        server_sql(f"CREATE DATABASE IF NOT EXISTS {name}")
    elif not server_sql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'"):
        server_sql(f"CREATE DATABASE {name}")
    return name, database_url(name)


def sql_literal(v):
    if v is None:
        return "NULL"
    if isinstance(v, (int, float)):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One sandloomd process and its state directory."""

    _seq = 0

    def __init__(self, binary, env=None, *, state_dir=None, token=_DEFAULT, unset=(), port=None):
        self.binary = Path(binary)
        self.owns_state = state_dir is None
        if state_dir is None:
            state_dir = tempfile.mkdtemp(prefix="sandloom-e2e-")
            # Like /var/lib: traversable by the sandbox uids, not listable.
            os.chmod(state_dir, 0o711)
        self.state = Path(state_dir)
        self.port = port or free_port()
        # 100 blocks of 1000 uids from 100000 (above every system range and
        # the reference's default): a restart on the same state keeps its
        # block, since its routes hold those uids.
        self.uid_start = 100000 + 1000 * (int(hashlib.sha256(str(self.state).encode())
                                                  .hexdigest(), 16) % 100)
        self.token = secrets.token_urlsafe(32) if token is _DEFAULT else token
        self.sandbox_root = self.state / "sandboxes"
        self.db_path = self.state / "sandloom.db"
        env_full = {
            "PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            "SANDBOX_HOST": "127.0.0.1",
            "SANDBOX_PORT": str(self.port),
            "SANDBOX_ADVERTISE_HOST": "127.0.0.1",
            "SANDBOX_LOCAL_ROOT": str(self.sandbox_root),
            "SANDBOX_DATABASE_URL": f"sqlite:///{self.db_path}",
            "SANDBOX_STARTUP_LOG_PATH": str(self.state / "startup.log"),
            # A uid range of this daemon's own: daemons running at the same
            # time (a module's daemon beside a test's, or another test run)
            # never share a sandbox uid, its processes or its cgroup.
            "SANDBOX_UID_START": str(self.uid_start),
            "SANDBOX_UID_END": str(self.uid_start + 999),
            # The suites send hundreds of wrong tokens on purpose; only the
            # attack case that tests the throttle keeps the default.
            "SANDBOX_AUTH_FAILURES_PER_MINUTE": "1000000",
        }
        # The escape suite runs once more at basic: SANDLOOM_TEST_LEVEL picks
        # the isolation level of every daemon a test does not configure.
        if os.environ.get("SANDLOOM_TEST_LEVEL"):
            env_full["SANDBOX_ISOLATION_LEVEL"] = os.environ["SANDLOOM_TEST_LEVEL"]
        # SANDLOOM_TEST_BACKEND=gvisor: the suites run again with every
        # sandbox under gVisor (runtime/gvisor.c) unless a test picks a
        # backend itself.
        if os.environ.get("SANDLOOM_TEST_BACKEND"):
            env_full["SANDBOX_EXECUTION_BACKEND"] = os.environ["SANDLOOM_TEST_BACKEND"]
        # SANDLOOM_TEST_WARM_POOL=<n>: every daemon keeps n sandboxes prepared
        # (service/warm.c), so the suites run on sandboxes whose session was
        # made before their create.
        if os.environ.get("SANDLOOM_TEST_WARM_POOL"):
            env_full["SANDBOX_WARM_POOL_SIZE"] = os.environ["SANDLOOM_TEST_WARM_POOL"]
        # SANDLOOM_TEST_IMAGE=<bytes>: every daemon keeps its sandboxes in a
        # workspace image of that size (workspace/image.h), whose free space
        # is then what admission checks: 64 MiB must stay free, not 1 GiB.
        # A test that puts the workspace root on a filesystem of its own
        # (a small tmpfs, a loop device) keeps it as it is.
        if os.environ.get("SANDLOOM_TEST_IMAGE") and "SANDBOX_LOCAL_ROOT" not in (env or {}):
            env_full["SANDBOX_WORKSPACE_IMAGE_BYTES"] = os.environ["SANDLOOM_TEST_IMAGE"]
            env_full["SANDBOX_MIN_FREE_BYTES"] = str(64 << 20)
        if self.token is not None:
            env_full["SANDBOX_INTERNAL_TOKEN"] = self.token
        self.pg_database = None  # the server database's name (PostgreSQL or MySQL)
        if DB_URL and "SANDBOX_DATABASE_URL" not in (env or {}):
            self.pg_database, env_full["SANDBOX_DATABASE_URL"] = database_for(self.state)
            env_full["SANDBOX_DATABASE_AUTO_DDL"] = "true"
        env_full.update(env or {})
        for name in unset:
            env_full.pop(name, None)
        self.env = env_full
        Daemon._seq += 1
        self.stdout_path = self.state / f"daemon-{Daemon._seq}.stdout"
        self.stderr_path = self.state / f"daemon-{Daemon._seq}.stderr"
        self.proc = None
        self.returncode = None

    # -- process control ---------------------------------------------------
    def spawn(self):
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([str(self.binary)], cwd=str(self.state), env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True)
        return self

    def wait_healthy(self, timeout=STARTUP_TIMEOUT):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                self.returncode = rc
                pytest.fail(f"sandloomd exited with status {rc} during startup.\n"
                            f"--- stderr ---\n{self.stderr()}\n--- stdout ---\n{self.stdout()}",
                            pytrace=False)
            try:
                r = Client("127.0.0.1", self.port, self.token or "", timeout=2).get(
                    "/health", auth=False)
                if r.status == 200 and r.raw.strip() == b"ok":
                    return self
                last = r
            except OSError as e:
                last = e
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"sandloomd did not answer GET /health == 'ok' within {timeout:.0f} s "
                    f"(last: {last!r}).\n--- stderr ---\n{self.stderr()}", pytrace=False)

    def wait_exit(self, timeout=EXIT_TIMEOUT):
        """Expect-exit mode: (returncode or None if it kept running, stderr)."""
        try:
            self.returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            return None, self.stderr()
        return self.returncode, self.stderr()

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.returncode = self.proc.returncode
            return self.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT)
        self.returncode = self.proc.returncode
        return self.returncode

    def cleanup(self):
        self.stop()
        if self.owns_state and not os.environ.get("SANDLOOM_E2E_KEEP"):
            shutil.rmtree(self.state, ignore_errors=True)

    # -- the metadata database -----------------------------------------------
    def sql(self, query, params=()):
        """Run one statement on this daemon's metadata database, `?` for
        each parameter; the rows as tuples (text on PostgreSQL)."""
        if self.pg_database:
            parts = query.split("?")
            assert len(parts) == len(params) + 1, query
            text = parts[0] + "".join(sql_literal(p) + rest for p, rest in zip(params, parts[1:]))
            return server_sql(text, self.pg_database)
        db = sqlite3.connect(self.db_path, timeout=15)
        try:
            with db:
                return db.execute(query, params).fetchall()
        finally:
            db.close()

    # -- accessors -----------------------------------------------------------
    def stderr(self):
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stdout(self):
        try:
            return self.stdout_path.read_text(errors="replace")
        except OSError:
            return ""

    def client(self, token=_DEFAULT):
        return Client("127.0.0.1", self.port, self.token if token is _DEFAULT else token)

    @property
    def worker_id(self):
        return f"127.0.0.1-{self.port}"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gvisor_cases: the gVisor backend's own cases, each with daemons of its own "
        "(test_gvisor.py, tests/security/test_escape_gvisor.py): run in the main tiers, not "
        "again in the variants (scripts/run-tests.sh)")
    config.addinivalue_line(
        "markers", "sqlite_file: the test works on the SQLite file itself (its locks, its "
        "tables opened with sqlite3): not run again on PostgreSQL, where tests/db covers the "
        "same behaviour")


# ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def sandloomd_binary():
    path = find_binary()
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"sandloomd binary not found or not executable at {path} "
                    f"(set SANDLOOMD=/path/to/sandloomd or build it into {REPO}/build/)",
                    pytrace=False)
    return path


@pytest.fixture(scope="module")
def daemon(sandloomd_binary):
    d = Daemon(sandloomd_binary).spawn()
    try:
        d.wait_healthy()
        yield d
    finally:
        d.cleanup()


@pytest.fixture(scope="module")
def client(daemon):
    return daemon.client()


@pytest.fixture
def daemon_factory(sandloomd_binary):
    """start(env=None, *, state_dir=None, token=<random>|None, unset=(),
             expect_exit=False, timeout=20, port=None)
    Normal mode: returns a healthy Daemon (stopped and cleaned at teardown).
    expect_exit=True: returns (returncode, stderr); returncode is None if
    the daemon was still running after `timeout` seconds (it is then killed).
    token=None leaves SANDBOX_INTERNAL_TOKEN unset."""
    started = []

    def start(env=None, *, state_dir=None, token=_DEFAULT, unset=(), expect_exit=False,
              timeout=None, port=None):
        d = Daemon(sandloomd_binary, env, state_dir=state_dir, token=token, unset=unset,
                   port=port)
        started.append(d)
        d.spawn()
        if expect_exit:
            return d.wait_exit(timeout or EXIT_TIMEOUT)
        return d.wait_healthy(timeout or STARTUP_TIMEOUT)

    yield start
    # Stop everything first, then remove state (later daemons may reuse an
    # earlier daemon's state directory).
    for d in started:
        d.stop()
    for d in started:
        d.cleanup()


def unique_id(prefix="sbx"):
    return f"{prefix}-{uuid.uuid4().hex[:20]}"


@pytest.fixture
def new_sandbox(client):
    made = []

    def make(prefix="sbx", scope=None):
        sb = Sandbox(client, unique_id(prefix), scope or unique_id("scope"))
        made.append(sb)
        return sb

    yield make
    for sb in made:
        try:
            sb.release()
        except OSError:
            pass


@pytest.fixture
def ready_sandbox(new_sandbox):
    sb = new_sandbox()
    r = sb.resolve()
    assert r.status == 200, f"resolve failed: {r!r}"
    r = sb.connect()
    assert r.status == 200, f"connect failed: {r!r}"
    return sb
