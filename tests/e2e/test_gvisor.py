"""The gVisor execution backend (runtime/gvisor.c, docs/GVISOR.md): every
sandbox runs under runsc, whose Sentry answers its system calls; suspend
can keep the running processes and their memory (a checkpoint), on the
same worker and, through the object store, after the worker is gone.

The other suites run again at this backend (SANDLOOM_TEST_BACKEND=gvisor,
scripts/run-tests.sh); these are the cases only it has."""
import os
import shutil
import uuid

import pytest

from s3_server import s3  # noqa: F401  (the module-scoped S3 server fixture)
from sandloom_client import Sandbox, assert_error

pytestmark = pytest.mark.gvisor_cases

GVISOR = {"SANDBOX_EXECUTION_BACKEND": "gvisor", "SANDBOX_NETWORK_MODE": "isolated"}

# A server holding state in memory: a token drawn at its start (the same
# process answers) and a counter (its memory is kept).
SERVER = r"""
import http.server, secrets
token, count = secrets.token_hex(8), 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global count
        count += 1
        self.send_response(200); self.end_headers()
        self.wfile.write(f"{token} {count}".encode())
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()
"""
ASK = """import urllib.request as u
print(u.urlopen("http://127.0.0.1:8000", timeout=5).read().decode())
"""


@pytest.fixture(scope="module")
def gv(sandloomd_binary):
    from conftest import Daemon
    d = Daemon(sandloomd_binary, GVISOR).spawn()
    try:
        d.wait_healthy()
        yield d
    finally:
        d.cleanup()


