"""The ports route (ours): /api/v1/sandboxes/{id}/ports/{port}/{path} carries
HTTP and WebSocket to a server listening inside the sandbox, in every
network mode, through the sandbox's own network (private, isolated) or, in
host mode, only to a listener of the sandbox's own uid; never to the host's
services or another sandbox's. Refusals are JSON with their codes.
"""
import asyncio
import base64
import http.client
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import websockets

from conftest import Daemon

PORT = 8123  # where the servers inside the sandboxes listen

# A server for inside the sandbox: answers what it was asked, as JSON, and
# a WebSocket echo on PORT + 1 (Debian's python3-websockets, which the
# sandbox sees through the host's /usr).
ECHO_SERVER = r'''
import json, sys, threading, asyncio
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port = int(sys.argv[1])
class H(BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if self.path.startswith("/status/"):
            code = int(self.path.split("/")[2])
            self.send_response(code); self.send_header("Content-Length", "0"); self.end_headers()
            return
        doc = {"method": self.command, "path": self.path, "headers": dict(self.headers),
               "body": body.decode("latin-1")}
        out = json.dumps(doc).encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "session=abc; Path=/")
        self.send_header("X-From-Sandbox", "yes")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)
    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = answer
    def log_message(self, *a): pass
threading.Thread(target=ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever,
                 daemon=True).start()
import websockets
async def echo(ws, path):
    async for m in ws:
        await ws.send(m)
async def main():
    async with websockets.serve(echo, "127.0.0.1", port + 1):
        print("ready", flush=True)
        await asyncio.Future()
asyncio.run(main())
'''


@pytest.fixture(scope="module", params=["private", "isolated", "host"])
def daemon(request, sandloomd_binary):
    d = Daemon(sandloomd_binary, {"SANDBOX_NETWORK_MODE": request.param,
                                  "SANDBOX_PORT_TIMEOUT_SECONDS": "3",
                                  "SANDBOX_PORT_MAX_BODY_BYTES": str(1 << 20),
                                  "SANDBOX_PORTS_DOMAIN": "ports.test"}).spawn()
    d.mode = request.param
    try:
        d.wait_healthy()
        yield d
    finally:
        d.cleanup()


def start_servers(sb, port=PORT):
    assert sb.write("/workspace/echo_server.py", ECHO_SERVER).status == 200
    r = sb.exec(["sh", "-c", f"nohup python3 /workspace/echo_server.py {port} "
                             f"> /workspace/server.log 2>&1 &"])
    assert r.status == 200, r
    deadline = time.time() + 20
    while time.time() < deadline:
        log = sb.exec(["cat", "/workspace/server.log"]).body["stdout"]
        if "ready" in log:
            return
        time.sleep(0.2)
    raise AssertionError(f"the servers in the sandbox did not start: {log}")


def request(daemon, method, path, body=None, headers=None, auth=True):
    c = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
    h = dict(headers or {})
    if auth:
        h["Authorization"] = f"Bearer {daemon.token}"
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, r.headers, data


@pytest.fixture(scope="module")
def served(daemon, request):
    from sandloom_client import Sandbox
    import uuid
    sb = Sandbox(daemon.client(), "ports-" + uuid.uuid4().hex[:12], "scope-" + uuid.uuid4().hex[:8])
    assert sb.resolve().status == 200 and sb.connect().status == 200
    start_servers(sb)
    yield sb
    sb.release()


def base(sb, port=PORT):
    return f"/api/v1/sandboxes/{sb.id}/ports/{port}"


