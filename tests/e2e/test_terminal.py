"""Terminals (ours): GET …/terminal upgrades to a WebSocket carrying a login
shell on a pseudo-terminal of the sandbox: the same uid, directories and
limits as its commands, TERM=xterm-256color, resizes that reach the
foreground job, ^C through the terminal's line discipline, a replay of the
recent screen on reattach, an idle end when nobody is attached, and
bounds with named codes. A terminal is an execution: it has a record.
"""
import base64
import json
import socket
import time
import uuid

import pytest

from conftest import Daemon
from ws_terminal import Term, run

PER_SANDBOX = 2  # SANDBOX_MAX_TERMINALS_PER_SANDBOX of the module daemon
IDLE = 2         # SANDBOX_TERMINAL_IDLE_SECONDS


@pytest.fixture(scope="module")
def daemon(sandloomd_binary):
    d = Daemon(sandloomd_binary, {"SANDBOX_MAX_TERMINALS_PER_SANDBOX": str(PER_SANDBOX),
                                  "SANDBOX_TERMINAL_IDLE_SECONDS": str(IDLE),
                                  "SANDBOX_TERMINAL_REPLAY_BYTES": "4096"}).spawn()
    try:
        d.wait_healthy()
        yield d
    finally:
        d.cleanup()


def record(sb, exec_id):
    r = sb.c.get(f"{sb.path}/exec/{exec_id}", params={"generation": sb.generation})
    assert r.status == 200, r
    return r.body


def wait_record(sb, exec_id, timeout=15):
    deadline = time.time() + timeout
    while True:
        rec = record(sb, exec_id)
        if rec["status"] != "RUNNING" or time.time() > deadline:
            return rec
        time.sleep(0.1)


def raw_get(daemon, path, headers):
    """A request by hand (the WebSocket client refuses to show refusals'
    bodies): status and JSON body."""
    s = socket.create_connection(("127.0.0.1", daemon.port), 10)
    lines = [f"GET {path} HTTP/1.1", "Host: localhost", f"Authorization: Bearer {daemon.token}",
             *[f"{k}: {v}" for k, v in headers.items()], "Connection: close", "", ""]
    s.sendall("\r\n".join(lines).encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, (json.loads(body) if body.startswith(b"{") else body)


WS_HEADERS = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
              "Sec-WebSocket-Key": base64.b64encode(b"0123456789abcdef").decode()}


# -- tests -----------------------------------------------------------------------
def test_a_terminal_is_a_login_shell_of_the_sandbox(daemon, ready_sandbox):
    sb = ready_sandbox
    ran = sb.exec(["sh", "-c", "id; hostname; pwd"])
    assert ran.status == 200, ran

    async def body():
        t = await Term.open(daemon, sb, cols=100, rows=30)
        assert t.ready["cols"] == 100 and t.ready["rows"] == 30
        assert t.ready["exec_id"].startswith("terminal-")
        await t.type("echo T=$TERM; tty; stty size; id; hostname; pwd; echo done-$((6*7))\n")
        await t.until(r"done-42")
        await t.close()
        return t

    t = run(body())
    screen = t.screen.decode(errors="replace")
    assert "T=xterm-256color" in screen
    assert "/dev/pts/" in screen
    assert "30 100" in screen
    # The same user, host name and directory as the sandbox's commands.
    for line in ran.body["stdout"].splitlines():
        assert line in screen, (line, screen)
    # It is an execution: its record runs while it is open.
    rec = record(sb, t.ready["exec_id"])
    assert rec["status"] == "RUNNING"


def test_commands_and_files_go_on_beside_an_open_terminal(daemon, ready_sandbox):
    """A terminal takes no workspace lock and no exec scope of a client's:
    an unscoped command (which runs alone, API.md §4.4) and the file API
    are not held up by a person's shell."""
    sb = ready_sandbox

    async def body():
        t = await Term.open(daemon, sb)
        await t.type("sleep 30\n")
        r = sb.exec(["sh", "-c", "echo beside > /workspace/b.txt; cat /workspace/b.txt"])
        assert r.status == 200 and r.body["stdout"] == "beside\n", r
        w = sb.write("/workspace/w.txt", "written")
        assert w.status == 200, w
        assert sb.read_bytes("/workspace/w.txt") == b"written"
        await t.type(b"\x03")
        await t.type("cat /workspace/w.txt; echo\n")
        await t.until(r"written\r?\n")
        await t.close()
        return t.ready["exec_id"]

    run(body())


def test_resize_reaches_the_foreground_job_and_ctrl_c_interrupts_it(daemon, ready_sandbox):
    sb = ready_sandbox

    async def body():
        t = await Term.open(daemon, sb)
        # A job in the foreground (its own process group, as job control
        # makes it) that says when the terminal's size changes.
        await t.type("sh -c 'trap \"echo WINCH \\$(stty size)\" WINCH; echo armed; "
                     "while :; do sleep 0.1; done'\n")
        await t.until(r"armed\r?\n")
        await t.resize(50, 10)
        await t.until(r"WINCH 10 50")
        # ^C through the terminal's line discipline: SIGINT to the job.
        await t.type(b"\x03")
        start = len(t.screen)
        await t.type("sleep 100\n")
        await asyncio_sleep(0.5)
        await t.type(b"\x03")
        await t.type("echo after-$?\n")
        await t.until(r"after-130", start=start)
        await t.close()

    run(body())


