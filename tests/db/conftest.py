"""Harness of the database suites (tests/db): the end-to-end harness of
tests/e2e (its daemons, clients and fixtures), on the PostgreSQL server of
tests/db/run-with-postgres.sh, which these suites need: without it they fail,
they do not skip."""
import importlib.util
import os
import sys
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parents[1] / "e2e"
sys.path.insert(0, str(E2E))
_spec = importlib.util.spec_from_file_location("e2e_harness", E2E / "conftest.py")
harness = importlib.util.module_from_spec(_spec)
sys.modules["e2e_harness"] = harness
_spec.loader.exec_module(harness)

# The fixtures, registered here under their own names.
sandloomd_binary = harness.sandloomd_binary
daemon_factory = harness.daemon_factory


@pytest.fixture(scope="session", autouse=True)
def database_server():
    if not harness.PG_URL:
        pytest.fail("tests/db needs the server of tests/db/run-with-postgres.sh or run-with-mariadb.sh "
                    "(SANDLOOM_TEST_DATABASE_URL is not set)", pytrace=False)
    return harness.PG_URL
