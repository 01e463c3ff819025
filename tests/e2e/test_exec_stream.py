"""Streamed output (ours): POST …/exec with "stream": true and
GET …/exec/{exec_id}/stream answer Server-Sent Events whose ids are the
offsets reached (stdout:stderr); a reconnect with Last-Event-ID or ?offset=
goes on with no byte missing and none twice, for running, background and
finished commands; output no longer kept is a `gap` event with its size;
the poll route takes offsets; streams are bounded per sandbox and per
worker, and cost no thread each.
"""
import base64
import json
import os
import socket
import time
import uuid

import pytest

from conftest import Daemon
from sse_client import Events, chunk_bytes, collect

RETAIN = 4096      # SANDBOX_STREAM_RETAIN_BYTES of the module daemon
MAX_OUTPUT = 8192  # SANDBOX_MAX_OUTPUT_BYTES of the module daemon
PER_SANDBOX = 4    # SANDBOX_MAX_STREAMS_PER_SANDBOX of the module daemon


@pytest.fixture(scope="module")
def daemon(sandloomd_binary):
    d = Daemon(sandloomd_binary, {"SANDBOX_STREAM_RETAIN_BYTES": str(RETAIN),
                                  "SANDBOX_MAX_OUTPUT_BYTES": str(MAX_OUTPUT),
                                  "SANDBOX_MAX_STREAMS_PER_SANDBOX": str(PER_SANDBOX),
                                  "SANDBOX_STREAM_KEEPALIVE_SECONDS": "1"}).spawn()
    try:
        d.wait_healthy()
        yield d
    finally:
        d.cleanup()


def stream_path(sb, exec_id, **params):
    q = "&".join(f"{k}={v}" for k, v in {"generation": sb.generation, **params}.items())
    return f"{sb.path}/exec/{exec_id}/stream?{q}"


def start_stream(daemon, sb, argv, exec_id=None, **fields):
    body = {"exec_id": exec_id or "s-" + uuid.uuid4().hex, "generation": sb.generation,
            "argv": argv, "stream": True, **fields}
    return Events(daemon, "POST", sb.path + "/exec", body)


# -- tests -----------------------------------------------------------------------
def test_a_command_streams_its_output_as_it_prints_with_offsets(daemon, ready_sandbox):
    sb = ready_sandbox
    script = "for i in $(seq 1 20); do echo line $i; echo err $i >&2; sleep 0.5; done; exit 3"
    t0 = time.monotonic()
    ev = start_stream(daemon, sb, ["sh", "-c", script])
    assert ev.status == 200
    assert ev.headers["Content-Type"].startswith("text/event-stream")
    out, err, events = collect(ev)
    # The first line comes as it is printed, long before the 10 s command ends.
    assert ev.first_at - t0 < 3, ev.first_at - t0
    assert events[0][0] in ("stdout", "stderr")
    assert out == b"".join(b"line %d\n" % i for i in range(1, 21))
    assert err == b"".join(b"err %d\n" % i for i in range(1, 21))
    name, eid, end = events[-1]
    assert name == "end"
    assert end["status"] == "FAILED" and end["exit_code"] == 3
    assert end["stdout_bytes"] == len(out) and end["stderr_bytes"] == len(err)
    assert "stdout" not in end and "stderr" not in end
    assert ev.next() is None  # the stream closes after the end
    # Events came spread over the run, not all at its end.
    assert len([e for e in events if e[0] == "stdout"]) >= 10
    ev.close()
    # The record is the reference's, whole.
    r = daemon.client().get(f"{sb.path}/exec/{end['exec_id']}",
                            params={"generation": sb.generation})
    assert r.status == 200 and r.body["stdout"] == out.decode() and r.body["exit_code"] == 3


def make_output_script(n):
    """Prints n numbered records of mixed text: ASCII, multi-byte UTF-8,
    and bytes that are not UTF-8, to stdout; a few to stderr."""
    return ("import sys, time\n"
            f"for i in range({n}):\n"
            "    sys.stdout.buffer.write(('%06d é✓ ' % i).encode() + (b'\\xff\\xfe' if i % 7 == 0 else b'') + b'\\n')\n"
            "    if i % 50 == 0: sys.stderr.write('e%d\\n' % i); sys.stderr.flush()\n"
            "    sys.stdout.flush()\n"
            "    if i % 100 == 0: time.sleep(0.05)\n")