def ready(client, prefix="gv"):
    sb = Sandbox(client, f"{prefix}-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    return sb


def sh(sb, script, status="SUCCEEDED"):
    r = sb.exec(["sh", "-c", script])
    assert r.status == 200 and r.body["status"] == status, r
    return r.body["stdout"]


def suspend(sb, memory=True):
    return sb.c.post(f"{sb.path}/suspend", json={"generation": sb.generation, "memory": memory})


def start_server(sb):
    assert sb.write("/workspace/server.py", SERVER).status == 200
    assert sb.write("/workspace/ask.py", ASK).status == 200
    # Its output redirected: a checkpoint keeps no descriptor of the host.
    sh(sb, "python3 /workspace/server.py > /workspace/server.log 2>&1 < /dev/null & "
           "for i in $(seq 100); do python3 /workspace/ask.py > /dev/null 2>&1 && exit 0; "
           "sleep 0.1; done; exit 1")


def ask(sb):
    token, count = sh(sb, "python3 /workspace/ask.py").split()
    return token, int(count)


def test_commands_run_under_the_sentry(gv):
    hz = gv.client().get("/healthz").body["worker"]
    backend = hz["capabilities"]["execution_backend"]
    assert backend["name"] == "gvisor" and backend["platform"] == "ptrace", backend
    assert backend["version"], backend
    assert hz["profile_hash"].endswith(f"-gvisor-{backend['version']}-ptrace"), hz["profile_hash"]
    # Isolated mode: a user namespace of its own; nested ones can be made
    # inside the Sentry (they give nothing on the host), and it says so.
    assert hz["capabilities"]["user_namespace"] is True
    assert hz["capabilities"]["disable_nested_userns"] is False
    sb = ready(gv.client())
    # The kernel the sandbox sees is gVisor's, not the host's.
    out = sh(sb, "uname -r; dmesg | head -3")
    release, log = out.split("\n", 1)
    assert release != os.uname().release, out
    assert "gVisor" in log, out
    # Files keep the sandbox's uid on the host; ls -l works (the stat family
    # works around this runsc's AT_NO_AUTOMOUNT refusal).
    out = sh(sb, "echo hi > /workspace/f && ls -l /workspace/f && stat -c %s /workspace/f")
    assert out.endswith("3\n") and "/workspace/f" in out, out
    assert (gv.sandbox_root / sb.id / "workspace" / "f").stat().st_uid == sb.uid
    # The same contract: the managed environment, a read-only system.
    assert sh(sb, "echo $HOME; pwd") == "/home/sandbox\n/workspace\n"
    r = sb.exec(["sh", "-c", "touch /usr/x"])
    assert r.body["exit_code"] != 0, r
    assert "Read-only" in r.body["stderr"] or "Permission denied" in r.body["stderr"], r
    assert sb.release().status == 200


def test_a_background_process_lives_on_between_commands(gv):
    sb = ready(gv.client())
    start_server(sb)
    token, n = ask(sb)
    assert ask(sb) == (token, n + 1)
    assert sb.release().status == 200


def test_memory_suspend_keeps_processes_through_ten_cycles(gv):
    c = gv.client()
    sb = ready(c)
    start_server(sb)
    token, count = ask(sb)
    sessions = c.get("/healthz").body["worker"]["running_sessions"]
    for cycle in range(10):
        sh(sb, f"echo {cycle} >> /workspace/cycles")
        r = suspend(sb)
        assert r.status == 200, r
        assert r.body["memory"] is True and r.body["suspended"] is True, r.body
        assert c.get("/healthz").body["worker"]["running_sessions"] == sessions - 1
        assert_error(sb.exec(["true"]), 409, "SANDBOX_SUSPENDED")
        r = sb.c.post(f"{sb.path}/resume")
        assert r.status == 200 and r.body["memory"] is True, r
        assert not (gv.sandbox_root / sb.id / "memory").exists(), "the image outlived its restore"
        # The same process, its memory intact: the count goes on.
        assert ask(sb) == (token, count + 1), cycle
        count += 1
    assert sh(sb, "cat /workspace/cycles") == "".join(f"{i}\n" for i in range(10))
    assert sb.release().status == 200


def test_memory_suspend_refuses_a_process_holding_the_output(gv):
    sb = ready(gv.client())
    # Started without redirecting its output: it holds the pipes of the
    # command that started it, which a checkpoint cannot keep.
    sh(sb, "sleep 300 &")
    r = suspend(sb)
    assert_error(r, 409, "SANDBOX_SUSPEND_BUSY")
    assert "sleep" in r.body["detail"]["message"], r.body
    # Nothing was lost: the sandbox is awake, its process still there.
    assert sb.route().body["status"] == "READY"
    assert "sleep 300" in sh(sb, "ps -eo args")
    # Without memory it suspends as ever.
    r = suspend(sb, memory=False)
    assert r.status == 200 and r.body["memory"] is False, r
    assert sb.release().status == 200


def test_the_private_network_mode_runs_but_keeps_no_memory(daemon_factory):
    """Private mode: the Sentry on the host's network stack inside the
    sandbox's own network namespace (this runsc refuses its own stack
    there), which this runsc cannot checkpoint: said, and nothing lost."""
    d = daemon_factory(dict(GVISOR, SANDBOX_NETWORK_MODE="private"))
    sb = ready(d.client())
    out = sh(sb, "cat /etc/resolv.conf; cat /proc/net/route | wc -l")
    assert "nameserver" in out, out
    # The host's own services stay out of reach, as natively.
    r = sb.exec(["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', "
                 f"{d.port}), timeout=2)"])
    assert r.body["exit_code"] != 0, r
    sh(sb, "sleep 300 > /dev/null 2>&1 < /dev/null &")
    r = suspend(sb)
    assert_error(r, 501, "SANDBOX_MEMORY_SUSPEND_UNSUPPORTED")
    assert "SANDBOX_NETWORK_MODE=isolated" in r.body["detail"]["message"], r.body
    assert "sleep 300" in sh(sb, "ps -eo args")
    assert sb.release().status == 200


def test_memory_suspend_of_a_sandbox_that_runs_nothing_keeps_its_files(gv):
    sb = ready(gv.client())
    assert sb.write("/workspace/a", "x").status == 200
    r = suspend(sb)
    assert r.status == 200 and r.body["memory"] is False, r
    r = sb.c.post(f"{sb.path}/resume")
    assert r.status == 200 and r.body["memory"] is False, r
    assert sb.read("/workspace/a").status == 200
    assert sb.release().status == 200


def test_memory_resumes_on_a_new_worker_from_the_object_store(s3, daemon_factory):
    env = dict(GVISOR, SANDBOX_BLOBSTORE_ENDPOINT=s3,
               SANDBOX_BLOBSTORE_BUCKET="mem-" + uuid.uuid4().hex[:10],
               BLOBSTORE_ACCESS_KEY="S3RVER", BLOBSTORE_SECRET_KEY="S3RVER")
    d1 = daemon_factory(env)
    sb = ready(d1.client())
    start_server(sb)
    token, count = ask(sb)
    r = suspend(sb)
    assert r.status == 200 and r.body["memory"] is True and r.body["snapshot"] is True, r
    gen = sb.generation
    d1.stop()
    # The worker and its disk are gone: only the object store has the sandbox.
    shutil.rmtree(d1.sandbox_root / sb.id)
    d2 = daemon_factory(env, state_dir=d1.state, token=d1.token, port=d1.port)
    sb2 = Sandbox(d2.client(), sb.id, "scope")
    r = sb2.c.post(f"{sb2.path}/resume")
    assert r.status == 200, r
    assert r.body["workspace_source"] == "restored" and r.body["memory"] is True, r
    assert r.body["generation"] == gen + 1, r
    sb2.generation = r.body["generation"]
    assert ask(sb2) == (token, count + 1)
    assert sb2.release().status == 200


def copy_of(client, record):
    sb = Sandbox(client, record["sandbox_id"], record["sandbox_id"])
    sb.generation, sb.uid = record["generation"], record["sandbox_uid"]
    return sb


def test_fork_of_a_running_server_gives_independent_copies(gv):
    c = gv.client()
    src = ready(c)
    start_server(src)
    sh(src, "echo source > /workspace/who")
    token, count = ask(src)
    r = src.c.post(f"{src.path}/fork", json={"count": 3})
    assert r.status == 200, r
    assert r.body["memory"] is True and len(r.body["forks"]) == 3, r.body
    copies = [copy_of(c, f) for f in r.body["forks"]]
    assert len({x.uid for x in copies} | {src.uid}) == 4, r.body
    for i, x in enumerate(copies):
        assert r.body["forks"][i]["memory"] is True
        # The same server process, restored: its count goes on from the
        # checkpoint, in each copy on its own.
        assert ask(x) == (token, count + 1), i
        assert ask(x) == (token, count + 2), i
        assert sh(x, f"cat /workspace/who; echo copy{i} > /workspace/who") == "source\n"
        assert (gv.sandbox_root / x.id / "workspace" / "who").stat().st_uid == x.uid
    # The source goes on too, and the files have diverged.
    assert ask(src) == (token, count + 1)
    assert sh(src, "cat /workspace/who") == "source\n"
    assert [sh(x, "cat /workspace/who") for x in copies] == ["copy0\n", "copy1\n", "copy2\n"]
    # A memory-suspended sandbox forks from its checkpoint and stays asleep.
    assert suspend(src).body["memory"] is True
    r = src.c.post(f"{src.path}/fork", json={"count": 1})
    assert r.status == 200 and r.body["memory"] is True, r
    late = copy_of(c, r.body["forks"][0])
    assert ask(late) == (token, count + 2)
    assert src.route().body["status"] == "SUSPENDED"
    r = src.c.post(f"{src.path}/resume")
    assert r.status == 200 and r.body["memory"] is True, r
    assert ask(src) == (token, count + 2)
    for x in copies + [late, src]:
        assert x.release().status == 200


def test_the_backend_refuses_to_start_where_it_cannot_work(daemon_factory):
    code, err = daemon_factory(dict(GVISOR, SANDBOX_GVISOR_RUNSC="/nonexistent/runsc"),
                               expect_exit=True)
    assert code == 3 and "no runsc at /nonexistent/runsc" in err, err
    code, err = daemon_factory(dict(GVISOR, SANDBOX_SESSION_IDLE_SECONDS="0"), expect_exit=True)
    assert code == 3 and "warm sessions" in err, err


def test_the_doctor_probes_the_gvisor_boundary(sandloomd_binary, tmp_path):
    """sandloom-doctor with the gVisor backend: a real gVisor sandbox runs
    its probe and toolchains, it reports the backend, and its temporary
    directory (with runsc's state) goes whole."""
    import glob
    import json
    import subprocess
    from pathlib import Path
    before = set(glob.glob("/tmp/sandloom-doctor-*"))
    r = subprocess.run([str(Path(sandloomd_binary).parent / "sandloom-doctor"), "--json"],
                       capture_output=True, text=True, timeout=300,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **GVISOR})
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["status"] == "ready" and d["errors"] == [], d
    backend = d["capabilities"]["execution_backend"]
    assert backend["name"] == "gvisor" and backend["platform"] == "ptrace", backend
    assert d["capabilities"]["toolchains"]["python"]["status"] == "available"
    assert set(glob.glob("/tmp/sandloom-doctor-*")) <= before
