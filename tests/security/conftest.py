"""Harness for the Sandloom sandbox-escape suite.

Reuses the end-to-end harness without copying it: tests/e2e is put on
sys.path (for sandloom_client) and tests/e2e/conftest.py is loaded under
its own module name, so its fixtures and its Daemon class are the ones the
e2e tier uses. Nothing in tests/e2e is modified.

Fixtures re-exported from tests/e2e/conftest.py
  sandloomd_binary, daemon, client, daemon_factory, new_sandbox, ready_sandbox

Fixtures added here
  isolated_daemon   module   a daemon with SANDBOX_NETWORK_MODE=isolated
  gvisor_daemon     module   the same with SANDBOX_EXECUTION_BACKEND=gvisor
  make_sandbox      function resolve+connect a fresh Sandbox on any daemon
                             (released at teardown, best effort)

The daemon binary is $SANDLOOMD, else <repo>/build/sandloomd (as in e2e).
Every case runs real commands inside real sandboxes through the exec API
and checks the host side from this process, which is root on the host.
"""

import importlib.util
import os
import platform
import sys
from pathlib import Path

import pytest

# Importing tests/e2e modules must not write __pycache__ into tests/e2e.
sys.dont_write_bytecode = True

HERE = Path(__file__).resolve().parent
E2E = HERE.parent / "e2e"
for p in (str(E2E), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

_spec = importlib.util.spec_from_file_location("sandloom_e2e_conftest", E2E / "conftest.py")
e2e = importlib.util.module_from_spec(_spec)
sys.modules["sandloom_e2e_conftest"] = e2e
_spec.loader.exec_module(e2e)

from sandloom_client import Sandbox  # noqa: E402  (needs tests/e2e on sys.path)

# Re-exported e2e fixtures (pytest finds fixtures by module attribute).
sandloomd_binary = e2e.sandloomd_binary
client = e2e.client


def running_daemon(binary, env):
    """A healthy daemon with env for the fixture's life (a generator)."""
    d = e2e.Daemon(binary, env).spawn()
    try:
        d.wait_healthy()
        yield d
    finally:
        d.cleanup()


@pytest.fixture(scope="module")
def daemon(sandloomd_binary):
    """The attacks from inside a sandbox need the API reachable from there:
    the host network mode (the reference's default, still selectable). The
    private mode (our default) closes that path altogether:
    test_escape_network.py and tests/e2e/test_network_private.py."""
    yield from running_daemon(sandloomd_binary, {"SANDBOX_NETWORK_MODE": "host"})


@pytest.fixture(scope="module")
def private_daemon(sandloomd_binary):
    """The default network mode: a private network per sandbox."""
    yield from running_daemon(sandloomd_binary, None)


daemon_factory = e2e.daemon_factory
new_sandbox = e2e.new_sandbox
ready_sandbox = e2e.ready_sandbox


def pytest_configure(config):
    e2e.pytest_configure(config)


def pytest_report_header(config):
    level = os.environ.get("SANDLOOM_TEST_LEVEL")
    return [f"sandloom isolation level: {level or 'auto (the strongest the host supports)'}"
            f" (each case reads the level its daemon selected from /healthz)"]


@pytest.fixture(scope="session", autouse=True)
def _host_can_run_the_suite():
    # Root: the host side is checked as root. x86_64: the raw-syscall probes
    # use x86_64 numbers (bpf=321, ...). Otherwise fail loudly, never skip.
    if os.geteuid() != 0:
        pytest.fail("the security suite checks the host side as root (run it as root)",
                    pytrace=False)
    if platform.machine() != "x86_64":
        pytest.fail(f"the raw-syscall probes use x86_64 syscall numbers; this host is "
                    f"{platform.machine()}", pytrace=False)


@pytest.fixture(scope="module")
def isolated_daemon(sandloomd_binary):
    yield from running_daemon(sandloomd_binary, {"SANDBOX_NETWORK_MODE": "isolated"})


@pytest.fixture(scope="module")
def gvisor_daemon(sandloomd_binary):
    """Sandboxes under gVisor, in the mode where it keeps its own network
    stack (test_escape_gvisor.py)."""
    yield from running_daemon(sandloomd_binary, {"SANDBOX_EXECUTION_BACKEND": "gvisor",
                                                 "SANDBOX_NETWORK_MODE": "isolated"})


@pytest.fixture
def make_sandbox():
    """make_sandbox(daemon_or_client, prefix="sec") -> resolved + connected Sandbox."""
    made = []

    def make(target, prefix="sec"):
        c = target.client() if hasattr(target, "client") else target
        sb = Sandbox(c, e2e.unique_id(prefix), e2e.unique_id("scope"))
        r = sb.resolve()
        assert r.status == 200, f"resolve failed: {r!r}"
        r = sb.connect()
        assert r.status == 200, f"connect failed: {r!r}"
        made.append(sb)
        return sb

    yield make
    for sb in made:
        try:
            sb.release()
        except OSError:
            pass