# -- HTTP ------------------------------------------------------------------------
def test_a_request_reaches_the_server_as_it_was_sent(daemon, served):
    status, headers, data = request(daemon, "POST", base(served) + "/a/b%20c/?x=1&y=two%20words",
                                    body=b"payload \x00\xff", headers={"X-Custom": "kept",
                                                                       "Content-Type": "text/x"})
    assert status == 201, data
    doc = json.loads(data)
    assert doc["method"] == "POST"
    assert doc["path"] == "/a/b%20c/?x=1&y=two%20words"
    assert doc["body"] == "payload \x00\xff"
    h = {k.lower(): v for k, v in doc["headers"].items()}
    assert h["x-custom"] == "kept" and h["content-type"] == "text/x"
    assert h["host"] == f"localhost:{PORT}"
    assert h["x-forwarded-prefix"] == base(served)
    assert "authorization" not in h, "our bearer token reached the app"
    # Its answer comes back as it gave it.
    assert headers["X-From-Sandbox"] == "yes"
    assert headers["Set-Cookie"] == "session=abc; Path=/"
    assert headers["Content-Type"] == "application/json"


def test_the_root_with_and_without_a_slash_and_every_method(daemon, served):
    for path in (base(served), base(served) + "/"):
        status, _, data = request(daemon, "GET", path)
        assert status == 200 and json.loads(data)["path"] == "/", (path, data)
    for method in ("PUT", "PATCH", "DELETE", "OPTIONS"):
        status, _, data = request(daemon, method, base(served) + "/m", body=b"x")
        assert status == 200 and json.loads(data)["method"] == method, (method, data)
    status, headers, data = request(daemon, "HEAD", base(served) + "/h")
    assert status == 200 and data == b""
    status, _, _ = request(daemon, "GET", base(served) + "/status/404")
    assert status == 404


def test_the_host_based_form_puts_the_app_at_the_root(daemon, served):
    """SANDBOX_PORTS_DOMAIN: Host <port>-<id>.<domain> is that port of that
    sandbox, the path as it is (an app that must live at /)."""
    host = f"{PORT}-{served.id}.ports.test"
    for h in (host, host + ":8080", host.upper().replace(served.id.upper(), served.id)):
        status, headers, data = request(daemon, "GET", "/assets/app.js?v=2", headers={"Host": h})
        assert status == 200, (h, data)
        doc = json.loads(data)
        assert doc["path"] == "/assets/app.js?v=2", doc
    # Still the API's token, and the API's own paths under other hosts.
    status, _, _ = request(daemon, "GET", "/", headers={"Host": host}, auth=False)
    assert status == 401
    status, _, data = request(daemon, "GET", "/healthz", headers={"Host": "other.test"})
    assert status == 200 and json.loads(data)["status"] == "ok"
    # A label that is not <port>-<id> is not the form.
    for bad in (f"x{PORT}-{served.id}.ports.test", f"{PORT}{served.id}.ports.test",
                f"{PORT}-{served.id}.a.ports.test"):
        status, _, data = request(daemon, "GET", "/healthz", headers={"Host": bad})
        assert status == 200, (bad, data)


def test_refusals_are_json_with_their_codes(daemon, served):
    def code(status, data):
        return status, json.loads(data)["detail"]["code"]

    # Nothing listens there.
    status, _, data = request(daemon, "GET", base(served, PORT + 7) + "/")
    assert code(status, data) == (502, "SANDBOX_PORT_NOT_LISTENING"), data
    # Not a port.
    for bad in ("0", "65536", "http"):
        status, _, data = request(daemon, "GET", f"/api/v1/sandboxes/{served.id}/ports/{bad}/")
        assert code(status, data) == (422, "SANDBOX_INVALID_REQUEST"), (bad, data)
    # The fence: a generation that is not the sandbox's.
    status, _, data = request(daemon, "GET", base(served) + "/",
                              headers={"X-Sandbox-Generation": str(served.generation + 3)})
    assert status == 409, data
    status, _, data = request(daemon, "GET", base(served) + "/",
                              headers={"X-Sandbox-Generation": str(served.generation)})
    assert status == 200, data
    # No token, no way in.
    status, _, data = request(daemon, "GET", base(served) + "/", auth=False)
    assert code(status, data) == (401, "SANDBOX_UNAUTHORIZED"), data
    # An answer past SANDBOX_PORT_MAX_BODY_BYTES (1 MiB here).
    status, _, data = request(daemon, "POST", base(served) + "/big", body=b"z" * (2 << 20))
    assert code(status, data) == (502, "SANDBOX_PORT_BAD_ANSWER"), data


