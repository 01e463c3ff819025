"""Hardening issue, fault 10: HTTP hygiene.

  * Two conflicting Content-Length headers were accepted (the first won):
    now 400 in the JSON error shape, as is Content-Length beside
    Transfer-Encoding (the two ways two parties read two requests).
  * Requests libmicrohttpd refuses before any handler of ours runs are
    answered with its own HTML pages; docs/ARCHITECTURE.md lists them. This
    test pins that list, so the documentation cannot drift: every other
    malformed request gets the JSON shape.
  * A connection's buffer is bounded (64 KiB): headers beyond it are
    refused (431) instead of held.
"""
import json
import socket

import pytest

def raw(port, data, timeout=3):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        if len(body) >= int(line.split(b":")[1]):
                            return out
        return out
    finally:
        s.close()


def status_and_body(resp):
    head, _, body = resp.partition(b"\r\n\r\n")
    status = int(head.split(b"\r\n")[0].split()[1]) if head else None
    return status, body


@pytest.mark.parametrize("headers", [
    b"Content-Length: 2\r\nContent-Length: 40\r\n",
    b"Content-Length: 2\r\nContent-Length: 2\r\n",
    b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
], ids=["conflicting", "repeated", "with-transfer-encoding"])
def test_ambiguous_length_is_refused_as_json(daemon, headers):
    req = (b"POST /api/v1/sandboxes/resolve HTTP/1.1\r\nHost: x\r\n"
           b"Authorization: Bearer " + daemon.token.encode() + b"\r\n" + headers + b"\r\n{}")
    status, body = status_and_body(raw(daemon.port, req))
    assert status == 400, (status, body)
    detail = json.loads(body)["detail"]
    assert detail["code"] == "SANDBOX_INVALID_ARGUMENT" and "ambiguous" in detail["message"], detail


# What libmicrohttpd answers itself (documented in docs/ARCHITECTURE.md §5).
LIBRARY_ANSWERS = {
    "unsupported HTTP version": (b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n", 505),
    "malformed chunked body": (b"POST /api/v1/sandboxes/resolve HTTP/1.1\r\nHost: x\r\n"
                               b"Authorization: Bearer {token}\r\n"
                               b"Transfer-Encoding: chunked\r\n\r\nZZZ\r\n", 400),
    "non-numeric Content-Length": (b"POST /health HTTP/1.1\r\nHost: x\r\n"
                                   b"Content-Length: abc\r\n\r\n", 400),
    "Content-Length past 64 bits": (b"POST /health HTTP/1.1\r\nHost: x\r\n"
                                    b"Content-Length: 99999999999999999999999\r\n\r\n", 413),
    "headers beyond the 64 KiB buffer": (b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: "
                                         + b"a" * 70000 + b"\r\n\r\n", 431),
    "no request line": (b"GARBAGE\r\n\r\n", None),
}


@pytest.mark.parametrize("case", sorted(LIBRARY_ANSWERS))
def test_what_the_library_answers_itself_is_what_the_docs_say(daemon, case):
    req, expect = LIBRARY_ANSWERS[case]
    req = req.replace(b"{token}", daemon.token.encode())
    status, body = status_and_body(raw(daemon.port, req))
    assert status == expect, (case, status, body[:200])


@pytest.mark.parametrize("req", [
    b"GET /hea%00lth HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /api/v1/%ff%fe HTTP/1.1\r\nHost: x\r\n\r\n",
    b"BREW /api/v1/sandboxes/x HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /api/v1/sandboxes/x?generation=%zz HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /api/v1/sandboxes/resolve HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n{{{",
    b"GET /nope HTTP/1.0\r\n\r\n",
])
def test_other_malformed_requests_get_the_json_shape(daemon, req):
    status, body = status_and_body(raw(daemon.port, req))
    assert status is not None and status >= 400, (status, body)
    detail = json.loads(body)["detail"]
    assert detail["code"] and detail["message"], detail