def expected_output(n):
    out = b"".join(('%06d é✓ ' % i).encode() + (b'\xff\xfe' if i % 7 == 0 else b'') + b'\n'
                   for i in range(n))
    err = b"".join(b"e%d\n" % i for i in range(0, n, 50))
    return out, err


def test_a_reconnect_with_last_event_id_goes_on_byte_exact(daemon, ready_sandbox):
    sb = ready_sandbox
    n = 150  # under MAX_OUTPUT + RETAIN: everything is kept for the reconnect
    exec_id = "resume-" + uuid.uuid4().hex
    ev = start_stream(daemon, sb, ["python3", "-c", make_output_script(n)], exec_id=exec_id)
    assert ev.status == 200
    out1, err1, events = collect(ev, stop_after=1000)
    last_id = [e[1] for e in events if e[1]][-1]
    ev.close()  # the client goes away mid-stream
    ev2 = Events(daemon, "GET", stream_path(sb, exec_id), headers={"Last-Event-ID": last_id})
    assert ev2.status == 200
    so, se = (int(x) for x in last_id.split(":"))
    assert (so, se) == (len(out1), len(err1))
    out2 = {"stdout": bytearray(out1), "stderr": bytearray(err1)}
    while True:
        e = ev2.next()
        assert e is not None
        name, eid, data = e
        if name == "end":
            break
        assert name in out2, e
        assert data["offset"] == len(out2[name])
        out2[name] += chunk_bytes(data)
    ev2.close()
    want_out, want_err = expected_output(n)
    got = bytes(out2["stdout"])
    at = next((i for i in range(min(len(got), len(want_out))) if got[i] != want_out[i]), None)
    assert got == want_out, (len(got), len(want_out), at, len(out1), got[len(want_out):],
                             got[at - 20:at + 20] if at else None,
                             want_out[at - 20:at + 20] if at else None)
    assert bytes(out2["stderr"]) == want_err


def test_the_offset_query_and_a_finished_command(daemon, ready_sandbox):
    sb = ready_sandbox
    r = sb.exec(["sh", "-c", "printf 'abcdefghij'; printf 'XY' >&2"], exec_id="done-1")
    assert r.status == 200 and r.body["status"] == "SUCCEEDED"
    ev = Events(daemon, "GET", stream_path(sb, "done-1", offset="4:1"))
    out, err, events = collect(ev, start=(4, 1))
    assert (out, err) == (b"efghij", b"Y")
    assert events[-1][0] == "end" and events[-1][2]["status"] == "SUCCEEDED"
    # One offset alone is stdout's.
    ev = Events(daemon, "GET", stream_path(sb, "done-1", offset="8"))
    assert collect(ev, start=(8, 0))[:2] == (b"ij", b"XY")
    # Past the end: only the end.
    ev = Events(daemon, "GET", stream_path(sb, "done-1", offset="10:2"))
    assert [e[0] for e in collect(ev, start=(10, 2))[2]] == ["end"]


def test_the_raw_form_is_one_streams_bytes_as_they_are(daemon, ready_sandbox):
    """?format=raw: no events, the bytes of one stream as the command wrote
    them (not UTF-8 included), live or finished, from an offset."""
    sb = ready_sandbox
    data = bytes(range(256)) * 8 + b"\n\r\x00tail"
    assert sb.write("/workspace/blob", data).status == 200
    r = sb.exec(["sh", "-c", "cat /workspace/blob; printf err-bytes >&2"], exec_id="raw-1")
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r

    def raw(exec_id, **params):
        got = sb.c.get(stream_path(sb, exec_id, format="raw", **params))
        assert got.status == 200, got
        assert got.content_type == "application/octet-stream", got.content_type
        return got.raw

    assert raw("raw-1") == data
    assert raw("raw-1", offset=1000) == data[1000:]
    assert raw("raw-1", stream="stderr") == b"err-bytes"
    assert raw("raw-1", stream="stderr", offset=4) == b"bytes"
    # Live: a command that prints for a while, read as it goes.
    r = sb.exec(["sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.3; done"],
                exec_id="raw-live", background=True)
    assert r.status == 200, r
    assert raw("raw-live") == b"line 1\nline 2\nline 3\n"
    # Bad spellings are named.
    for params, field in (({"format": "xml"}, "format"), ({"stream": "both"}, "stream"),
                          ({"offset": "-1"}, "offset")):
        got = sb.c.get(stream_path(sb, "raw-1", **({"format": "raw"} | params)))
        assert got.status == 422 and got.body["detail"]["errors"][0]["field"] == field, got
    got = sb.c.get(stream_path(sb, "raw-1", stream="stdout"))
    assert got.status == 422, got  # stream= is for the raw form


