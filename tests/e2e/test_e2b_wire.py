"""E2B's protocol on the wire (issue 17), where the SDKs never go: the
host form under SANDBOX_E2B_DOMAIN, refusals in E2B's and Connect's
shapes, the two kinds of token, compressed uploads. What the SDKs do is
tests/e2e/test_e2b_sdk.py's."""

import gzip
import http.client
import json
import struct

import pytest

from conftest import Daemon


def call(daemon, method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=60)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        c.request(method, path, body=data, headers=headers or {})
        r = c.getresponse()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
    finally:
        c.close()


def create(daemon, body=None):
    status, _, raw = call(daemon, "POST", "/v2/sandboxes", body or {},
                          {"X-API-KEY": daemon.token, "Content-Type": "application/json"})
    assert status == 201, raw
    return json.loads(raw)


def envd(sbx, **extra):
    return {"E2b-Sandbox-Id": sbx["sandboxID"], "E2b-Sandbox-Port": "49983",
            "X-Access-Token": sbx["envdAccessToken"], **extra}


def envelope(msg):
    raw = json.dumps(msg).encode()
    return b"\0" + struct.pack(">I", len(raw)) + raw


def frames(raw):
    out = []
    while raw:
        flags, n = raw[0], struct.unpack(">I", raw[1:5])[0]
        out.append((flags, json.loads(raw[5:5 + n])))
        raw = raw[5 + n:]
    return out


@pytest.fixture(scope="module")
def e2b_daemon(sandloomd_binary):
    d = Daemon(sandloomd_binary, {"SANDBOX_E2B_DOMAIN": "sbx.e2b.test"}).spawn()
    try:
        d.wait_healthy()
        yield d
    finally:
        d.cleanup()


def test_the_host_form_reaches_a_sandboxs_envd(e2b_daemon):
    sbx = create(e2b_daemon)
    assert sbx["domain"] == "sbx.e2b.test", sbx
    host = {"Host": f"49983-{sbx['sandboxID']}.sbx.e2b.test:{e2b_daemon.port}",
            "X-Access-Token": sbx["envdAccessToken"]}
    status, _, raw = call(e2b_daemon, "GET", "/health", headers=host)
    assert status == 204, raw
    # The API's own /health is still the API's without that Host.
    status, _, raw = call(e2b_daemon, "GET", "/health")
    assert status == 200 and raw == b"ok", raw
    # Another domain, or another port, is not a sandbox's.
    status, _, raw = call(e2b_daemon, "GET", "/health",
                          headers={"Host": f"49983-{sbx['sandboxID']}.other.test"})
    assert status == 200 and raw == b"ok", raw


def test_tokens_open_their_own_sandbox_and_kind_only(e2b_daemon):
    a, b = create(e2b_daemon), create(e2b_daemon)
    assert a["envdAccessToken"].startswith(a["sandboxID"] + "."), a
    assert a["trafficAccessToken"] != a["envdAccessToken"], a
    # Another sandbox's token, no token, a traffic token on envd: 401.
    for token in (b["envdAccessToken"], None, a["trafficAccessToken"]):
        h = envd(a)
        if token is None:
            del h["X-Access-Token"]
        else:
            h["X-Access-Token"] = token
        status, _, raw = call(e2b_daemon, "GET", "/health", headers=h)
        assert status == 401, (token, raw)
    # The traffic token opens the interpreter's context calls.
    h = {"E2b-Sandbox-Id": a["sandboxID"], "E2b-Sandbox-Port": "49999",
         "E2B-Traffic-Access-Token": a["trafficAccessToken"]}
    status, _, raw = call(e2b_daemon, "GET", "/contexts", headers=h)
    assert status == 200 and json.loads(raw) == [], raw