class HostService(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "12")
        self.end_headers()
        self.wfile.write(b"host-secret!")

    def log_message(self, *a):
        pass


def test_the_route_never_reaches_the_hosts_services(daemon, served):
    """A server of the host (root's, on the host's loopback) on a port the
    sandbox does not serve: the route finds nothing in the sandbox, in
    every mode (host mode checks the listener's owner)."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), HostService)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with socket.create_connection(("127.0.0.1", port), 5):
            pass  # it is there for the host
        status, _, data = request(daemon, "GET", base(served, port) + "/")
        assert status == 502 and b"host-secret" not in data, data
        assert json.loads(data)["detail"]["code"] == "SANDBOX_PORT_NOT_LISTENING"
        # Nor the daemon's own API port.
        status, _, data = request(daemon, "GET", base(served, daemon.port) + "/healthz")
        assert status == 502, data
    finally:
        srv.shutdown()


def test_another_sandboxs_server_is_not_reached(daemon, served, new_sandbox):
    other = new_sandbox()
    assert other.resolve().status == 200 and other.connect().status == 200
    status, _, data = request(daemon, "GET", base(other) + "/")
    assert status == 502, (daemon.mode, data)


# -- WebSocket ---------------------------------------------------------------------
def test_a_websocket_is_relayed_both_ways(daemon, served):
    async def body():
        url = f"ws://127.0.0.1:{daemon.port}{base(served, PORT + 1)}/"
        async with websockets.connect(url, extra_headers={"Authorization": f"Bearer {daemon.token}"},
                                      max_size=2**22) as ws:
            await ws.send("hello through the port")
            assert await ws.recv() == "hello through the port"
            blob = bytes(range(256)) * 4096  # 1 MiB, past one relay buffer
            await ws.send(blob)
            assert await asyncio.wait_for(ws.recv(), 30) == blob
            for i in range(50):
                await ws.send(f"m{i}")
            for i in range(50):
                assert await ws.recv() == f"m{i}"

    asyncio.run(asyncio.wait_for(body(), 60))


def test_a_websocket_to_a_plain_http_server_is_refused_clearly(daemon, served):
    key = base64.b64encode(b"0123456789abcdef").decode()
    status, _, data = request(daemon, "GET", base(served) + "/ws",
                              headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                       "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": key})
    assert status == 502, data
    assert json.loads(data)["detail"]["code"] == "SANDBOX_PORT_BAD_ANSWER"


class HostService6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def test_host_mode_never_takes_a_v4_mapped_listener_for_the_hosts_ipv6_loopback(
        daemon_factory):
    """Host mode: a sandbox that binds ::ffff:127.0.0.1:P holds IPv4's port
    only; [::1]:P may be a service of the host, which the route must not
    reach in the sandbox's name."""
    d = daemon_factory({"SANDBOX_NETWORK_MODE": "host"})
    from sandloom_client import Sandbox
    import uuid
    sb = Sandbox(d.client(), "v4m-" + uuid.uuid4().hex[:10], "scope-v4m")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    srv = HostService6(("::1", 0), HostService)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        code = ("import socket,time; s=socket.socket(socket.AF_INET6); "
                f"s.bind(('::ffff:127.0.0.1', {port})); s.listen(); print('bound', flush=True); "
                "time.sleep(30)")
        r = sb.exec(["sh", "-c", f"nohup python3 -c \"{code}\" > /workspace/b.log 2>&1 &"])
        assert r.status == 200, r
        deadline = time.time() + 10
        while "bound" not in sb.exec(["cat", "/workspace/b.log"]).body["stdout"]:
            assert time.time() < deadline, sb.exec(["cat", "/workspace/b.log"]).body
            time.sleep(0.2)
        status, _, data = request(d, "GET", f"/api/v1/sandboxes/{sb.id}/ports/{port}/")
        assert status == 502 and b"host-secret" not in data, data
    finally:
        srv.shutdown()
        sb.release()