def test_vi_edits_a_file_in_the_workspace(daemon, ready_sandbox):
    sb = ready_sandbox

    async def body():
        t = await Term.open(daemon, sb, cols=80, rows=24)
        await t.type("vi /workspace/note.txt\n")
        # vi has drawn its screen (the empty buffer's tildes).
        await t.until(r"~")
        await t.resize(100, 30)
        await t.type("ihello from vi\x1b")
        await asyncio_sleep(0.3)
        await t.type(":wq\r")
        # vi drew in the new size (its status line on row 30), wrote, left.
        await t.until(r"\x1b\[30;1H")
        await t.until(r"written")
        await t.until(r"(?s)written.*workspace# ", timeout=10)
        await t.type("echo vi-exit-$?\n")
        await t.until(r"vi-exit-0")
        await t.close()

    run(body())
    assert sb.read_bytes("/workspace/note.txt") == b"hello from vi\n"


def test_a_client_reattaches_to_the_same_shell_and_sees_its_screen(daemon, ready_sandbox):
    sb = ready_sandbox

    async def first():
        t = await Term.open(daemon, sb)
        await t.type("export MARK=kept-$((3*4)); echo marker-one\n")
        # Leave only once the shell has run the line and waits at its next
        # prompt: the command's output (at a line's start; the terminal's
        # echo of the input, "...; echo marker-one", comes before bash has
        # even read it), then the prompt. Each time bash's readline readies
        # the terminal for a line it reads the window size and writes it
        # back (TIOCGWINSZ, TIOCSWINSZ in rl_prep_terminal): a re-attach
        # whose resize fell between the two was undone, and `stty size`
        # said 24 80 (a CI failure). Readline prints the prompt after
        # that, and then only reads: the re-attach below meets an idle
        # shell, as a person's would.
        await t.until(r"(?s)[\r\n]marker-one\r?\n.*workspace# ")
        await t.close()
        return t.ready["exec_id"]

    exec_id = run(first())

    async def again():
        t = await Term.open(daemon, sb, exec_id=exec_id, cols=90, rows=20)
        assert t.ready["exec_id"] == exec_id
        # The replay: what it showed before the client left (the command's
        # output, not only the echo of its input).
        await t.until(r"[\r\n]marker-one\r?\n")
        start = len(t.screen)
        await t.type("echo $MARK; stty size\n")
        await t.until(r"kept-12", start=start)
        await t.until(r"20 90", start=start)
        await t.type("exit 7\n")
        end = await t.message("exit")
        code = await t.drain_until_closed()
        return end, code

    end, code = run(again())
    assert code == 1000
    assert end["status"] == "FAILED" and end["exit_code"] == 7, end
    rec = wait_record(sb, exec_id)
    assert rec["status"] == "FAILED" and rec["exit_code"] == 7, rec
    assert "marker-one" in rec["stdout"]
    # Ended: attaching again is refused with its code.
    status, doc = raw_get(daemon, f"{sb.path}/terminal?generation={sb.generation}&exec_id={exec_id}",
                          WS_HEADERS)
    assert status == 409 and doc["detail"]["code"] == "SANDBOX_EXEC_NOT_RUNNING", doc


def test_a_terminal_nobody_attaches_to_ends_after_its_idle_time(daemon, ready_sandbox):
    sb = ready_sandbox

    async def body():
        t = await Term.open(daemon, sb)
        await t.type("echo waiting\n")
        await t.until(r"waiting\r?\n")
        await t.close()
        return t.ready["exec_id"]

    exec_id = run(body())
    time.sleep(0.5)
    assert record(sb, exec_id)["status"] == "RUNNING"  # attachable for a while
    rec = wait_record(sb, exec_id, timeout=IDLE + 15)
    assert rec["status"] == "FAILED", rec
    assert rec["termination_reason"] == "TERMINAL_IDLE", rec


def test_terminal_output_also_streams_as_events(daemon, ready_sandbox):
    sb = ready_sandbox

    async def body():
        t = await Term.open(daemon, sb)
        await t.type("echo streamed-$((2+3)); exit 0\n")
        await t.message("exit")
        await t.drain_until_closed()
        return t.ready["exec_id"]

    exec_id = run(body())
    r = sb.c.get(f"{sb.path}/exec/{exec_id}/stream", params={"generation": sb.generation})
    assert r.status == 200, r
    text = r.raw.decode()
    assert "streamed-5" in text and "event: end" in text