def test_refusals_have_e2bs_and_connects_shapes(e2b_daemon):
    sbx = create(e2b_daemon)
    # The control plane: {"code": <status>, "message"}.
    status, _, raw = call(e2b_daemon, "GET", "/sandboxes/inope", headers={"X-API-KEY": e2b_daemon.token})
    assert status == 404 and json.loads(raw)["code"] == 404, raw
    status, _, raw = call(e2b_daemon, "POST", f"/sandboxes/{sbx['sandboxID']}/fork", {},
                          {"X-API-KEY": e2b_daemon.token})
    assert status == 501 and json.loads(raw)["code"] == 501, raw
    status, _, raw = call(e2b_daemon, "POST", "/v2/sandboxes", {"timeout": "soon"},
                          {"X-API-KEY": e2b_daemon.token})
    assert status == 400 and "timeout" in json.loads(raw)["message"], raw
    status, _, raw = call(e2b_daemon, "POST", "/v2/sandboxes", {}, {"X-API-KEY": "e2b_nothex"})
    assert status == 401, raw
    # A unary RPC: non-200, JSON, a lowercase code.
    status, hdr, raw = call(e2b_daemon, "POST", "/filesystem.Filesystem/Stat", {"path": "nope"},
                            envd(sbx, **{"Content-Type": "application/json"}))
    assert status == 404 and hdr["content-type"].startswith("application/json"), raw
    assert json.loads(raw)["code"] == "not_found", raw
    status, _, raw = call(e2b_daemon, "POST", "/filesystem.Filesystem/Stat", {"path": "/etc"},
                          envd(sbx, **{"Content-Type": "application/json"}))
    assert status == 400 and json.loads(raw)["code"] == "invalid_argument", raw
    status, _, raw = call(e2b_daemon, "POST", "/filesystem.Filesystem/CreateWatcher", {},
                          envd(sbx, **{"Content-Type": "application/json"}))
    assert status == 501 and json.loads(raw)["code"] == "unimplemented", raw
    # A stream: 200 and the error in the end-stream envelope.
    status, hdr, raw = call(e2b_daemon, "POST", "/process.Process/Start", b"\0\0\0",
                            envd(sbx, **{"Content-Type": "application/connect+json"}))
    assert status == 200 and hdr["content-type"] == "application/connect+json", raw
    assert frames(raw) == [(2, {"error": {"code": "invalid_argument", "message": frames(raw)[0][1]["error"]["message"]}})], raw
    status, _, raw = call(e2b_daemon, "POST", "/process.Process/Connect",
                          envelope({"process": {"pid": 12345}}),
                          envd(sbx, **{"Content-Type": "application/connect+json"}))
    assert status == 200 and frames(raw)[-1][1]["error"]["code"] == "not_found", raw


def test_a_process_streams_start_data_end_and_the_end_stream(e2b_daemon):
    sbx = create(e2b_daemon)
    status, _, raw = call(e2b_daemon, "POST", "/process.Process/Start",
                          envelope({"process": {"cmd": "/bin/sh", "args": ["-c", "printf hi; exit 4"]}}),
                          envd(sbx, **{"Content-Type": "application/connect+json"}))
    assert status == 200, raw
    f = frames(raw)
    assert f[0][0] == 0 and "start" in f[0][1]["event"], f  # first, always
    assert {"data": {"stdout": "aGk="}} in [m["event"] for _, m in f[1:-1] if "event" in m], f
    end = [m["event"]["end"] for _, m in f if "event" in m and "end" in m["event"]]
    assert end == [{"exitCode": 4, "exited": True, "status": "exit status 4",
                    "error": "exit status 4"}], f
    assert f[-1] == (2, {}), f


def test_uploads_compressed_or_not(e2b_daemon):
    sbx = create(e2b_daemon)
    base = "/files?path=%2Fhome%2Fuser%2Fz.txt"
    data = b"hello " * 500
    status, _, raw = call(e2b_daemon, "POST", base, gzip.compress(data),
                          envd(sbx, **{"Content-Type": "application/octet-stream",
                                       "Content-Encoding": "gzip"}))
    assert status == 200 and json.loads(raw) == [{"name": "z.txt", "type": "file",
                                                   "path": "/home/user/z.txt"}], raw
    status, _, raw = call(e2b_daemon, "GET", base, headers=envd(sbx))
    assert status == 200 and raw == data, raw[:100]
    status, _, raw = call(e2b_daemon, "POST", base, b"not gzip at all",
                          envd(sbx, **{"Content-Type": "application/octet-stream",
                                       "Content-Encoding": "gzip"}))
    assert status == 400 and "gzip" in json.loads(raw)["message"], raw
    status, _, raw = call(e2b_daemon, "POST", base, b"x",
                          envd(sbx, **{"Content-Type": "application/octet-stream",
                                       "Content-Encoding": "br"}))
    assert status == 415, raw
    # A multipart body whose content holds the boundary's text mid-line.
    boundary = "XyZ"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"/home/user/m.txt\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            f"a --{boundary} b\r\n--{boundary}--\r\n").encode()
    status, _, raw = call(e2b_daemon, "POST", "/files", body,
                          envd(sbx, **{"Content-Type": f"multipart/form-data; boundary={boundary}"}))
    assert status == 200, raw
    status, _, raw = call(e2b_daemon, "GET", "/files?path=m.txt", headers=envd(sbx))
    assert raw == f"a --{boundary} b".encode(), raw
