"""What the Makefile does for a newcomer: `make run` (scripts/run.sh) takes
each setting from the environment, then make's command line, then .env,
then its own default; `make install` puts the programs where PATH finds
them and the installed daemon finds its sandbox init."""
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, Daemon, free_port
from sandloom_client import Client

RUN_SH = REPO / "scripts" / "run.sh"


@pytest.fixture
def workdir():
    d = Path(tempfile.mkdtemp(prefix="sandloom-make-"))
    os.chmod(d, 0o711)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def start_run_sh(sandloomd_binary, cwd, port_arg, *, given="", env=None):
    """scripts/run.sh as `make run` calls it, in cwd (where .env is read)."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SL_RUN_GIVEN": given,
            "SANDBOX_AUTH_FAILURES_PER_MINUTE": "1000000"}
    full.update(env or {})
    return subprocess.Popen([str(RUN_SH), str(Path(sandloomd_binary).parent), "127.0.0.1",
                             str(port_arg), str(cwd / "state")], cwd=str(cwd), env=full,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def answers_on(port, proc, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"run.sh exited {proc.returncode}: {proc.stderr.read().decode()}")
        try:
            r = Client("127.0.0.1", port, "", timeout=1).get("/health", auth=False)
            if r.status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def stop(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    return proc.returncode


def test_make_run_prefers_env_then_command_line_then_dotenv(sandloomd_binary, workdir):
    env_port, cli_port, process_port = free_port(), free_port(), free_port()
    (workdir / ".env").write_text(
        f"SANDBOX_PORT={env_port}\n"
        f"export SANDBOX_LOCAL_ROOT = {workdir}/from-dotenv\n"
        "SANDBOX_UID_START=190000\nSANDBOX_UID_END=190999\n")
    # Plain `make run`: .env beats make's defaults (8080, ./state/sandboxes).
    p = start_run_sh(sandloomd_binary, workdir, 8080)
    try:
        assert answers_on(env_port, p)
        assert (workdir / "from-dotenv").is_dir() and not (workdir / "state" / "sandboxes").exists()
        # The database, which .env leaves alone, takes the state default.
        assert (workdir / "state" / "sandloom.db").exists()
    finally:
        assert stop(p) == 0
    # `make run PORT=...`: the command line beats .env.
    p = start_run_sh(sandloomd_binary, workdir, cli_port, given="PORT")
    try:
        assert answers_on(cli_port, p)
    finally:
        assert stop(p) == 0
    # The environment beats both.
    p = start_run_sh(sandloomd_binary, workdir, cli_port, given="PORT",
                     env={"SANDBOX_PORT": str(process_port)})
    try:
        assert answers_on(process_port, p)
    finally:
        assert stop(p) == 0


def test_the_makefile_tells_run_sh_what_its_command_line_gave():
    out = subprocess.run(["make", "-n", "-C", str(REPO), "run", "PORT=9123", "STATE=/tmp/x"],
                         capture_output=True, text=True, check=True).stdout.replace("\\\n", " ")
    line = next(l for l in out.splitlines() if "scripts/run.sh" in l)
    assert 'SL_RUN_GIVEN="PORT STATE"' in line and '"9123" "/tmp/x"' in line, line
    out = subprocess.run(["make", "-n", "-C", str(REPO), "run"], capture_output=True, text=True,
                         check=True).stdout.replace("\\\n", " ")
    line = next(l for l in out.splitlines() if "scripts/run.sh" in l)
    assert 'SL_RUN_GIVEN=""' in line and '"8080"' in line, line


def test_make_install_puts_a_working_daemon_on_path(sandloomd_binary, workdir):
    build = Path(sandloomd_binary).parent
    subprocess.run(["make", "-s", "-C", str(REPO), "install", f"BUILD={build}",
                    f"DESTDIR={workdir}/root", "PREFIX=/usr/local"], check=True,
                   capture_output=True)
    prefix = workdir / "root" / "usr" / "local"
    for path in (prefix / "bin" / "sandloomd", prefix / "bin" / "sandloom-doctor",
                 prefix / "bin" / "sandloom", prefix / "libexec" / "sandloom" / "sandloom-init"):
        assert path.is_file() and os.access(path, os.X_OK), path
    assert (prefix / "share" / "bash-completion" / "completions" / "sandloom").is_file()
    os.chmod(workdir / "root", 0o755)
    # Found by PATH, and it finds sandloom-init in libexec: a command runs.
    found = shutil.which("sandloom-doctor", path=str(prefix / "bin"))
    assert found, list((prefix / "bin").iterdir())
    d = Daemon(prefix / "bin" / "sandloomd").spawn()
    try:
        d.wait_healthy()
        from sandloom_client import Sandbox
        sb = Sandbox(d.client(), "installed", "scope")
        assert sb.resolve().status == 200 and sb.connect().status == 200
        r = sb.exec(["echo", "from an installed daemon"])
        assert r.status == 200 and r.body["stdout"] == "from an installed daemon\n", r
        # The installed CLI reaches it.
        r = subprocess.run([str(prefix / "bin" / "sandloom"), "--url",
                            f"http://127.0.0.1:{d.port}", "--scope", "scope", "exec",
                            "installed", "--", "echo", "from the installed CLI"],
                           env={"PATH": "/usr/bin:/bin", "SANDLOOM_API_KEY": d.token or ""},
                           capture_output=True, timeout=60)
        assert r.returncode == 0 and r.stdout == b"from the installed CLI\n", r
    finally:
        d.cleanup()
    subprocess.run(["make", "-s", "-C", str(REPO), "uninstall", f"DESTDIR={workdir}/root",
                    "PREFIX=/usr/local"], check=True)
    assert not (prefix / "bin" / "sandloomd").exists()
    assert not (prefix / "bin" / "sandloom").exists()
    assert not (prefix / "share" / "bash-completion" / "completions" / "sandloom").exists()
