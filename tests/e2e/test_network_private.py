"""The private network mode (SANDBOX_NETWORK_MODE=private, networking issue).

Every destination is on this machine: a test internet in a network
namespace the module makes (private_net.TestInternet) with its own dnsmasq.
The sandboxes' own network namespaces, veth pairs and nftables rules are
the daemon's, made for real; nothing is mocked.
"""
import json
import os
import socket
import subprocess
import threading
import time

import pytest

from conftest import unique_id
from private_net import TestInternet, dns_query, probe, tcp, udp
from sandloom_client import API, Sandbox, assert_error

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the private network needs root")

CIDR = f"10.{200 + os.getpid() % 50}.0.0/16"


@pytest.fixture(scope="module")
def inet(tmp_path_factory):
    net = TestInternet(str(tmp_path_factory.mktemp("inet"))).start()
    yield net
    net.stop()


@pytest.fixture(scope="module")
def pdaemon(sandloomd_binary, inet):
    from conftest import Daemon
    d = Daemon(sandloomd_binary, inet.daemon_env(CIDR)).spawn()
    try:
        d.wait_healthy()
        yield d
    finally:
        d.cleanup()


@pytest.fixture(scope="module")
def pclient(pdaemon):
    return pdaemon.client()


def make(client, egress=None):
    sb = Sandbox(client, unique_id("net"), unique_id("scope"))
    assert sb.resolve().status == 200
    body = {"generation": sb.generation}
    if egress is not None:
        body["egress"] = egress
    r = client.post(sb.path, json=body)
    assert r.status in (200, 201), r
    # Written now: a background command started later holds /workspace's
    # file lock while it runs.
    from private_net import PROBE
    assert sb.write("/workspace/.probe.py", PROBE).status == 200
    sb._probe_written = True
    return sb


def network(sb):
    r = sb.c.get(sb.path + "/network")
    assert r.status == 200, r
    return r.body


def set_egress(sb, egress):
    return sb.c.put(sb.path + "/network", json={"generation": sb.generation, "egress": egress})


def ok(results):
    return [r.startswith("ok") for r in results]