def test_a_background_command_can_be_followed_later(daemon, ready_sandbox):
    sb = ready_sandbox
    r = sb.exec(["sh", "-c", "echo started; sleep 2; echo finished"], exec_id="bg-1",
                background=True)
    assert r.status == 200 and r.body["status"] == "RUNNING"
    time.sleep(0.5)
    ev = Events(daemon, "GET", stream_path(sb, "bg-1"))
    out, err, events = collect(ev)
    assert out == b"started\nfinished\n"
    assert events[-1][0] == "end" and events[-1][2]["status"] == "SUCCEEDED"


def test_output_no_longer_kept_is_a_gap_with_its_size(daemon, ready_sandbox):
    sb = ready_sandbox
    # 100000 bytes: the first MAX_OUTPUT are kept (the record's), then only
    # the last RETAIN while it runs.
    script = "head -c 100000 /dev/zero | tr '\\0' a; echo; sleep 3"
    r = sb.exec(["sh", "-c", script], exec_id="gap-1", background=True)
    assert r.status == 200
    time.sleep(1.5)
    ev = Events(daemon, "GET", stream_path(sb, "gap-1", offset=str(MAX_OUTPUT - 10)))
    out, err, events = collect(ev, start=(MAX_OUTPUT - 10, 0))
    total = 100001
    gaps = [d for n, i, d in events if n == "gap"]
    assert gaps == [{"stream": "stdout", "offset": MAX_OUTPUT,
                     "skipped": total - RETAIN - MAX_OUTPUT}]
    # The head's last 10 bytes, then the last RETAIN bytes.
    assert out == b"a" * 10 + b"a" * (RETAIN - 1) + b"\n"
    assert events[-1][0] == "end"
    assert events[-1][2]["truncated"] is True and events[-1][2]["stdout_bytes"] == total


def test_poll_with_offsets_reads_only_what_is_new(daemon, ready_sandbox):
    sb = ready_sandbox
    r = sb.exec(["sh", "-c", "echo one; sleep 1.5; echo two; sleep 1.5"], exec_id="poll-1",
                background=True)
    assert r.status == 200
    c = daemon.client()
    time.sleep(0.7)
    p = c.get(f"{sb.path}/exec/poll-1", params={"generation": sb.generation,
                                                 "stdout_offset": 0, "stderr_offset": 0})
    assert p.status == 200, p
    assert p.body["status"] == "RUNNING" and p.body["stdout"] == "one\n"
    assert p.body["stdout_next_offset"] == 4 and p.body["stdout_skipped"] == 0
    time.sleep(1.5)
    p = c.get(f"{sb.path}/exec/poll-1", params={"generation": sb.generation,
                                                 "stdout_offset": 4})
    assert p.body["stdout"] == "two\n" and p.body["stdout_next_offset"] == 8
    # Without offsets: the reference's answer (nothing until the end).
    p = c.get(f"{sb.path}/exec/poll-1", params={"generation": sb.generation})
    assert p.body["stdout"] == "" and "stdout_next_offset" not in p.body
    time.sleep(2)
    p = c.get(f"{sb.path}/exec/poll-1", params={"generation": sb.generation,
                                                 "stdout_offset": 8})
    assert p.body["status"] == "SUCCEEDED" and p.body["stdout"] == ""
    p = c.get(f"{sb.path}/exec/poll-1", params={"generation": sb.generation,
                                                 "stdout_offset": -1})
    assert p.status == 422
    assert p.body["detail"]["errors"][0]["field"] == "stdout_offset"


def test_keepalives_hold_a_silent_stream_open(daemon, ready_sandbox):
    sb = ready_sandbox
    ev = start_stream(daemon, sb, ["sh", "-c", "sleep 3; echo late"])
    out, err, events = collect(ev)
    assert out == b"late\n"
    assert len(ev.comments) >= 2 and all(c == ": keepalive" for c in ev.comments)


