"""A test internet for the private network mode, made on this machine only.

TestInternet is a network namespace of the test's own ("slt-inet-<n>")
joined to the host by a veth pair, holding the destinations the tests
reach: a documentation /24 (198.51.100.0/24 unless this host already uses
it) standing for public addresses, a private /24 (172.31.<n>.0/24), and the
metadata address 169.254.169.254, each routed to it from the host. Inside,
one Python process serves TCP (answers "tcp <local address>") and UDP
("udp <local address>") on every address. A dnsmasq on 127.0.0.1 answers
the test names from a hosts file the test can change (reload()).

Nothing here reaches beyond this machine: every address lives in the
namespace, and the routes are removed with it.
"""
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import textwrap
import time

SERVER = textwrap.dedent("""
    import socket, sys, threading
    def tcp(port):
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port)); s.listen(64)
        while True:
            c, _ = s.accept()
            try:
                c.sendall(("tcp %s\\n" % c.getsockname()[0]).encode())
            finally:
                c.close()
    def udp(addr, port):
        # One socket per address: the answer comes from the address and
        # port asked, as conntrack (and any client) expects.
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((addr, port))
        while True:
            data, peer = s.recvfrom(512)
            s.sendto(("udp %s\\n" % addr).encode(), peer)
    for a in sys.argv[1:]:
        threading.Thread(target=udp, args=(a, 9090), daemon=True).start()
    threading.Thread(target=tcp, args=(80,), daemon=True).start()
    print("ready", flush=True)
    tcp(8080)
""")


