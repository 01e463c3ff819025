"""The Python SDK (sdk/python) against a real daemon: it installs with pip
into a fresh venv with no index, passes mypy --strict, the README's examples
run as written, and what it promises holds: generations handled inside,
commands never run twice when a request is resent, typed exceptions."""

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SDK = REPO / "sdk" / "python"
sys.path.insert(0, str(SDK))

import sandloom  # noqa: E402
from sandloom import (Client, CommandResult, NotFound, PathNotFound, Sandbox,  # noqa: E402
                      ScopeBusy, StaleGeneration, Unauthorized)


@pytest.fixture(scope="module")
def sdk_client(daemon):
    return Client(url=f"http://127.0.0.1:{daemon.port}", api_key=daemon.token)


def name(prefix="sdk"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def test_pip_installs_it_offline_into_a_fresh_venv(tmp_path, daemon):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    r = subprocess.run(pip + ["install", "-q", str(SDK)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    script = ("import sandloom, pathlib; from sandloom import Sandbox\n"
              "assert (pathlib.Path(sandloom.__file__).parent / 'py.typed').exists()\n"
              "with Sandbox.create('venv-" + uuid.uuid4().hex[:8] + "') as sb:\n"
              "    print(sb.run('echo from the venv').stdout, end='')\n")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", script], cwd=tmp_path,
                         env={**env, "SANDLOOM_URL": f"http://127.0.0.1:{daemon.port}",
                              "SANDLOOM_API_KEY": daemon.token},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "from the venv\n", out.stderr
    assert "site-packages" in subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sandloom; print(sandloom.__file__)"],
        cwd=tmp_path, capture_output=True, text=True).stdout


def test_it_passes_mypy_strict():
    r = subprocess.run(["mypy", "--strict", "--no-incremental", "sandloom"], cwd=SDK,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def readme_examples():
    text = (SDK / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_readme_examples_run_as_written(daemon):
    examples = readme_examples()
    assert len(examples) >= 5
    env = {**os.environ, "SANDLOOM_URL": f"http://127.0.0.1:{daemon.port}",
           "SANDLOOM_API_KEY": daemon.token, "PYTHONPATH": str(SDK)}
    for i, code in enumerate(examples):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, f"README example {i + 1} failed:\n{code}\n{r.stderr}"


def test_results_and_exceptions_are_typed(sdk_client):
    with Sandbox.create(name(), client=sdk_client) as sb:
        r = sb.run(["sh", "-c", "echo out; echo err >&2; exit 4"])
        assert isinstance(r, CommandResult)
        assert (r.exit_code, r.stdout, r.stderr, r.ok) == (4, "out\n", "err\n", False)
        with pytest.raises(PathNotFound) as e:
            sb.files.read("/workspace/nope.txt")
        assert isinstance(e.value, NotFound) and e.value.message.startswith("path does not exist")
        # A scope held by a running command refuses a second one: ScopeBusy.
        h = sb.run("sleep 20", background=True, exec_scope="build")
        try:
            with pytest.raises(ScopeBusy) as busy:
                sb.run("true", exec_scope="build")
            assert busy.value.code == "SANDBOX_EXEC_SCOPE_BUSY" and busy.value.status == 409
        finally:
            h.kill()
        assert h.wait(timeout=10).status != "RUNNING"
    with pytest.raises(Unauthorized):
        Sandbox.create(name(), client=Client(url=sdk_client.url, api_key="wrong"))
    assert "api_key" not in repr(sdk_client) and sdk_client.api_key not in repr(sdk_client)


def test_a_resent_command_runs_once(sdk_client):
    """The same exec_id sent twice (what the SDK does when an answer is
    lost) is answered from the record: the command ran once."""
    with Sandbox.create(name(), client=sdk_client) as sb:
        first = sb.run("echo x >> /workspace/count; wc -l < /workspace/count", exec_id="once-1")
        again = sb.run("echo x >> /workspace/count; wc -l < /workspace/count", exec_id="once-1")
        assert first.stdout == again.stdout == "1\n"
        assert sb.files.read_text("/workspace/count") == "x\n"


def test_the_generation_is_the_sdks_business(sdk_client):
    """Someone else releases the sandbox (generation + 1): the SDK's next
    call meets the stale generation, resolves again and goes on."""
    sid = name()
    with Sandbox.create(sid, client=sdk_client) as sb:
        g = sb.generation
        other = Sandbox(sid, client=sdk_client)
        other.release()
        r = sb.run("echo again")
        assert r.stdout == "again\n" and sb.generation > g
        # Twice stale is an error, not a loop.
        calls = []

        def always_stale(gen):
            calls.append(gen)
            raise StaleGeneration("STALE_SANDBOX_GENERATION", "stale", 409)
        with pytest.raises(StaleGeneration):
            sb._fenced(always_stale)
        assert len(calls) == 2


def test_listing_pages_and_entries(sdk_client):
    with Sandbox.create(name(), client=sdk_client) as sb:
        sb.run("mkdir -p /workspace/many && cd /workspace/many && "
               "for i in $(seq 1 1203); do : > f$i; done")
        entries = sb.files.list("/workspace/many")
        assert len(entries) == 1203 and len({e.name for e in entries}) == 1203
        assert all(e.type == "file" and e.size_bytes == 0 for e in entries)


def test_version():
    assert sandloom.__version__ == "0.3.0"


def test_a_tenants_quota_is_a_typed_error_naming_its_limit(sdk_client):
    """With a tenant's key: QuotaExceeded carries the limit and its value,
    and the client lists the tenant's own sandboxes by its names."""
    from sandloom import QuotaExceeded
    tid = "sdk-" + uuid.uuid4().hex[:8]
    sdk_client.request("POST", "/api/v1/admin/tenants",
                       {"tenant_id": tid, "quotas": {"sandboxes": 1}})
    key = sdk_client.request("POST", f"/api/v1/admin/tenants/{tid}/keys",
                             {"name": "sdk"})["api_key"]
    tenant = Client(url=sdk_client.url, api_key=key)
    first = name("q")
    with Sandbox.create(first, client=tenant):
        with pytest.raises(QuotaExceeded) as e:
            Sandbox.create(name("q"), client=tenant)
        assert (e.value.status, e.value.limit, e.value.value) == (429, "sandboxes", 1)
        assert [s["sandbox_id"] for s in tenant.sandboxes()] == [first]
        assert tenant.tenant()["usage"]["sandboxes"] == 1


def test_a_handle_follows_output_and_feeds_stdin(sdk_client):
    with Sandbox.create(name(), client=sdk_client) as sb:
        h = sb.run(["python3", "-c", "import sys\nfor l in sys.stdin: print(l.upper(), end='', flush=True)\n"
                    "print('bye', file=sys.stderr)"], background=True, stdin=True)
        assert h.write("one\n") == 4
        assert h.write(b"two\n", close=True) == 4
        got = {"stdout": b"", "stderr": b""}
        for stream, data in h.output():
            got[stream] += data
        assert got == {"stdout": b"ONE\nTWO\n", "stderr": b"bye\n"}
        assert h.result is not None and h.result.exit_code == 0
        s = sb.run(["sleep", "30"], background=True, exec_scope="sleeper")
        assert s.signal("SIGTERM") is True
        r = s.wait(timeout=20)
        assert r.exit_code == -15
        with pytest.raises(ValueError):
            sb.run(["cat"], stdin=True)
