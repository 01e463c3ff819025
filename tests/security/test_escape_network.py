"""Sandbox escape attempts over the network: reaching services that listen
on the host's loopback. Only loopback is ever targeted."""

import secrets
import socket
import threading
import time

from sec_helpers import GVISOR, execution_backend, probe

PROBE = r'''
res = {}
def tcp():
    s = socket.create_connection(("127.0.0.1", P["port"]), timeout=3)
    s.sendall(P["hello"].encode())
    s.close()
res["tcp 127.0.0.1"] = oserr(tcp)
def daemon_port():
    socket.create_connection(("127.0.0.1", P["dport"]), timeout=3).close()
res["daemon port"] = oserr(daemon_port)
def abstract():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect("\0" + P["abstract"])
    s.close()
res["abstract unix"] = oserr(abstract)
R["connect"] = res
R["interfaces"] = sorted(name for _, name in socket.if_nameindex())
'''


class Listener:
    """A TCP listener on 127.0.0.1:<free port> and an abstract unix socket,
    recording what connects (accept loop in a thread)."""

    def __init__(self):
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(8)
        self.port = self.tcp.getsockname()[1]
        self.abstract_name = "sandloom-sec-" + secrets.token_hex(8)
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind("\0" + self.abstract_name)
        self.unix.listen(8)
        self.received = []
        self.unix_accepts = 0
        self._stop = False
        self.threads = [threading.Thread(target=self._loop_tcp, daemon=True),
                        threading.Thread(target=self._loop_unix, daemon=True)]
        for t in self.threads:
            t.start()

    def _loop_tcp(self):
        self.tcp.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.tcp.accept()
            except (socket.timeout, OSError):
                continue
            conn.settimeout(2)
            try:
                self.received.append(conn.recv(100))
            except OSError:
                pass
            conn.close()

    def _loop_unix(self):
        self.unix.settimeout(0.2)
        while not self._stop:
            try:
                conn, _ = self.unix.accept()
            except (socket.timeout, OSError):
                continue
            self.unix_accepts += 1
            conn.close()

    def close(self):
        self._stop = True
        for t in self.threads:
            t.join(2)
        self.tcp.close()
        self.unix.close()


# ---------------------------------------------------------------------------
# 12
def test_isolated_network_cannot_reach_host_loopback(private_daemon, isolated_daemon, daemon,
                                                    make_sandbox):
    """Attempt: the test opens a TCP listener on 127.0.0.1:<free port> and an
    abstract unix socket on the host; a sandbox of a daemon started with
    SANDBOX_NETWORK_MODE=isolated connects to both (and to its own daemon's
    port) and lists its network interfaces; so does a sandbox of the
    default daemon (the private mode, ours).
    Must hold (isolated and private): every connection fails, nothing
    reaches the listeners; `lo` is the only interface of the isolated one,
    `lo` and `eth0` of the private one.
    Also asserted, documenting the reference's default (RUNTIME.md §7.2:
    `host` mode shares the worker's network namespace, "including loopback
    and the control plane"), still selectable: from a sandbox of a daemon
    in host mode the same TCP and abstract-socket connections succeed.
    Under gVisor the host mode is the Sentry on the host's network stack
    (hostinet), which carries inet sockets only: abstract unix sockets stay
    the Sentry's own, so there the host's abstract socket must NOT be
    reached (refused, and its listener accepts nothing)."""
    lst = Listener()
    hello = "hello-" + secrets.token_hex(6)
    try:
        iso = make_sandbox(isolated_daemon, "net-iso")
        R_iso, body = probe(iso, PROBE, {"port": lst.port, "dport": isolated_daemon.port,
                                         "abstract": lst.abstract_name, "hello": hello + "-iso"})
        priv = make_sandbox(private_daemon, "net-priv")
        R_priv, body_p = probe(priv, PROBE, {"port": lst.port, "dport": private_daemon.port,
                                             "abstract": lst.abstract_name,
                                             "hello": hello + "-priv"})
        time.sleep(0.5)
        closed_received, closed_unix = list(lst.received), lst.unix_accepts

        host = make_sandbox(daemon, "net-host")  # the suite's daemon: host mode
        R_host, body_h = probe(host, PROBE, {"port": lst.port, "dport": daemon.port,
                                             "abstract": lst.abstract_name, "hello": hello + "-host"})
        for _ in range(20):
            if any(hello.encode() + b"-host" in r for r in lst.received):
                break
            time.sleep(0.1)
    finally:
        lst.close()
    for name, R in (("isolated", R_iso), ("private", R_priv)):
        ok = {k: v for k, v in R["connect"].items() if v == "OK"}
        assert ok == {}, f"a {name} sandbox reached the host's loopback: {R['connect']}"
    assert closed_received == [] and closed_unix == 0, (closed_received, closed_unix)
    assert R_iso["interfaces"] == ["lo"], f"isolated sandbox interfaces: {R_iso['interfaces']}"
    assert R_priv["interfaces"] == ["eth0", "lo"], f"private: {R_priv['interfaces']}"
    # Host mode, the reference's default: loopback is shared (documented, not an escape).
    assert R_host["connect"]["tcp 127.0.0.1"] == "OK", R_host
    if execution_backend(daemon) == GVISOR:
        assert R_host["connect"]["abstract unix"] != "OK" and lst.unix_accepts == 0, \
            (R_host, lst.unix_accepts)
    else:
        assert R_host["connect"]["abstract unix"] == "OK", R_host
    assert any(hello.encode() + b"-host" in r for r in lst.received), lst.received
    assert "lo" in R_host["interfaces"] and len(R_host["interfaces"]) > 1, R_host["interfaces"]
