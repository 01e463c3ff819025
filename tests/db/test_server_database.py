"""The service on a real database server, PostgreSQL or MariaDB, whichever
tests/db/run-with-*.sh started (FLEET.md §2): the deploy script is what the
code creates, a database made from it serves with auto-DDL off, schema drift
stops a replica that would join it and warns of extra columns, replicas
creating the schema at the same instant all come up, and a server that goes
away gives quick 503s and comes back by itself."""
import os
import subprocess
import threading
import time
from pathlib import Path

from e2e_harness import DB_KIND, MYSQL_ADMIN, REPO, database_url, server_sql as psql, unique_id
from sandloom_client import Sandbox, assert_error

DEPLOY = REPO / "deploy" / "sql" / f"generic-{DB_KIND}.sql"
SCHEMA_SQL = Path(os.environ.get("SANDLOOMD", REPO / "build" / "sandloomd")).parent / "schema-sql"
TABLES = ("agent_sandbox_worker", "agent_sandbox_route", "agent_sandbox_exec",
          # ours (tenants and their keys, E2B's sandboxes), made by the same DDL
          "agent_sandbox_tenant", "agent_sandbox_api_key", "agent_sandbox_e2b")
INDEXES = 6  # the reference's four, the API keys' tenant_id and E2B's end_at


def fresh_database():
    """An empty database of its own: (name, URL)."""
    name = "t_" + unique_id("db").replace("-", "_")
    psql(f"CREATE DATABASE {name}")
    return name, database_url(name)


def apply_deploy_sql(name):
    if DB_KIND == "mysql":
        with open(DEPLOY) as f:
            subprocess.run(["mariadb", *MYSQL_ADMIN.split(), name], stdin=f, check=True,
                           capture_output=True)
        return
    subprocess.run(["psql", f"{os.environ['SANDLOOM_TEST_PG_ADMIN']} dbname={name}", "-X", "-q",
                    "-v", "ON_ERROR_STOP=1", "-f", str(DEPLOY)], check=True, capture_output=True)


def columns(name, table):
    """The live table's columns with their types, in order."""
    if DB_KIND == "mysql":
        q = ("SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE FROM information_schema.COLUMNS "
             f"WHERE TABLE_SCHEMA = '{name}' AND TABLE_NAME = '{table}' ORDER BY ORDINAL_POSITION")
    else:
        q = ("SELECT column_name, data_type, is_nullable FROM information_schema.columns WHERE "
             f"table_name = '{table}' ORDER BY ordinal_position")
    return psql(q, name)


def indexes(name):
    """Every index of the three tables: (table, index, its columns in order)."""
    if DB_KIND == "mysql":
        q = ("SELECT TABLE_NAME, INDEX_NAME, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) "
             f"FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = '{name}' "
             "GROUP BY TABLE_NAME, INDEX_NAME ORDER BY TABLE_NAME, INDEX_NAME")
    else:
        q = ("SELECT tablename, indexname, indexdef FROM pg_indexes "
             "WHERE schemaname = 'public' ORDER BY tablename, indexname")
    return psql(q, name)


def connections(name):
    if DB_KIND == "mysql":
        q = f"SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = '{name}'"
    else:
        q = (f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}' "
             "AND application_name = 'sandloom'")
    return int(psql(q)[0][0])


def run_once(sb, argv=("echo", "hi")):
    r = sb.exec(list(argv))
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    return r.body


def test_deploy_sql_is_what_the_code_creates():
    made = subprocess.run([str(SCHEMA_SQL), DB_KIND], check=True, capture_output=True,
                          text=True).stdout
    assert DEPLOY.read_text() == made, f"{DEPLOY.name} is stale: run make docs"
    # ... and auto-DDL makes the same columns, in the same order.
    scripted, _ = fresh_database()
    apply_deploy_sql(scripted)
    auto, url = fresh_database()
    from e2e_harness import Daemon, find_binary
    d = Daemon(find_binary(), {"SANDBOX_DATABASE_URL": url,
                               "SANDBOX_DATABASE_AUTO_DDL": "true"}).spawn()
    try:
        d.wait_healthy()
    finally:
        d.cleanup()
    for t in TABLES:
        assert columns(scripted, t) and columns(scripted, t) == columns(auto, t), t
    made = indexes(auto)
    assert len([i for i in made if i[1].startswith("idx_agent_sandbox_")]) == INDEXES, made
    assert indexes(scripted) == made