def _run(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def _in_use(net):
    """Is `net` an address range this host already routes or resolves to?"""
    for line in _run("ip", "-4", "-o", "addr", "show").stdout.splitlines():
        addr = line.split()[3]
        if ipaddress.ip_interface(addr).ip in net:
            return True
    for line in _run("ip", "-4", "route", "show").stdout.splitlines():
        dst = line.split()[0]
        if dst != "default" and ipaddress.ip_network(dst, strict=False).overlaps(net):
            return True
    names = ["registry.npmjs.org", "deb.debian.org"]
    try:
        with open("/etc/resolv.conf") as f:
            names += [l.split()[1] for l in f if l.startswith("nameserver")]
    except OSError:
        pass
    for n in names:
        try:
            for info in socket.getaddrinfo(n, None, socket.AF_INET):
                if ipaddress.ip_address(info[4][0]) in net:
                    return True
        except (OSError, ValueError):
            pass
    return False


def free_dns_port():
    """A port free for both UDP and TCP on 127.0.0.1: dnsmasq listens on
    both, and a port picked for UDP alone can be some client's TCP port."""
    while True:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        port = u.getsockname()[1]
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            t.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            t.close()
            u.close()


class TestInternet:
    __test__ = False  # not a test class, for pytest

    def __init__(self, state_dir):
        self.dir = state_dir
        n = os.getpid() % 200 + 20
        self.ns = f"slt-inet-{n}"
        self.host_if = f"slt-ih{n}"
        public = None
        # Documentation ranges, then the retired 6to4 relay range: public
        # addresses no host of this kind routes anywhere.
        for cand in ("198.51.100.0/24", "203.0.113.0/24", "192.0.2.0/24", "192.88.99.0/24"):
            if not _in_use(ipaddress.ip_network(cand)):
                public = ipaddress.ip_network(cand)
                break
        assert public, "every documentation range is in use on this host"
        p = list(public.hosts())
        self.public_net = str(public)
        self.gw = str(p[0])                       # the host's end
        self.allowed, self.denied, self.other = str(p[9]), str(p[10]), str(p[11])
        self.private_net = f"172.31.{n}.0/24"
        self.private = f"172.31.{n}.10"
        self.metadata = "169.254.169.254"
        self.dns_port = None  # chosen when dnsmasq starts
        self.hosts = os.path.join(state_dir, "hosts")
        self.procs = []

    # -- lifecycle ---------------------------------------------------------
    def start(self):
        """Make the namespace and its servers; on any failure, remove what
        was made (a half-made test internet would hold its range, and the
        next attempt would find every range in use)."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self):
        _run("ip", "netns", "del", self.ns, check=False)
        _run("ip", "link", "del", self.host_if, check=False)
        _run("ip", "netns", "add", self.ns)
        _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", "eth0",
             "netns", self.ns)
        _run("ip", "addr", "add", f"{self.gw}/24", "dev", self.host_if)
        _run("ip", "link", "set", self.host_if, "up")
        ns = ["ip", "-n", self.ns]
        _run(*ns, "link", "set", "lo", "up")
        _run(*ns, "link", "set", "eth0", "up")
        for a in (self.allowed, self.denied, self.other):
            _run(*ns, "addr", "add", f"{a}/24", "dev", "eth0")
        _run(*ns, "addr", "add", f"{self.private}/24", "dev", "eth0")
        _run(*ns, "addr", "add", f"{self.metadata}/32", "dev", "eth0")
        _run(*ns, "route", "add", "default", "via", self.gw)
        # The host reaches the private and metadata addresses through the
        # namespace too, so only the policy stands between them and a sandbox.
        # replace, not add: a run killed before its teardown leaves its own.
        _run("ip", "route", "replace", self.private_net, "via", self.allowed, "dev",
             self.host_if)
        _run("ip", "route", "replace", f"{self.metadata}/32", "via", self.allowed, "dev",
             self.host_if)
        srv = subprocess.Popen(["ip", "netns", "exec", self.ns, "python3", "-c", SERVER,
                                self.allowed, self.denied, self.other, self.private,
                                self.metadata],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(srv)
        assert srv.stdout.readline().strip() == "ready"
        self.write_hosts({"allowed.test": self.allowed, "denied.test": self.denied,
                          "moving.test": self.allowed, "other.test": self.other,
                          "metadata.test": self.metadata, "private.test": self.private,
                          "a.wild.test": self.allowed, "b.wild.test": self.other})
        self._start_dns()
        # The host itself reaches every destination (so a failure from a
        # sandbox is the sandbox's network, not the test's).
        for a in (self.allowed, self.private, self.metadata):
            with socket.create_connection((a, 8080), 2) as c:
                assert c.recv(64).startswith(b"tcp")
        return self

    def _start_dns(self):
        """dnsmasq on a free port; a port taken between the choice and the
        bind (anything on the host may take one) means another port, not a
        failed run: up to five tries."""
        dnsmasq = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
        self.dns_log = os.path.join(self.dir, "dnsmasq.log")
        for _ in range(5):
            self.dns_port = free_dns_port()
            # --user=root: dnsmasq stays the user that can read the test's own
            # (0700) directory, and needs no "dnsmasq" account on the host.
            # Its log is kept, so a start that fails says why.
            with open(self.dns_log, "w") as log:
                self.dns = subprocess.Popen(
                    [dnsmasq, "--no-daemon", "--user=root", "--port", str(self.dns_port),
                     "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv",
                     "--no-hosts", "--addn-hosts", self.hosts, "--local-ttl=1", "--pid-file=",
                     "--log-facility=-"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            deadline = time.time() + 10
            while (time.time() < deadline and self.dns.poll() is None
                   and self.lookup("allowed.test") != self.allowed):
                time.sleep(0.05)
            with open(self.dns_log) as f:
                said = f.read()[-2000:]
            if self.dns.poll() is not None and "Address already in use" in said:
                continue
            break
        self.procs.append(self.dns)
        answer = dns_query(("127.0.0.1", self.dns_port), "allowed.test")
        assert answer[1] == self.allowed, (
            f"dnsmasq on port {self.dns_port} did not answer allowed.test "
            f"(exit {self.dns.poll()}, answer {answer}): {said}")

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()
        _run("ip", "route", "del", self.private_net, check=False)
        _run("ip", "route", "del", f"{self.metadata}/32", check=False)
        _run("ip", "link", "del", self.host_if, check=False)
        _run("ip", "netns", "del", self.ns, check=False)

    # -- names ------------------------------------------------------------------
    def write_hosts(self, names):
        self.names = dict(names)
        with open(self.hosts + ".tmp", "w") as f:
            for name, addr in names.items():
                f.write(f"{addr} {name}\n")
        os.replace(self.hosts + ".tmp", self.hosts)

    def reload(self, **changes):
        """Change names (moving_test="1.2.3.4" for moving.test) and have
        dnsmasq read its hosts file again."""
        names = dict(self.names)
        for k, v in changes.items():
            names[k.replace("_", ".")] = v
        self.write_hosts(names)
        self.dns.send_signal(signal.SIGHUP)
        deadline = time.time() + 5
        name, want = next(iter(changes.items()))
        while time.time() < deadline and self.lookup(name.replace("_", ".")) != want:
            time.sleep(0.05)

    def lookup(self, name):
        """dnsmasq's answer (an A record) for name, asked from the host."""
        return dns_query(("127.0.0.1", self.dns_port), name)[1]

    def daemon_env(self, cidr):
        return {"SANDBOX_NETWORK_MODE": "private", "SANDBOX_PRIVATE_NETWORK_CIDR": cidr,
                "SANDBOX_DNS_SERVERS": f"127.0.0.1:{self.dns_port}"}


def dns_query(server, name, qtype=1, timeout=2.0):
    """(rcode, first A record or None) of one UDP query."""
    qid = os.urandom(2)
    q = qid + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + qtype.to_bytes(2, "big") + b"\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        s.sendto(q, server)
        data, _ = s.recvfrom(4096)
    except OSError:
        return None, None
    finally:
        s.close()
    rcode = data[3] & 0x0F
    an = int.from_bytes(data[6:8], "big")
    at = len(q)
    for _ in range(an):
        if data[at] & 0xC0 == 0xC0:
            at += 2
        else:
            while data[at]:
                at += data[at] + 1
            at += 1
        rtype = int.from_bytes(data[at:at + 2], "big")
        rdlen = int.from_bytes(data[at + 8:at + 10], "big")
        at += 10
        if rtype == 1 and rdlen == 4:
            return rcode, socket.inet_ntoa(data[at:at + 4])
        at += rdlen
    return rcode, None


# The probe a sandbox runs: one JSON list of checks in argv[1], one JSON
# list of results on stdout. Every check is bounded by a short timeout.
PROBE = textwrap.dedent("""
    import json, os, socket, struct, sys
    def dns(server, name):
        q = os.urandom(2) + b"\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00"
        for l in name.split("."):
            q += bytes([len(l)]) + l.encode()
        q += b"\\x00\\x00\\x01\\x00\\x01"
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
        s.sendto(q, (server, 53)); d, _ = s.recvfrom(4096)
        return "rcode %d" % (d[3] & 15)
    def one(c):
        k = c["kind"]
        t = c.get("timeout", 1.5)
        try:
            if k == "tcp":
                with socket.create_connection((c["host"], c["port"]), t) as s:
                    s.settimeout(t)
                    return "ok " + s.recv(64).decode().strip()
            if k == "udp":
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(t)
                s.sendto(b"x", (c["host"], c["port"]))
                return "ok " + s.recv(64).decode().strip()
            if k == "resolve":
                return "ok " + socket.gethostbyname(c["name"])
            if k == "unix":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(t)
                s.connect("\\0" + c["name"]); return "ok connected"
            if k == "dns":
                return "ok " + dns(c["server"], c["name"])
        except TimeoutError:
            return "fail timeout"
        except ConnectionRefusedError:
            return "fail refused"
        except socket.gaierror:
            return "fail noname"
        except Exception as e:
            return "fail %s" % type(e).__name__
    print(json.dumps([one(c) for c in json.loads(sys.argv[1])]))
""")


def probe(sb, checks, env=None, exec_timeout=60):
    """Run the checks inside sandbox sb (a conftest Sandbox); their results."""
    if not getattr(sb, "_probe_written", False):
        r = sb.write("/workspace/.probe.py", PROBE)
        assert r.status == 200, r
        sb._probe_written = True
    # A scope of its own: background commands of the test hold theirs.
    fields = {"exec_scope": "probe-" + os.urandom(6).hex()}
    if env:
        fields["env"] = env
    r = sb.exec(["python3", "/workspace/.probe.py", json.dumps(checks)], timeout=exec_timeout,
                **fields)
    assert r.status == 200, r
    assert r.body["exit_code"] == 0, r.body
    return json.loads(r.body["stdout"])


def tcp(host, port=8080, **kw):
    return dict(kind="tcp", host=host, port=port, **kw)


def udp(host, port=9090, **kw):
    return dict(kind="udp", host=host, port=port, **kw)