def test_bad_messages_are_answered_and_the_terminal_goes_on(daemon, ready_sandbox):
    sb = ready_sandbox

    async def body():
        t = await Term.open(daemon, sb)
        await t.ws.send("not json")
        err = await t.message("error")
        assert err["code"] == "SANDBOX_INVALID_REQUEST", err
        t.messages.remove(err)
        await t.send_json({"type": "resize", "cols": 0, "rows": 5})
        err = await t.message("error")
        assert "cols and rows" in err["message"], err
        await t.send_json({"type": "input", "data": "echo still-$((1+1))\n"})
        await t.until(r"still-2")
        await t.close()

    run(body())


def test_refusals_are_json_with_their_codes(daemon, ready_sandbox, new_sandbox):
    sb = ready_sandbox
    base = f"{sb.path}/terminal"
    # Not a WebSocket request.
    status, doc = raw_get(daemon, f"{base}?generation={sb.generation}", {})
    assert status == 426 and doc["detail"]["code"] == "SANDBOX_UPGRADE_REQUIRED", doc
    # Bad sizes.
    status, doc = raw_get(daemon, f"{base}?generation={sb.generation}&cols=0", WS_HEADERS)
    assert status == 422 and doc["detail"]["errors"][0]["field"] == "cols", doc
    # A stale generation: the fence, as for every command.
    status, doc = raw_get(daemon, f"{base}?generation={sb.generation + 5}", WS_HEADERS)
    assert status == 409 and doc["detail"]["code"] == "STALE_SANDBOX_ROUTE", doc
    # A command without a terminal cannot be attached as one.
    bg = sb.exec(["sleep", "5"], background=True)
    assert bg.status == 200, bg
    status, doc = raw_get(daemon, f"{base}?generation={sb.generation}&exec_id={bg.body['exec_id']}",
                          WS_HEADERS)
    assert status == 409 and doc["detail"]["code"] == "SANDBOX_NOT_A_TERMINAL", doc
    status, doc = raw_get(daemon, f"{base}?generation={sb.generation}&exec_id=no-such", WS_HEADERS)
    assert status == 404 and doc["detail"]["code"] == "EXEC_NOT_FOUND", doc

    # The per-sandbox bound, named; another sandbox is not affected.
    async def fill():
        ts = []
        for _ in range(PER_SANDBOX):
            ts.append(await Term.open(daemon, sb))
        status, doc = raw_get(daemon, f"{base}?generation={sb.generation}", WS_HEADERS)
        assert status == 429 and doc["detail"]["code"] == "SANDBOX_TERMINAL_LIMIT", doc
        assert "SANDBOX_MAX_TERMINALS_PER_SANDBOX" in doc["detail"]["message"]
        other = new_sandbox()
        assert other.resolve().status == 200 and other.connect().status == 200
        t = await Term.open(daemon, other)
        await t.type("exit\n")
        await t.drain_until_closed()
        for t in ts:
            await t.type("exit\n")
            await t.drain_until_closed()

    run(fill())


async def asyncio_sleep(s):
    import asyncio
    await asyncio.sleep(s)


def test_a_browser_sends_its_token_as_a_subprotocol(daemon, ready_sandbox):
    """A browser's WebSocket cannot set Authorization: the token may come
    as the subprotocol sandloom.bearer.<token>, beside sandloom.terminal,
    which is the one answered (the token is never echoed)."""
    import asyncio
    import websockets
    sb = ready_sandbox
    url = (f"ws://127.0.0.1:{daemon.port}/api/v1/sandboxes/{sb.id}/terminal"
           f"?generation={sb.generation}")

    async def body():
        async with websockets.connect(
                url, subprotocols=["sandloom.terminal", f"sandloom.bearer.{daemon.token}"]) as ws:
            assert ws.subprotocol == "sandloom.terminal"
            ready = json.loads(await ws.recv())
            assert ready["type"] == "ready"
            await ws.send(b"exit\n")
        with pytest.raises(websockets.InvalidStatusCode) as refused:
            await websockets.connect(url, subprotocols=["sandloom.terminal",
                                                        "sandloom.bearer.wrong-token"])
        assert refused.value.status_code == 401
        # Without any token: refused as well.
        with pytest.raises(websockets.InvalidStatusCode) as refused:
            await websockets.connect(url, subprotocols=["sandloom.terminal"])
        assert refused.value.status_code == 401

    run(body())


def test_a_paste_larger_than_the_terminal_takes_at_once_arrives_whole(daemon, ready_sandbox):
    """Input the shell is not reading yet waits (in the daemon up to a
    bound, then in the client's TCP window): none of it is dropped."""
    sb = ready_sandbox
    size = 1_000_000

    async def body():
        t = await Term.open(daemon, sb)
        # Raw mode, so no line limit; the reader starts three seconds late.
        await t.type("stty raw -echo; sleep 3; head -c %d | wc -c\n" % size)
        chunk = b"x" * 4096
        sent = 0
        while sent < size:
            n = min(len(chunk), size - sent)
            await t.type(chunk[:n])
            sent += n
        await t.until(r"\b%d\b" % size, timeout=60)
        assert not [m for m in t.messages if m.get("type") == "error"], t.messages
        await t.type(b"exit\n")
        await t.close()

    run(body(), timeout=90)
