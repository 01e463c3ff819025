"""`make fleet` (README): PostgreSQL, Redis, an S3 server and three replicas
(two of one profile, one of another) on loopback, their URLs and the token
printed; a sandbox resolved through one replica runs through the others;
Ctrl-C stops every process it started."""
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

from e2e_harness import REPO, unique_id
from sandloom_client import Client, Sandbox


def free_base():
    """A base port with the 13 ports the fleet takes free."""
    for _ in range(200):
        # Below the ephemeral range (32768-): a client connection's local
        # port there would make a replica's bind fail.
        base = 20000 + int.from_bytes(os.urandom(2), "big") % 12000
        ok = True
        for p in range(base, base + 13):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise AssertionError("no free ports")


def listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_make_fleet_starts_three_replicas_and_ctrl_c_stops_them():
    state = tempfile.mkdtemp(prefix="sl-fleet-")
    os.chmod(state, 0o711)
    base = free_base()
    build = os.path.dirname(os.environ.get("SANDLOOMD", str(REPO / "build" / "sandloomd")))
    proc = subprocess.Popen(["make", "-s", "--no-print-directory", "fleet", f"BUILD={build}",
                             f"FLEET_STATE={state}", f"FLEET_PORT={base}"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    out = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            out.append(line)
            if "fleet: ready" in line:
                break
        text = "".join(out)
        assert "fleet: ready" in text, text
        token = re.search(r"fleet: token: (\S+)", text).group(1)
        urls = re.findall(r"fleet: replica \d: (http://127.0.0.1:(\d+))", text)
        ports = [int(p) for _, p in urls]
        assert ports == [base + 1, base + 2, base + 3], text
        assert "fleet-pool-b" in text
        clients = [Client("127.0.0.1", p, token) for p in ports]
        seen = clients[0].get("/api/v1/sandboxes/diagnostics/runtime").body
        assert sorted(w["worker_id"] for w in seen["workers"]) == \
            sorted(f"127.0.0.1-{p}" for p in ports), seen
        # Resolved through replica 2 (placed in its pool: replica 1 or 2),
        # created through 1, run through 3.
        sid = unique_id("fleet")
        sb = Sandbox(clients[1], sid, "scope")
        assert sb.resolve().status == 200
        owner = sb.route().body["worker_id"]
        assert owner in (f"127.0.0.1-{ports[0]}", f"127.0.0.1-{ports[1]}"), owner
        via1 = Sandbox(clients[0], sid, "scope")
        via1.generation = sb.generation
        assert via1.connect().status == 200
        via3 = Sandbox(clients[2], sid, "scope")
        via3.generation = sb.generation
        r = via3.exec(["echo", "fleet"])
        assert r.status == 200 and r.body["stdout"] == "fleet\n", r
        # The object store is there: a template published on one replica is
        # in the catalog every replica reads.
        assert via3.write("/workspace/t.txt", "template content").status == 200
        r = clients[2].post(f"/api/v1/sandboxes/{sid}/templates",
                            json={"generation": sb.generation, "name": "fleet-tpl",
                                  "source_path": "/workspace"})
        assert r.status == 200, r
        names = [t["name"] for t in clients[0].get("/api/v1/templates").body["templates"]]
        assert "fleet-tpl" in names, names
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            rest = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rest = proc.communicate()[0]
        out.append(rest or "")
    text = "".join(out)
    assert "fleet: stopped" in text, text
    # Nothing it started is left: no replica, no database, no Redis, no S3.
    for p in list(range(base + 1, base + 4)) + [base + 10, base + 11, base + 12]:
        assert not listening(p), f"port {p} still listening after Ctrl-C"
    left = subprocess.run(["pgrep", "-f", state], capture_output=True, text=True).stdout
    assert not left.strip(), left
    subprocess.run(["rm", "-rf", state])
