"""The daemon's log (common/log.h): one access line per request, one line
per command start and end, errors with their code and message, as text or
JSON (SANDBOX_LOG_FORMAT) from SANDBOX_LOG_LEVEL up; never a token, a
header value, a body or an environment value."""
import json
import time

from sandloom_client import API, Sandbox, assert_error

SECRET_ENV = "env-value-that-must-not-be-logged"
SECRET_FILE = "file-content-that-must-not-be-logged"


def session(d):
    """A resolve, create, one good command, one refused, a file write."""
    sb = Sandbox(d.client(), "logs-1", "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    r = sb.exec(["/bin/sh", "-c", "exit 3"], exec_id="logged-exec", env={"X": SECRET_ENV})
    assert r.status == 200 and r.body["exit_code"] == 3, r
    assert_error(sb.exec(["true"], exec_id="stale-exec", generation=sb.generation + 5), 409,
                 "STALE_SANDBOX_ROUTE")
    assert sb.write("/workspace/f.txt", SECRET_FILE).status == 200
    assert d.client(token="wrong-token-value-0123456789abcdef").get(f"{API}/logs-1").status == 401
    return sb


def wait_for(d, text, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in d.stderr():
            return d.stderr()
        time.sleep(0.05)
    return d.stderr()


def test_text_lines_say_what_happened(daemon_factory):
    d = daemon_factory()
    session(d)
    # The 401 is the session's last request: its line is written once the
    # answer is sent, so wait for it.
    err = wait_for(d, "code=SANDBOX_UNAUTHORIZED")
    lines = err.splitlines()
    access = [l for l in lines if " info access " in l or " warn access " in l]
    assert any("method=POST route=/api/v1/sandboxes/resolve status=200" in l for l in access), err
    exec_line = next(l for l in access if "exec_id=logged-exec" in l)
    assert "route=/api/v1/sandboxes/{sandbox_id}/exec status=200" in exec_line, exec_line
    assert "sandbox_id=logs-1" in exec_line and "duration_ms=" in exec_line, exec_line
    stale = next(l for l in access if "exec_id=stale-exec" in l)
    assert "status=409 " in stale and "code=STALE_SANDBOX_ROUTE" in stale, stale
    assert 'message="the sandbox is at generation' in stale, stale
    assert any("status=401" in l and "code=SANDBOX_UNAUTHORIZED" in l for l in access), err
    start = next(l for l in lines if " exec_start " in l and "exec_id=logged-exec" in l)
    assert "program=sh args=2" in start, start
    end = next(l for l in lines if " exec_end " in l and "exec_id=logged-exec" in l)
    assert "status=FAILED exit_code=3" in end and "duration_ms=" in end, end
    # GET /health is polled: not at info.
    assert not any("route=/health " in l for l in access), err
    # Never a token (the daemon's or a wrong one), an env value or a body.
    for secret in (d.token, "wrong-token-value-0123456789abcdef", SECRET_ENV, SECRET_FILE):
        assert secret not in err, f"{secret!r} reached the log"


def test_json_lines_parse_one_by_one(daemon_factory):
    d = daemon_factory({"SANDBOX_LOG_FORMAT": "json", "SANDBOX_LOG_LEVEL": "debug"})
    session(d)
    err = wait_for(d, '"code":"SANDBOX_UNAUTHORIZED"')
    events = []
    for line in err.splitlines():
        doc = json.loads(line)          # every stderr line is one JSON object
        assert {"ts", "level"} <= set(doc) and ("event" in doc or "msg" in doc), doc
        events.append(doc)
    access = [e for e in events if e.get("event") == "access"]
    stale = next(e for e in access if e.get("exec_id") == "stale-exec")
    assert stale["status"] == 409 and stale["code"] == "STALE_SANDBOX_ROUTE", stale
    assert stale["route"] == "/api/v1/sandboxes/{sandbox_id}/exec", stale
    assert isinstance(stale["duration_ms"], int), stale
    end = next(e for e in events if e.get("event") == "exec_end"
               and e["exec_id"] == "logged-exec")
    assert end["status"] == "FAILED" and end["exit_code"] == 3, end
    # debug: the health polls show.
    assert any(e["route"] == "/health" and e["level"] == "debug" for e in access), access[:3]
    assert any(e.get("msg", "").startswith("sandloomd listening on") for e in events)
    for secret in (d.token, SECRET_ENV, SECRET_FILE):
        assert secret not in err


def test_warn_keeps_only_problems_and_bad_values_stop_startup(daemon_factory):
    d = daemon_factory({"SANDBOX_LOG_LEVEL": "warn"})
    session(d)
    time.sleep(0.3)
    err = d.stderr()
    assert " access " not in err and " exec_end " not in err, err
    assert " info " not in err, err
    for name, value in (("SANDBOX_LOG_FORMAT", "xml"), ("SANDBOX_LOG_LEVEL", "loud")):
        rc, err = daemon_factory({name: value}, expect_exit=True)
        assert rc == 3 and name in err, err
        assert "sandloomd: startup refused (ConfigError)" in err, err


def test_mcp_tool_errors_are_logged_once_with_their_code(daemon_factory):
    """A failed MCP tool call answers HTTP 200 (MCP.md §4.2), so the access
    line cannot tell: the call logs the refusal itself."""
    from test_mcp import modern
    d = daemon_factory()
    r = modern(d.client(), "tools/call",
               {"name": "sandbox_status", "arguments": {"sandbox_id": "mcp-log-missing"}})
    assert r.status == 200 and r.body["result"]["isError"] is True, r
    err = wait_for(d, "mcp_tool_error")
    line = next(l for l in err.splitlines() if " mcp_tool_error " in l)
    assert "tool=sandbox_status" in line and "code=SANDBOX_NOT_FOUND" in line, line
    assert sum(" mcp_tool_error " in l for l in err.splitlines()) == 1, err