def test_bad_requests_are_refused_with_named_codes(daemon, ready_sandbox):
    sb = ready_sandbox
    c = daemon.client()
    ev = Events(daemon, "GET", stream_path(sb, "nope"))
    assert ev.status == 404 and ev.error()["detail"]["code"] == "EXEC_NOT_FOUND"
    for bad in ("x", "1:2:3", "-1", "1:", ":1", "99999999999999999999"):
        ev = Events(daemon, "GET", stream_path(sb, "nope", offset=bad))
        assert ev.status == 422, bad
        ev = Events(daemon, "GET", stream_path(sb, "nope"), headers={"Last-Event-ID": bad})
        assert ev.status == 422, bad
    # A wrong generation: the poll route's refusal.
    poll = c.get(f"{sb.path}/exec/nope", params={"generation": sb.generation + 1})
    ev = Events(daemon, "GET", f"{sb.path}/exec/nope/stream?generation={sb.generation + 1}")
    assert ev.status == poll.status == 409
    assert ev.error()["detail"]["code"] == poll.body["detail"]["code"]
    ev = Events(daemon, "GET", f"{sb.path}/exec/nope/stream")
    assert ev.status == 422
    r = sb.exec(["true"], stream="yes")
    assert r.status == 422 and r.body["detail"]["errors"][0]["field"] == "stream"
    # A stream of a refused command is the refusal, as JSON.
    ev = start_stream(daemon, sb, ["true"], generation=sb.generation + 5)
    assert ev.status == 409
    assert ev.error()["detail"]["code"] in ("STALE_SANDBOX_GENERATION", "STALE_SANDBOX_ROUTE")


def test_streams_are_bounded_per_sandbox_and_a_closed_one_frees_its_place(daemon,
                                                                        ready_sandbox):
    sb = ready_sandbox
    r = sb.exec(["sleep", "20"], exec_id="long-1", background=True)
    assert r.status == 200
    open_ = [Events(daemon, "GET", stream_path(sb, "long-1")) for _ in range(PER_SANDBOX)]
    assert all(e.status == 200 for e in open_)
    over = Events(daemon, "GET", stream_path(sb, "long-1"))
    assert over.status == 429
    assert over.error()["detail"]["code"] == "SANDBOX_STREAM_LIMIT"
    # A client that vanishes gives its place back (the daemon sees the
    # connection close at its next keepalive at the latest).
    open_.pop().close()
    deadline = time.time() + 5
    while True:
        again = Events(daemon, "GET", stream_path(sb, "long-1"))
        if again.status == 200 or time.time() > deadline:
            break
        time.sleep(0.3)
    assert again.status == 200
    for e in open_ + [again]:
        e.close()
    daemon.client().post(f"{sb.path}/exec/long-1/cancel", params={"generation": sb.generation})


def daemon_threads(pid):
    return len(os.listdir(f"/proc/{pid}/task"))


def daemon_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