def test_a_database_made_from_the_script_serves_with_auto_ddl_off(daemon_factory):
    name, url = fresh_database()
    apply_deploy_sql(name)
    d = daemon_factory({"SANDBOX_DATABASE_URL": url, "SANDBOX_DATABASE_AUTO_DDL": "false",
                        "SANDBOX_DATABASE_POOL_SIZE": "3"})
    hz = d.client().get("/healthz").body
    assert hz["db"]["backend"] == DB_KIND and hz["db"]["database"] == name, hz["db"]
    sb = Sandbox(d.client(), unique_id("pg"), "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    assert run_once(sb)["stdout"] == "hi\n"
    # The rows are where a second reader (the reference, an operator) sees them.
    rows = psql(f"SELECT status, generation FROM agent_sandbox_route WHERE sandbox_id = '{sb.id}'",
                name)
    assert rows == [("READY", str(sb.generation))], rows
    assert psql(f"SELECT count(*) FROM agent_sandbox_exec WHERE sandbox_id = '{sb.id}'",
                name) == [("1",)]
    # The pool holds what it was told, no more.
    assert 1 <= connections(name) <= 3


def test_drift_stops_the_replica_that_would_join_and_warns_of_extra_columns(daemon_factory):
    good, good_url = fresh_database()
    apply_deploy_sql(good)
    serving = daemon_factory({"SANDBOX_DATABASE_URL": good_url})
    sb = Sandbox(serving.client(), unique_id("pg"), "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200

    drifted, drifted_url = fresh_database()
    apply_deploy_sql(drifted)
    psql("ALTER TABLE agent_sandbox_route DROP COLUMN ready_at", drifted)
    for auto_ddl in ("false", "true"):  # auto-DDL never ALTERs the reference's columns
        rc, err = daemon_factory({"SANDBOX_DATABASE_URL": drifted_url,
                                  "SANDBOX_DATABASE_AUTO_DDL": auto_ddl}, expect_exit=True)
        assert rc == 3, err
        assert "database schema is missing agent_sandbox_route.ready_at" in err, err
        assert "ALTER TABLE" in err, err
    # The replica already serving did not notice.
    assert run_once(sb)["stdout"] == "hi\n"

    # Extra columns (a newer release's, kept for rollback) only warn. (The
    # replica serving stops first: two memory registries over one database
    # are refused, test_registry_fleet.py; a clean stop says OFFLINE.)
    serving.stop()
    psql("ALTER TABLE agent_sandbox_exec ADD COLUMN newer_thing TEXT", good)
    d = daemon_factory({"SANDBOX_DATABASE_URL": good_url})
    assert "agent_sandbox_exec.newer_thing" in d.stderr(), d.stderr()


def test_three_replicas_creating_the_schema_at_once_all_come_up(daemon_factory):
    name, url = fresh_database()
    from e2e_harness import Daemon, find_binary
    # A fleet: replicas that share a database share a Redis registry too
    # (a memory registry each is refused, test_registry_fleet.py).
    from test_registry_fleet import fleet_env
    ns = unique_id("ns")
    ds = [Daemon(find_binary(), fleet_env(url, ns)) for _ in range(3)]
    try:
        barrier = threading.Barrier(3)

        def go(d):
            barrier.wait()
            d.spawn()

        threads = [threading.Thread(target=go, args=(d,)) for d in ds]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for d in ds:
            d.wait_healthy()
        for t in TABLES:
            assert columns(name, t), t
        assert len([i for i in indexes(name) if i[1].startswith("idx_agent_sandbox_")]) == INDEXES
        # Each is a worker with its own heartbeat row.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if psql("SELECT count(*) FROM agent_sandbox_worker", name) == [("3",)]:
                break
            time.sleep(0.2)
        assert psql("SELECT count(*) FROM agent_sandbox_worker", name) == [("3",)]
    finally:
        for d in ds:
            d.cleanup()


def server_ctl(action):
    subprocess.run([os.environ["SANDLOOM_TEST_DB_CTL"], action], check=True, capture_output=True,
                   timeout=120)


def test_a_server_that_goes_away_gives_quick_503s_and_comes_back(daemon_factory):
    d = daemon_factory()  # the harness's database of its own, on the shared server
    c = d.client()
    sb = Sandbox(c, unique_id("pg"), "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    assert run_once(sb)["stdout"] == "hi\n"
    server_ctl("stop")
    try:
        for _ in range(5):
            t0 = time.monotonic()
            r = sb.exec(["echo", "hi"])
            took = time.monotonic() - t0
            assert_error(r, 503, "SANDBOX_METADATA_UNAVAILABLE")
            assert took < 3, f"a request waited {took:.1f} s for a database that is gone"
            # No driver text reaches a client.
            assert "postgres" not in r.raw.decode().lower(), r
            assert "mysql" not in r.raw.decode().lower() and "maria" not in r.raw.decode().lower()
        hz = c.get("/healthz").body
        assert hz["db"]["writable"] is False and hz["db"]["error"], hz["db"]
        assert "127.0.0.1" not in hz["db"]["error"], hz["db"]  # no address without a token
        route = c.get(f"/api/v1/sandboxes/{sb.id}")
        assert_error(route, 503, "SANDBOX_METADATA_UNAVAILABLE")
    finally:
        server_ctl("start")
    # Back by itself: no restart of the daemon.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = sb.exec(["echo", "again"])
        if r.status == 200:
            break
        time.sleep(0.3)
    assert r.status == 200 and r.body["stdout"] == "again\n", r
    assert c.get("/healthz").body["db"]["writable"] is True
    assert d.proc.poll() is None