def host_address():
    """This host's address on its default route (not loopback)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.123", 9))
        return s.getsockname()[0]
    finally:
        s.close()


def test_a_sandbox_gets_its_own_address_and_resolver_and_reaches_out_by_name(pclient, inet):
    sb = make(pclient)
    r = sb.exec(["cat", "/etc/resolv.conf"])
    assert r.status == 200 and r.body["exit_code"] == 0, r
    gw = CIDR.split("/")[0].rsplit(".", 2)[0] + ".0.1"
    assert f"nameserver {gw}" in r.body["stdout"]
    res = probe(sb, [tcp("allowed.test"), udp("allowed.test"), tcp(inet.other)])
    assert res == [f"ok tcp {inet.allowed}", f"ok udp {inet.allowed}", f"ok tcp {inet.other}"]
    view = network(sb)
    assert view["network_mode"] == "private" and view["state"] == "connected"
    assert view["egress_source"] == "worker" and view["egress"]["default"] == "allow"
    assert view["address"].startswith(gw.rsplit(".", 1)[0][:-1])
    # Its only interfaces: loopback and eth0 with that one address.
    r = sb.exec(["cat", "/proc/net/dev"])
    ifaces = sorted(l.split(":")[0].strip() for l in r.body["stdout"].splitlines()[2:])
    assert ifaces == ["eth0", "lo"]


def test_two_sandboxes_cannot_reach_each_other_by_any_protocol(pclient):
    a, b = make(pclient), make(pclient)
    server = ("import socket, threading, time\n"
              "t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              "t.bind(('0.0.0.0', 7001)); t.listen(8)\n"
              "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('0.0.0.0', 7002))\n"
              "x = socket.socket(socket.AF_UNIX); x.bind('\\0slt-b-secret'); x.listen(8)\n"
              "def serve(s):\n"
              "    while True:\n"
              "        c, _ = s.accept(); c.sendall(b'secret\\n'); c.close()\n"
              "def userve():\n"
              "    while True:\n"
              "        d, p = u.recvfrom(64); u.sendto(b'secret\\n', p)\n"
              "for f, arg in ((serve, t), (serve, x), (userve, None)):\n"
              "    threading.Thread(target=f, args=(arg,) if arg else (), daemon=True).start()\n"
              "time.sleep(600)\n")
    assert b.write("/workspace/srv.py", server).status == 200
    r = b.exec(["python3", "/workspace/srv.py"], background=True, exec_scope=unique_id("bg"))
    assert r.status in (200, 202), r
    b_addr = network(b)["address"]
    deadline = time.time() + 10
    while time.time() < deadline:
        mine = probe(b, [tcp("127.0.0.1", 7001), dict(kind="unix", name="slt-b-secret"),
                         udp("127.0.0.1", 7002), tcp(b_addr, 7001)])
        if all(ok(mine)):
            break
        time.sleep(0.2)
    assert all(ok(mine)), mine  # B's servers answer B
    theirs = probe(a, [tcp(b_addr, 7001), udp(b_addr, 7002),
                       dict(kind="unix", name="slt-b-secret"), tcp("127.0.0.1", 7001)])
    assert not any(ok(theirs)), theirs
    # A sees none of B's sockets either (its own /proc/net).
    r = a.exec(["cat", "/proc/net/tcp", "/proc/net/udp", "/proc/net/unix"])
    assert "1B59" not in r.body["stdout"] and "slt-b-secret" not in r.body["stdout"]


def test_nothing_of_the_host_is_reachable_and_no_flood_reaches_the_api(pclient, pdaemon):
    # A server on every host address, the daemon's own API port beside it.
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 0))
    srv.listen(64)
    port = srv.getsockname()[1]
    accepted = []

    def accept():
        srv.settimeout(0.5)
        while not stop.is_set():
            try:
                c, peer = srv.accept()
                accepted.append(peer)
                c.close()
            except OSError:
                pass
    stop = threading.Event()
    th = threading.Thread(target=accept, daemon=True)
    th.start()
    try:
        sb = make(pclient)
        gw = CIDR.split("/")[0].rsplit(".", 2)[0] + ".0.1"
        here = host_address()
        checks = [tcp("127.0.0.1", port), tcp(gw, port), tcp(here, port),
                  tcp("127.0.0.1", pdaemon.port), tcp(gw, pdaemon.port),
                  tcp(here, pdaemon.port), udp(gw, port)]
        assert not any(ok(probe(sb, checks))), checks
        # The hardening work's flood: 200 connections at the API, none lands.
        flood = [tcp(gw, pdaemon.port, timeout=0.2) for _ in range(100)] + \
                [tcp(here, pdaemon.port, timeout=0.2) for _ in range(100)]
        t0 = time.time()
        assert not any(ok(probe(sb, flood, exec_timeout=120)))
        assert pclient.get("/healthz").status == 200
        assert time.time() - t0 < 90
        assert accepted == []
    finally:
        stop.set()
        th.join()
        srv.close()


def test_link_local_and_metadata_are_never_reachable_even_when_allowed(pclient, inet):
    # The host reaches the metadata test server (TestInternet.start checks
    # it); a sandbox does not, even with a policy that names it.
    sb = make(pclient, egress={"default": "allow", "allow": ["169.254.0.0/16", "metadata.test"]})
    res = probe(sb, [tcp(inet.metadata), tcp(inet.metadata, 80), tcp("metadata.test"),
                     udp(inet.metadata)])
    assert not any(ok(res)), res
    assert network(sb)["denied_connections"] > 0


def test_private_ranges_need_an_allow_rule(pclient, inet):
    sb = make(pclient)
    assert not any(ok(probe(sb, [tcp(inet.private), udp(inet.private)])))
    # A name never opens a private address (DNS rebinding), even allowed.
    r = set_egress(sb, {"default": "deny", "allow": ["private.test"]})
    assert r.status == 200, r
    assert probe(sb, [dict(kind="resolve", name="private.test"), tcp("private.test")]) == \
        [f"ok {inet.private}", "fail timeout"]
    r = set_egress(sb, {"allow": [inet.private_net]})
    assert r.status == 200, r
    assert probe(sb, [tcp(inet.private), udp(inet.private)]) == \
        [f"ok tcp {inet.private}", f"ok udp {inet.private}"]


def allowlist_checks(sb, inet):
    res = probe(sb, [tcp("allowed.test"), udp("allowed.test"), tcp(inet.allowed),
                     tcp("a.wild.test"), tcp("b.wild.test"),
                     dict(kind="resolve", name="denied.test"), tcp(inet.denied),
                     udp(inet.denied), udp("b.wild.test"), tcp("b.wild.test", 80),
                     tcp("wild.test")])
    assert res[:5] == [f"ok tcp {inet.allowed}", f"ok udp {inet.allowed}",
                       f"ok tcp {inet.allowed}", f"ok tcp {inet.allowed}",
                       f"ok tcp {inet.other}"], res
    assert res[5] == "fail noname", res  # refused by the resolver
    assert not any(ok(res[5:])), res


ALLOWLIST = {"default": "deny", "allow": ["allowed.test", "*.wild.test:8080"]}


def test_an_allowlist_by_name_holds_by_name_and_by_address_with_or_without_proxies(
        pclient, inet, daemon_factory):
    sb = make(pclient, egress=ALLOWLIST)
    allowlist_checks(sb, inet)
    # With the worker's proxy variables in every command's environment
    # (SANDBOX_HTTP_PROXIES, pointing at an allowed host), the same: the
    # rules are the network's, not the tools' (the probe ignores proxies).
    # A second private worker on this host, with a subnet of its own.
    env = inet.daemon_env(f"10.{200 + (os.getpid() + 3) % 50}.0.0/16")
    env["SANDBOX_HTTP_PROXIES"] = f"http://{inet.allowed}:8080"
    other = make(daemon_factory(env).client(), egress=ALLOWLIST)
    r = other.exec(["sh", "-c", "echo $HTTP_PROXY $https_proxy"])
    assert r.body["stdout"].split() == [f"http://{inet.allowed}:8080"] * 2, r.body
    allowlist_checks(other, inet)
    # DNS to any server goes to the sandbox's resolver, which refuses the
    # name (REFUSED, not silence): no resolver elsewhere is a way out.
    gw = CIDR.split("/")[0].rsplit(".", 2)[0] + ".0.1"
    res = probe(sb, [dict(kind="dns", server=inet.allowed, name="denied.test"),
                     dict(kind="dns", server="192.0.2.53", name="denied.test"),
                     dict(kind="dns", server="192.0.2.53", name="allowed.test"),
                     # A NUL inside a label: upstream would resolve a name
                     # under another zone than the one the text names.
                     dict(kind="dns", server=gw, name="allowed.test\u0000.evil.example"),
                     tcp(gw, 53)])
    assert res == ["ok rcode 5", "ok rcode 5", "ok rcode 0", "ok rcode 5",
                   "fail refused"], res
    view = network(sb)
    assert view["egress_source"] == "sandbox" and view["refused_names"] >= 3
    assert view["denied_connections"] > 0


def test_a_name_whose_address_changes_is_followed(pclient, inet):
    sb = make(pclient, egress={"default": "deny", "allow": ["moving.test"]})
    try:
        assert probe(sb, [tcp("moving.test"), tcp(inet.other)]) == \
            [f"ok tcp {inet.allowed}", "fail timeout"]
        inet.reload(moving_test=inet.other)
        # The old address stays allowed for its TTL (learned for at least
        # 5 s), then only the new one is.
        time.sleep(7)
        res = probe(sb, [tcp("moving.test"), tcp(inet.allowed)])
        assert res == [f"ok tcp {inet.other}", "fail timeout"], res
    finally:
        inet.reload(moving_test=inet.allowed)


def test_a_policy_change_reaches_a_running_session_without_restarting_it(pclient, inet):
    sb = make(pclient)
    loop = ("import socket, time, os\n"
            "f = open('/workspace/log', 'a', buffering=1)\n"
            "f.write('pid %%d\\n' %% os.getpid())\n"
            "while True:\n"
            "    try:\n"
            "        socket.create_connection(('%s', 8080), 0.3).close(); f.write('ok\\n')\n"
            "    except OSError:\n"
            "        f.write('fail\\n')\n"
            "    time.sleep(0.1)\n" % inet.allowed)
    assert sb.write("/workspace/loop.py", loop).status == 200
    assert sb.exec(["python3", "/workspace/loop.py"], background=True, exec_scope=unique_id("bg")).status in (200, 202)
    time.sleep(1.5)
    t0 = time.time()
    r = set_egress(sb, {"default": "deny"})
    assert r.status == 200, r
    assert r.body["state"] == "connected"
    time.sleep(1.5)
    r = set_egress(sb, None)  # back to the worker's default
    assert r.status == 200 and r.body["egress_source"] == "worker", r
    time.sleep(1.5)
    lines = sb.read_bytes("/workspace/log").decode().split()
    assert lines[0] == "pid" and lines.count("pid") == 1  # one process all along
    states = [l for l in lines[2:] if l in ("ok", "fail")]
    # ok ... fail ... ok: the change came while it ran, both ways.
    first_fail = states.index("fail")
    assert "ok" in states[:first_fail] and "ok" in states[first_fail:], states
    assert time.time() - t0 < 30


def test_two_sandboxes_bind_the_same_port_without_colliding(pclient):
    a, b = make(pclient), make(pclient)
    for sb, word in ((a, "alpha"), (b, "beta")):
        srv = ("import socket\n"
               "s = socket.socket(); s.bind(('0.0.0.0', 8000)); s.listen(4)\n"
               "while True:\n"
               "    c, _ = s.accept(); c.sendall(b'%s\\n'); c.close()\n" % word)
        assert sb.write("/workspace/same.py", srv).status == 200
        assert sb.exec(["python3", "/workspace/same.py"], background=True, exec_scope=unique_id("bg")).status in (200, 202)
    for sb, word in ((a, "alpha"), (b, "beta")):
        deadline = time.time() + 10
        while time.time() < deadline:
            res = probe(sb, [tcp("127.0.0.1", 8000)])
            if res[0].startswith("ok"):
                break
            time.sleep(0.2)
        assert res == [f"ok {word}"], res


def test_bad_policies_are_refused_with_a_named_code(pclient):
    sb = make(pclient)
    for egress, fragment in (
            ({"default": "maybe"}, "egress.default"),
            ({"allow": ["2001:db8::1"]}, "IPv6"),
            ({"allow": ["example.com:0"]}, "port"),
            ({"allow": ["example.com:70000"]}, "port"),
            ({"allow": ["10.0.0.0/33"]}, "prefix"),
            ({"allow": ["-bad-.example"]}, "domain"),
            ({"allow": [7]}, "string"),
            ({"allow": ["a.example"] * 257}, "at most 256"),
            ({"deny": "everything"}, "list"),
            ({"ports": [1]}, "not a field"),
            ("all", "object")):
        r = set_egress(sb, egress)
        assert_error(r, 422, "EGRESS_POLICY_INVALID")
        assert fragment in r.body["detail"]["message"], (egress, r.body)
    # Refused at creation too, and nothing was stored.
    sb2 = Sandbox(pclient, unique_id("net"), unique_id("scope"))
    assert sb2.resolve().status == 200
    r = pclient.post(sb2.path, json={"generation": sb2.generation, "egress": {"deny": [1]}})
    assert_error(r, 422, "EGRESS_POLICY_INVALID")
    r = set_egress(sb, {"allow": ["x.example"]})
    assert r.status == 200
    r = sb.c.put(sb.path + "/network", json={"generation": sb.generation + 5, "egress": None})
    assert_error(r, 409, "STALE_SANDBOX_GENERATION")
    r = sb.c.put(sb.path + "/network", json={"generation": sb.generation})
    assert r.status == 422


def test_the_host_mode_refuses_egress_policies(daemon_factory):
    client = daemon_factory({"SANDBOX_NETWORK_MODE": "host"}).client()
    sb = Sandbox(client, unique_id("net"), unique_id("scope"))
    assert sb.resolve().status == 200
    assert client.post(sb.path, json={"generation": sb.generation}).status in (200, 201)
    assert_error(sb.c.get(sb.path + "/network"), 409, "EGRESS_POLICY_UNSUPPORTED")
    assert_error(set_egress(sb, {"default": "deny"}), 409, "EGRESS_POLICY_UNSUPPORTED")


def test_a_policy_that_cannot_be_installed_leaves_the_sandbox_without_network(
        daemon_factory, inet):
    cidr = f"10.{200 + (os.getpid() + 7) % 50}.0.0/16"
    d = daemon_factory(inet.daemon_env(cidr))
    c = d.client()
    caps = c.get(f"{API}/diagnostics/runtime").body
    table = None
    for line in subprocess.run(["nft", "list", "tables"], capture_output=True,
                               text=True).stdout.splitlines():
        name = line.split()[-1]
        listing = subprocess.run(["nft", "list", "table", "inet", name], capture_output=True,
                                 text=True).stdout
        if cidr in listing:
            table = name
    assert table, caps
    # Someone's set where the next sandboxes' first domain rule set goes:
    # installing their policy fails in nftables.
    for slot in range(8):
        subprocess.run(["nft", f"add set inet {table} sb{slot}_0 {{ type ipv4_addr; }}"],
                       check=True)
    sb = make(c, egress={"default": "allow", "allow": ["allowed.test"]})
    res = probe(sb, [tcp("allowed.test"), tcp(inet.allowed), udp(inet.allowed)])
    assert not any(ok(res)), res
    view = network(sb)
    assert view["state"] == "cut_off" and view["address"] is None, view
    assert "nftables" in view["error"], view
    r = sb.exec(["cat", "/proc/net/dev"])
    ifaces = sorted(l.split(":")[0].strip() for l in r.body["stdout"].splitlines()[2:])
    assert ifaces == ["lo"]


def test_healthz_and_capabilities_say_the_mode_and_what_the_host_can_provide(pclient):
    sb = make(pclient)
    assert sb.exec(["true"]).status == 200
    worker = pclient.get("/healthz").body["worker"]
    net = worker["network"]
    assert net["mode"] == "private" and net["private_network"] == CIDR
    assert net["modes_available"] == ["host", "isolated", "private"]
    assert net["connected_sandboxes"] >= 1
    caps = worker["capabilities"]
    assert caps["network_mode"] == "private" and caps["private_network"] == CIDR
    assert caps["network_namespace"] is True and caps["egress_address_filter"] is True


def test_a_removed_table_cuts_every_sandbox_off_until_its_next_session(daemon_factory, inet):
    cidr = f"10.{200 + (os.getpid() + 11) % 50}.0.0/16"
    env = inet.daemon_env(cidr)
    env["SANDBOX_MAINTENANCE_INTERVAL_SECONDS"] = "1"
    c = daemon_factory(env).client()
    sb = make(c)
    assert ok(probe(sb, [tcp(inet.allowed)])) == [True]
    table = next(l.split()[-1] for l in subprocess.run(
        ["nft", "list", "tables"], capture_output=True, text=True).stdout.splitlines()
        if cidr in subprocess.run(["nft", "list", "table", "inet", l.split()[-1]],
                                  capture_output=True, text=True).stdout)
    # Without its table the link would forward unfiltered: the next
    # maintenance cycle cuts it off.
    subprocess.run(["nft", "delete", "table", "inet", table], check=True)
    deadline = time.time() + 15
    while time.time() < deadline and network(sb)["state"] != "cut_off":
        time.sleep(0.2)
    view = network(sb)
    assert view["state"] == "cut_off" and "table" in view["error"], view
    assert ok(probe(sb, [tcp(inet.allowed)])) == [False]
    # The table is back, and a new session has its network again.
    assert subprocess.run(["nft", "list", "table", "inet", table],
                          capture_output=True).returncode == 0
    r = c.post(sb.path + "/suspend", json={"generation": sb.generation})
    assert r.status == 200, r
    assert c.post(sb.path + "/resume", json={}).status == 200
    assert ok(probe(sb, [tcp(inet.allowed)])) == [True]
    assert network(sb)["state"] == "connected"


def test_the_cli_shows_and_sets_a_sandbox_egress_policy(pdaemon, inet):
    from conftest import find_binary
    cli = find_binary().parent / "sandloom"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp",
           "SANDLOOM_URL": f"http://127.0.0.1:{pdaemon.port}", "SANDLOOM_API_KEY": pdaemon.token}

    def run(*args):
        return subprocess.run([str(cli), *args], capture_output=True, text=True, env=env,
                              timeout=120)
    name = unique_id("cli")
    r = run("egress", "--default", "deny", "--allow", "allowed.test:8080", name)
    assert r.returncode == 0, r
    assert "egress (sandbox's): default deny" in r.stdout and "allowed.test:8080" in r.stdout
    r = run("exec", name, "--", "python3", "-c",
            "import socket\n"
            "for h in ('allowed.test', '%s'):\n"
            "    try:\n"
            "        socket.create_connection((h, 8080), 1.5); print(h, 'ok')\n"
            "    except OSError: print(h, 'blocked')" % inet.denied)
    assert r.stdout.split() == ["allowed.test", "ok", inet.denied, "blocked"], r
    r = run("--json", "network", name)
    doc = json.loads(r.stdout)
    assert doc["state"] == "connected" and doc["denied_connections"] > 0, doc
    # Options after the name too.
    r = run("egress", name, "--default", "deny", "--allow", "allowed.test:8080")
    assert r.returncode == 0 and "default deny" in r.stdout, r
    r = run("egress", "--inherit", name)
    assert r.returncode == 0 and "egress (worker's): default allow" in r.stdout, r
    r = run("egress", "--allow", "2001:db8::1", name)
    assert r.returncode == 1 and "EGRESS_POLICY_INVALID" in r.stderr, r
    assert run("egress", name).returncode == 2


def test_the_sdk_sets_and_reads_a_sandbox_egress_policy(pdaemon, inet):
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python"))
    import sandloom
    client = sandloom.Client(url=f"http://127.0.0.1:{pdaemon.port}", api_key=pdaemon.token)
    with sandloom.Sandbox.create(unique_id("sdk"), client=client) as sb:
        view = sb.set_egress("deny", allow=["allowed.test"])
        assert view["egress"] == {"default": "deny", "allow": ["allowed.test"], "deny": []}
        out = sb.run(["python3", "-c", "import socket; socket.create_connection(('%s', 8080), "
                      "1.5)" % inet.denied])
        assert not out.ok
        assert sb.network()["denied_connections"] > 0
        assert sb.inherit_egress()["egress_source"] == "worker"
        with pytest.raises(sandloom.InvalidRequest) as e:
            sb.set_egress("deny", allow=["not a rule"])
        assert e.value.code == "EGRESS_POLICY_INVALID"


def test_nothing_reaches_into_a_sandbox_but_the_hosts_root(pclient, inet):
    sb = make(pclient)
    srv = ("import socket\n"
           "s = socket.socket(); s.bind(('0.0.0.0', 7100)); s.listen(8)\n"
           "while True:\n"
           "    c, _ = s.accept(); c.sendall(b'inside\\n'); c.close()\n")
    assert sb.write("/workspace/in.py", srv).status == 200
    assert sb.exec(["python3", "/workspace/in.py"], background=True,
                   exec_scope=unique_id("bg")).status in (200, 202)
    addr = network(sb)["address"]
    dial = ("import socket, sys\n"
            "try:\n"
            "    c = socket.create_connection((sys.argv[1], 7100), 1.5)\n"
            "    print(c.recv(16).decode().strip())\n"
            "except OSError as e:\n"
            "    print('blocked', type(e).__name__)\n")
    # The host's root (the daemon, for the ports route): it reaches in.
    deadline = time.time() + 10
    out = ""
    while time.time() < deadline and out != "inside":
        out = subprocess.run(["python3", "-c", dial, addr], capture_output=True,
                             text=True).stdout.strip()
        time.sleep(0.2)
    assert out == "inside"
    # Another user of the host, and a machine on the far side: they do not.
    nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                             "/usr/bin/python3", "-c", dial, addr], capture_output=True,
                            text=True)
    assert nobody.stdout.startswith("blocked"), nobody
    far = subprocess.run(["ip", "netns", "exec", inet.ns, "/usr/bin/python3", "-c", dial, addr],
                         capture_output=True, text=True)
    assert far.stdout.startswith("blocked"), far


def test_a_tenants_policy_reaches_its_running_sandboxes_and_bounds_their_own(pclient, inet):
    tid = "net-" + unique_id("t")[-8:]
    assert pclient.post("/api/v1/admin/tenants", json={"tenant_id": tid}).status == 201
    key = pclient.post(f"/api/v1/admin/tenants/{tid}/keys", json={"name": "k"}).body["api_key"]
    from sandloom_client import Client
    tenant = Client("127.0.0.1", pclient.port, key)
    sb = make(tenant)
    assert ok(probe(sb, [tcp("denied.test")])) == [True]  # the worker's default: allow
    # The operator's policy for the tenant reaches its running sandbox at once.
    r = pclient.put(f"/api/v1/admin/tenants/{tid}/egress",
                    json={"egress": {"default": "deny", "allow": ["allowed.test"]}})
    assert r.status == 200 and r.body["egress"]["default"] == "deny", r
    assert ok(probe(sb, [tcp("allowed.test"), tcp("denied.test")])) == [True, False]
    assert network(sb)["egress_source"] == "tenant"
    # The tenant opening its own sandbox stays within the tenant's policy.
    r = set_egress(sb, {"default": "allow"})
    assert r.status == 200 and r.body["tenant_bound"]["default"] == "deny", r
    assert ok(probe(sb, [tcp("allowed.test"), tcp("denied.test")])) == [True, False]
    # A tenant key cannot reach the operator's route.
    assert_error(tenant.put(f"/api/v1/admin/tenants/{tid}/egress", json={"egress": None}),
                 403, "TENANT_FORBIDDEN")
    r = pclient.put(f"/api/v1/admin/tenants/{tid}/egress", json={"egress": None})
    assert r.status == 200 and r.body["egress"] is None