def test_a_thousand_open_streams_are_not_a_thread_each(daemon_factory, capsys):
    """1000 streams on 10 sandboxes' running commands: the daemon's thread
    count does not grow with them and its memory grows by little per stream
    (printed; bench/stream_bench.py measures it); every stream gets its
    end when the commands are cancelled."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    from sandloom_client import Sandbox
    d = daemon_factory({"SANDBOX_MAX_STREAMS_PER_SANDBOX": "100"})
    sbs = []
    for _ in range(10):
        sb = Sandbox(d.client(), "many-" + uuid.uuid4().hex[:8], "scope-" + uuid.uuid4().hex[:8])
        assert sb.resolve().status == 200 and sb.connect().status == 200
        assert sb.exec(["sleep", "120"], exec_id="many", background=True).status == 200
        sbs.append(sb)
    time.sleep(0.5)
    threads0, rss0 = daemon_threads(d.proc.pid), daemon_rss_kib(d.proc.pid)
    socks = []
    for i in range(1000):
        sb = sbs[i // 100]
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall((f"GET {stream_path(sb, 'many')} HTTP/1.1\r\nHost: x\r\n"
                   f"Authorization: Bearer {d.token}\r\n\r\n").encode())
        socks.append(s)
    for s in socks:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            assert chunk, "a stream closed at once"
            head += chunk
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
    # One more on a sandbox that has its 100: refused, named.
    over = Events(d, "GET", stream_path(sbs[0], "many"))
    assert over.status == 429
    threads1, rss1 = daemon_threads(d.proc.pid), daemon_rss_kib(d.proc.pid)
    with capsys.disabled():
        print(f"\n1000 streams: threads {threads0} -> {threads1}, RSS {rss0} -> {rss1} KiB "
              f"({(rss1 - rss0) / 1000:.1f} KiB per stream)")
    assert threads1 <= threads0 + 4, (threads0, threads1)
    assert rss1 - rss0 < 1000 * 256, (rss0, rss1)  # far below a thread stack each
    for sb in sbs:
        d.client().post(f"{sb.path}/exec/many/cancel", params={"generation": sb.generation})
    for s in socks:
        data = b""
        s.settimeout(30)
        while b"event: end" not in data:
            chunk = s.recv(65536)
            assert chunk, data[-300:]
            data += chunk
        s.close()


# -- input and signals -------------------------------------------------------------
def stdin(daemon, sb, exec_id, **body):
    return daemon.client().post(f"{sb.path}/exec/{exec_id}/stdin", json=body,
                                params={"generation": sb.generation})


def signal_(daemon, sb, exec_id, name):
    return daemon.client().post(f"{sb.path}/exec/{exec_id}/signal", json={"signal": name},
                                params={"generation": sb.generation})


def test_stdin_round_trips_through_cat_byte_exact(daemon, ready_sandbox):
    sb = ready_sandbox
    ev = start_stream(daemon, sb, ["cat"], exec_id="cat-1", stdin=True)
    assert ev.status == 200
    r = stdin(daemon, sb, "cat-1", data="hello é\n")
    assert r.status == 200 and r.body == {"written": 9, "closed": False}, r
    blob = bytes(range(256)) * 4
    r = stdin(daemon, sb, "cat-1", data_base64=base64.b64encode(blob).decode(), close=True)
    assert r.status == 200 and r.body == {"written": 1024, "closed": True}, r
    out, err, events = collect(ev)
    assert out == "hello é\n".encode() + blob
    assert events[-1][2]["status"] == "SUCCEEDED"
    # Closed, and then ended: refused with a named code.
    r = stdin(daemon, sb, "cat-1", data="more")
    assert r.status == 409 and r.body["detail"]["code"] in ("SANDBOX_STDIN_CLOSED",
                                                            "SANDBOX_EXEC_NOT_RUNNING")


def test_python_interactive_reads_its_stdin_as_it_comes(daemon, ready_sandbox):
    sb = ready_sandbox
    ev = start_stream(daemon, sb, ["python3", "-i", "-q"], exec_id="py-1", stdin=True)
    assert ev.status == 200
    assert stdin(daemon, sb, "py-1", data="x = 6 * 7\n").status == 200
    assert stdin(daemon, sb, "py-1", data="print(x)\n").status == 200
    # The answer comes while stdin is still open: it runs as it reads.
    got = {"stdout": b"", "stderr": b""}  # stderr: the prompts
    deadline = time.time() + 10
    while b"42" not in got["stdout"]:
        assert time.time() < deadline, got
        name, eid, data = ev.next()
        if name in got:
            got[name] += chunk_bytes(data)
    assert got["stdout"] == b"42\n"
    assert stdin(daemon, sb, "py-1", close=True).body["closed"] is True
    out, err, events = collect(ev, start=(len(got["stdout"]), len(got["stderr"])))
    assert events[-1][2]["exit_code"] == 0


def test_stdin_needs_a_command_started_with_it_and_is_bounded(daemon, ready_sandbox):
    sb = ready_sandbox
    r = sb.exec(["sleep", "5"], exec_id="nostdin", background=True, exec_scope="a-scope")
    assert r.status == 200
    r = stdin(daemon, sb, "nostdin", data="x")
    assert r.status == 409 and r.body["detail"]["code"] == "SANDBOX_STDIN_CLOSED"
    r = stdin(daemon, sb, "missing", data="x")
    assert r.status == 404 and r.body["detail"]["code"] == "EXEC_NOT_FOUND"
    r = stdin(daemon, sb, "nostdin", data="x", data_base64="eA==")
    assert r.status == 422
    r = stdin(daemon, sb, "nostdin", data_base64="not base64!")
    assert r.status == 422 and r.body["detail"]["errors"][0]["field"] == "data_base64"
    # A command that does not read: what its pipe takes, then `written` says
    # how much, within the wait.
    r = sb.exec(["sleep", "30"], exec_id="noread", background=True, stdin=True,
                exec_scope="b-scope")
    assert r.status == 200
    t0 = time.monotonic()
    r = stdin(daemon, sb, "noread", data_base64=base64.b64encode(b"z" * (1 << 20)).decode())
    assert r.status == 200 and 0 < r.body["written"] < (1 << 20), r.body
    assert time.monotonic() - t0 < 10
    signal_(daemon, sb, "noread", "SIGKILL")
    signal_(daemon, sb, "nostdin", "SIGKILL")


def test_signals_reach_the_running_command(daemon, ready_sandbox):
    sb = ready_sandbox
    script = ("trap 'echo got INT; exit 5' INT; echo ready; "
              "while :; do sleep 0.1; done")
    ev = start_stream(daemon, sb, ["sh", "-c", script], exec_id="sig-1")
    name, eid, data = ev.next()
    assert chunk_bytes(data) == b"ready\n"
    r = signal_(daemon, sb, "sig-1", "SIGINT")
    assert r.status == 200 and r.body == {"signalled": True}
    out, err, events = collect(ev, start=(6, 0))
    assert out == b"got INT\n"
    assert events[-1][2]["exit_code"] == 5  # the command chose how to end
    # SIGKILL: it dies of it, and the record says who did it.
    r = sb.exec(["sleep", "30"], exec_id="sig-2", background=True)
    assert signal_(daemon, sb, "sig-2", "SIGKILL").body == {"signalled": True}
    deadline = time.time() + 10
    while True:
        p = daemon.client().get(f"{sb.path}/exec/sig-2", params={"generation": sb.generation})
        if p.body["status"] != "RUNNING" or time.time() > deadline:
            break
        time.sleep(0.1)
    assert p.body["exit_code"] == -9 and p.body["termination_reason"] == "SIGNALLED_BY_CLIENT"
    # Ended: 409; unknown signal: 422.
    r = signal_(daemon, sb, "sig-2", "SIGINT")
    assert r.status == 409 and r.body["detail"]["code"] == "SANDBOX_EXEC_NOT_RUNNING"
    r = signal_(daemon, sb, "sig-2", "SIGSTOP")
    assert r.status == 422 and r.body["detail"]["errors"][0]["field"] == "signal"


def test_stdin_and_streams_work_without_warm_sessions(daemon_factory):
    """SANDBOX_SESSION_IDLE_SECONDS=0: a fresh sandbox per command (the
    one-shot launcher) gets the same stdin pipe and output log."""
    from sandloom_client import Sandbox
    d = daemon_factory({"SANDBOX_SESSION_IDLE_SECONDS": "0"})
    sb = Sandbox(d.client(), "oneshot-" + uuid.uuid4().hex[:8], "scope-" + uuid.uuid4().hex[:8])
    assert sb.resolve().status == 200 and sb.connect().status == 200
    ev = start_stream(d, sb, ["sh", "-c", "read a; echo got $a; cat"], exec_id="os-1",
                      stdin=True)
    assert ev.status == 200
    assert stdin(d, sb, "os-1", data="one\ntwo\n", close=True).body["written"] == 8
    out, err, events = collect(ev)
    assert out == b"got one\ntwo\n" and events[-1][2]["exit_code"] == 0
    sb.release()


# -- backpressure ------------------------------------------------------------------
def raw_stream(daemon, sb, exec_id):
    """A stream read by hand: the socket, after the response headers."""
    s = socket.create_connection(("127.0.0.1", daemon.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    s.sendall((f"GET {stream_path(sb, exec_id)} HTTP/1.1\r\nHost: x\r\n"
               f"Authorization: Bearer {daemon.token}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 200"), head
    return s, head.split(b"\r\n\r\n", 1)[1]


def read_to_end(s, already):
    data = bytearray(already)
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        data += chunk
        if b"event: end\ndata: " in data[-8192:] and data.endswith(b"\r\n0\r\n\r\n"):
            break
    s.close()
    tail = bytes(data[-8192:])
    return json.loads(tail.split(b"event: end\ndata: ")[-1].split(b"\n")[0])


@pytest.fixture(scope="module")
def bp_daemon(sandloomd_binary):
    d = Daemon(sandloomd_binary, {"SANDBOX_STREAM_RETAIN_BYTES": str(256 << 10),
                                  "SANDBOX_MAX_OUTPUT_BYTES": str(64 << 10),
                                  "SANDBOX_STREAM_STALL_SECONDS": "3"}).spawn()
    try:
        d.wait_healthy()
        yield d
    finally:
        d.cleanup()


def bp_sandbox(d):
    from sandloom_client import Sandbox
    sb = Sandbox(d.client(), "bp-" + uuid.uuid4().hex[:8], "scope-" + uuid.uuid4().hex[:8])
    assert sb.resolve().status == 200 and sb.connect().status == 200
    return sb


def exec_status(d, sb, exec_id):
    return d.client().get(f"{sb.path}/exec/{exec_id}",
                          params={"generation": sb.generation}).body["status"]


def test_a_reader_that_pauses_holds_the_command_back_and_misses_nothing(bp_daemon):
    d = bp_daemon
    sb = bp_sandbox(d)
    size = 64 << 20  # far more than the socket buffers and the ring hold
    r = sb.exec(["sh", "-c", f"yes | head -c {size}"], exec_id="bp-1", background=True)
    assert r.status == 200
    s, first = raw_stream(d, sb, "bp-1")
    time.sleep(2)  # not reading: the command waits for this reader
    assert exec_status(d, sb, "bp-1") == "RUNNING"
    end = read_to_end(s, first)
    assert end["stdout_bytes"] == size and end["stdout_skipped"] == 0, end
    assert end["status"] == "SUCCEEDED"
    sb.release()


def test_a_reader_that_stalls_lets_go_and_is_told_what_it_missed(bp_daemon):
    d = bp_daemon
    sb = bp_sandbox(d)
    size = 64 << 20
    r = sb.exec(["sh", "-c", f"yes | head -c {size}"], exec_id="bp-2", background=True)
    assert r.status == 200
    s, first = raw_stream(d, sb, "bp-2")
    # Past SANDBOX_STREAM_STALL_SECONDS (3) without reading: the command is
    # let go and ends while the reader still sleeps.
    deadline = time.time() + 20
    while exec_status(d, sb, "bp-2") == "RUNNING":
        assert time.time() < deadline, "the stalled reader held the command"
        time.sleep(0.5)
    end = read_to_end(s, first)
    assert end["stdout_bytes"] == size
    assert 0 < end["stdout_skipped"] < size, end
    sb.release()


def test_a_shutdown_with_streams_open_ends_them_and_exits_cleanly(daemon_factory):
    """SIGTERM while streams follow a running command, a finished one and a
    paused one: every client gets its end (the command's, CANCELLED), the
    daemon exits 0 and (under the sanitizers) reports nothing."""
    from sandloom_client import Sandbox
    d = daemon_factory({"SANDBOX_TERMINATE_GRACE_SECONDS": "0.5"})
    sb = Sandbox(d.client(), "down-" + uuid.uuid4().hex[:8], "scope-" + uuid.uuid4().hex[:8])
    assert sb.resolve().status == 200 and sb.connect().status == 200
    assert sb.exec(["sleep", "60"], exec_id="long", background=True,
                   exec_scope="scope-a").status == 200
    assert sb.exec(["cat"], exec_id="in-1", background=True, stdin=True,
                   exec_scope="scope-b").status == 200
    assert sb.exec(["echo", "done"], exec_id="short", exec_scope="scope-c").status == 200
    live = [Events(d, "GET", stream_path(sb, x)) for x in ("long", "in-1", "long")]
    assert stdin(d, sb, "in-1", data="partial").status == 200
    assert all(e.status == 200 for e in live)
    # A reader that stopped reading, holding a producer back.
    assert sb.exec(["sh", "-c", "yes | head -c 50000000"], exec_id="big", background=True,
                   exec_scope="scope-d").status == 200
    slow = socket.create_connection(("127.0.0.1", d.port))
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    slow.sendall((f"GET {stream_path(sb, 'big')} HTTP/1.1\r\nHost: x\r\n"
                  f"Authorization: Bearer {d.token}\r\n\r\n").encode())
    time.sleep(1)
    rc = d.stop()
    assert rc == 0, d.stderr()[-3000:]
    assert "Sanitizer" not in d.stderr(), d.stderr()[-3000:]
    for e in live:
        out, err, events = collect(e)
        assert events and events[-1][0] == "end", events[-3:]
        assert events[-1][2]["status"] == "CANCELLED"
        e.close()
    slow.close()
