"""E2B's official JavaScript SDKs, unmodified, against Sandloom (issue 17):
npm `e2b` 2.51.0 and `@e2b/code-interpreter` 2.8.0, and `e2b` 2.7.0 (the
oldest with E2B_API_URL and E2B_SANDBOX_URL) to catch drift, pinned in
e2b_sdk/package.json and package-lock.json. The SDKs reach the daemon the
way a user points them at it: E2B_API_URL and E2B_SANDBOX_URL at its one
listener, E2B_API_KEY a tenant's key in E2B's spelling (e2b_<hex>).

e2b_sdk/suite.mjs runs each scenario and prints what the SDK returned or
raised; the assertions are here. Node.js and npm are installed when
missing; the npm packages go to a temporary directory, never into the
source tree. A missing tool fails the test, never skips it."""

import json
import os
import re
import shutil
import subprocess
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from test_mcp_sdk import _tail, ensure_node

SDK_DIR = Path(__file__).resolve().parent / "e2b_sdk"
ADMIN = "/api/v1/admin/tenants"
NEW = ("quickstart", "background", "processes", "stdin", "environment", "lifecycle", "paging",
       "lifetime", "tenants", "unsupported", "pty", "watch", "interpreter",
       "metrics", "quota")
OLD = ("quickstart", "background", "processes", "lifecycle")


def install_sdks(work, driver):
    """The pinned E2B SDKs (npm ci of e2b_sdk's lock) and a driver script in
    the directory `work`."""
    ensure_node()
    for name in ("package.json", "package-lock.json"):
        shutil.copy2(SDK_DIR / name, work / name)
    shutil.copy2(driver, work / driver.name)
    r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts",
                        "--loglevel=error"],
                       cwd=work, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        pytest.fail(f"npm ci of the pinned E2B SDKs failed ({r.returncode}):\n"
                    f"{_tail(r.stderr or r.stdout)}", pytrace=False)


@pytest.fixture(scope="module")
def sdk_dir(tmp_path_factory):
    work = tmp_path_factory.mktemp("e2b-sdk")
    install_sdks(work, SDK_DIR / "suite.mjs")
    for package in ("e2b", "e2b-old", "@e2b/code-interpreter"):
        if not (work / "node_modules" / package / "package.json").is_file():
            pytest.fail(f"npm ci did not install {package}", pytrace=False)
    return work


def e2b_key(client, quotas=None):
    """A new tenant and its key, in E2B's spelling."""
    tid = "e2b-" + uuid.uuid4().hex[:10]
    body = {"tenant_id": tid, **({"quotas": quotas} if quotas else {})}
    assert client.post(ADMIN, json=body).status == 201
    r = client.post(f"{ADMIN}/{tid}/keys", json={"name": "e2b"})
    assert r.status == 201, r
    key = r.body["api_key"]
    m = re.fullmatch(r"sl([0-9a-f]{12})_([0-9a-f]{48})", key)
    assert m, key
    # The answer gives the same key in E2B's spelling.
    assert r.body["e2b_api_key"] == "e2b_" + m.group(1) + m.group(2), r.body
    return tid, r.body["e2b_api_key"]


def run_suite(daemon, sdk_dir, sdk, scenarios, key, other_key, quota_key=""):
    url = f"http://127.0.0.1:{daemon.port}"
    env = dict(os.environ, E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=key,
               OTHER_KEY=other_key, QUOTA_KEY=quota_key)
    env.pop("E2B_DOMAIN", None)
    r = subprocess.run(["node", "suite.mjs", sdk, *scenarios], cwd=sdk_dir, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (f"the SDK suite failed ({r.returncode}):\n{_tail(r.stderr)}\n"
                               f"--- stdout ---\n{_tail(r.stdout)}\n"
                               f"--- daemon stderr ---\n{_tail(daemon.stderr())}")
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert lines, f"the SDK suite printed nothing; stderr:\n{_tail(r.stderr)}"
    out = json.loads(lines[-1])
    for name in scenarios:
        assert "thrown" not in out[name], (name, out[name],
                                           _tail(daemon.stderr(), 4000))
    return out


@pytest.fixture(scope="module")
def keys(client):
    return e2b_key(client), e2b_key(client), e2b_key(client, {"commands_in_flight": 1})


@pytest.fixture(scope="module")
def new_sdk(daemon, sdk_dir, keys):
    (_, key), (_, other), (_, quota) = keys
    return run_suite(daemon, sdk_dir, "e2b", NEW, key, other, quota)


@pytest.fixture(scope="module")
def old_sdk(daemon, sdk_dir, keys):
    (_, key), (_, other), _ = keys
    return run_suite(daemon, sdk_dir, "e2b-old", OLD, key, other)


@pytest.fixture(params=["e2b", "e2b-old"])
def sdk(request, new_sdk, old_sdk):
    """Either version's report, with "old" saying which: 2.7 names a few
    errors and answers more generally (its shapes, not ours)."""
    return dict(new_sdk if request.param == "e2b" else old_sdk, old=request.param == "e2b-old")


def test_quickstart_commands_and_files(sdk):
    q = sdk["quickstart"]
    # The command ran in E2B's home, which is the sandbox's workspace, as
    # the sandbox's one identity (uid 0 of its own user namespace).
    assert q["run"] == {"stdout": "hello from /home/user\n0\n", "stderr": "oops\n",
                        "exitCode": 0}, q["run"]
    assert q["read"] == "first line\n" and q["readRel"] == "relative", q
    assert q["bytesLength"] == len("first line\n"), q
    assert ["notes.txt", "file", "/home/user/notes.txt"] in q["list"], q["list"]
    assert ["rel.txt", "file", "/home/user/rel.txt"] in q["list"], q["list"]
    assert q["existsYes"] is True and q["existsNo"] is False, q
    # makeDir makes parents; a second time it answers false (already_exists).
    assert q["mk"] is True and q["mkAgain"] is False, q
    assert q["renamed"] == {"name": "moved.txt", "path": "/home/user/dir/moved.txt",
                            "type": "file"}, q["renamed"]
    assert q["info"]["size"] == len("first line\n") and q["info"]["type"] == "file", q["info"]
    assert q["info"]["permissions"] == "-rw-------" and q["info"]["owner"] == "user", q["info"]
    assert q["info"]["modified"] is True, q["info"]
    assert q["deep"] == ["/home/user/dir", "/home/user/dir/moved.txt", "/home/user/dir/sub",
                         "/home/user/rel.txt"], q["deep"]
    # The shell sees the same files at /home/user and /workspace.
    assert q["seenByShell"] == "first line\nmoved.txt\nsub\n", q["seenByShell"]
    assert q["gone"] is False, q
    assert q["gz"] == (None if sdk["old"] else 7000), q  # inflated on arrival
    assert q["readMissing"]["name"] == ("NotFoundError" if sdk["old"] else "FileNotFoundError"), \
        q["readMissing"]
    assert q["outside"]["name"] == "InvalidArgumentError", q["outside"]
    assert "/home/user" in q["outside"]["message"], q["outside"]


def test_background_output_arrives_as_it_is_made(sdk):
    b = sdk["background"]
    assert b["exitCode"] == 0 and b["stdout"] == "out1\nout2\nout3\n", b
    assert b["stderr"] == "err1\nerr2\nerr3\n", b
    outs = [c for c in b["chunks"] if c[0] == "stdout"]
    assert "".join(c[1] for c in outs) == "out1\nout2\nout3\n", b["chunks"]
    # The first line reached the callback long before the command ended
    # (three 0.4 s sleeps): incrementally, not at the end.
    assert outs[0][2] < b["elapsed"] - 600, b
    assert isinstance(b["pid"], int) and b["pid"] > 0, b


def test_processes_are_listed_reconnected_and_killed(sdk):
    p = sdk["processes"]
    assert {"pid": p["pid"], "cmd": "/bin/bash",
            "args": ["-l", "-c", "echo started; sleep 60"]} in p["listed"], p["listed"]
    # A reconnect replays the output from its first byte.
    assert p["replay"] == "started\n", p
    assert p["killed"] is True and p["killedAgain"] is False, p
    # Both handles see the kill: wait() raises (no zero exit).
    for waited in (p["waited"], p["reconnectWaited"]):
        assert waited and waited["name"] == "CommandExitError", p
        assert waited["exitCode"] != 0, waited
    assert p["after"] == 0, p
    failed = p["failed"]
    assert failed["name"] == "CommandExitError" and failed["exitCode"] == 3, failed
    assert failed["stdout"] == "partial\n" and "exit status 3" in failed["message"], failed


def test_stdin_reaches_the_command(new_sdk):
    assert new_sdk["stdin"]["stdout"] == "hello stdin\ndone\n", new_sdk["stdin"]


def test_environment_cwd_and_users(new_sdk):
    e = new_sdk["environment"]
    assert e["a"] == "from-create kept\n", e
    assert e["b"] == "from-run kept\n", e
    assert e["cwd"] == "/tmp\n", e
    assert e["root"] == "0\n", e
    assert e["stranger"]["name"] == "InvalidArgumentError", e["stranger"]
    assert "one user" in e["stranger"]["message"], e["stranger"]


def test_lifecycle_list_timeout_pause_connect_kill(sdk):
    lc = sdk["lifecycle"]
    info = lc["info"]
    assert info["state"] == "running" and info["templateId"] == "base", info
    assert info["metadata"]["suite"] == "lifecycle", info
    started = datetime.fromisoformat(info["startedAt"].replace("Z", "+00:00"))
    ended = datetime.fromisoformat(info["endAt"].replace("Z", "+00:00"))
    assert 110 <= (ended - started).total_seconds() <= 130, info  # the 120 s asked
    later = datetime.fromisoformat(lc["laterEnd"].replace("Z", "+00:00"))
    assert (later - started).total_seconds() >= 290, lc  # setTimeout(300 s)
    assert lc["listed"] == [[lc["id"], "running"]], lc["listed"]
    assert lc["paused"] is True, lc
    assert lc["whilePaused"] == "paused", lc
    assert lc["listedPaused"] == [[lc["id"], "paused"]], lc
    assert lc["afterResume"] == "running", lc
    assert lc["file"] == "survives a pause" and lc["run"] == "awake\n", lc
    assert lc["killed"] is (None if sdk["old"] else True), lc  # 2.7's kill() answers nothing
    assert lc["killedAgain"] is False, lc
    assert lc["infoAfterKill"]["name"] in ("SandboxNotFoundError", "NotFoundError"), lc


def test_pause_of_a_paused_sandbox(new_sdk):
    # The new SDK answers false for an already paused sandbox (409).
    assert new_sdk["lifecycle"]["pausedAgain"] is False, new_sdk["lifecycle"]


def test_listing_pages(new_sdk):
    p = new_sdk["paging"]
    assert p == {"first": 2, "hasNextAfterFirst": True, "second": 1,
                 "hasNextAfterSecond": False, "distinct": 3}, p


def test_the_lifetime_ends_a_sandbox(new_sdk, daemon):
    lt = new_sdk["lifetime"]
    assert lt["before"] is True, lt
    assert lt["info"]["name"] in ("SandboxNotFoundError", "NotFoundError"), lt
    assert lt["killed"] is False, lt
    assert lt["pausedState"] == "paused", lt
    assert "at the end of its timeout" in daemon.stderr(), "the log says what ended it"


def test_tenants_cannot_see_each_other(new_sdk):
    t = new_sdk["tenants"]
    assert t["info"]["name"] in ("SandboxNotFoundError", "NotFoundError"), t
    assert t["killed"] is False, t
    assert t["connect"]["name"] in ("SandboxNotFoundError", "NotFoundError"), t
    assert t["mine"] not in t["listed"] and t["theirs"] in t["listed"], t
    assert t["crossToken"] == 401, t
    assert t["stillRuns"] == "mine\n", t


def test_unsupported_calls_fail_clearly(new_sdk):
    u = new_sdk["unsupported"]
    assert "volumeMounts is not supported" in u["volumes"]["message"], u
    assert "501" in u["snapshot"]["message"], u
    assert "memory" in u["memoryPause"]["message"], u


def test_pty_output_input_and_resize(new_sdk):
    p = new_sdk["pty"]
    screen = p["screen"]
    assert "TERM=xterm-256color" in screen, screen
    assert "24 80" in screen and "40 132" in screen, screen  # stty size before, after resize
    assert "/dev/pts/" in screen, screen
    assert p["pid"] in p["listed"], p
    assert p["waited"]["name"] == "CommandExitError" and p["waited"]["exitCode"] == 7, p["waited"]


def test_watch_dir_events(new_sdk):
    w = new_sdk["watch"]
    events = w["events"]
    for want in (["create", "a.txt"], ["create", "sub"], ["create", "sub/b.txt"],
                 ["rename", "a.txt"], ["create", "c.txt"], ["remove", "sub/b.txt"]):
        assert want in events, (want, events)
    assert ["write", "a.txt"] in events or ["create", "a.txt"] in events, events


def test_code_interpreter(new_sdk):
    ci = new_sdk["interpreter"]
    # The quickstart: state survives between runs; the last expression is
    # the main result.
    assert ci["first"] == {"results": 0, "error": None}, ci["first"]
    assert ci["second"] == "2", ci
    assert ci["printed"] == {"stdout": ["to stdout\n", "from a child\n"],
                             "stderr": ["to stderr\n"]}, ci["printed"]
    assert ["out", "to stdout\n"] in ci["streamed"] and ["err", "to stderr\n"] in ci["streamed"], ci
    failed = ci["failed"]
    assert failed["name"] == "ZeroDivisionError" and failed["value"] == "division by zero", failed
    assert 'File "<cell>", line 3' in failed["traceback"], failed  # the cell's lines, not ours
    assert "in f" in failed["traceback"] and "interpreter" not in failed["traceback"], failed
    assert ci["env"] == "'yes'" and ci["envAfter"] is None, ci  # env_vars for that run only
    assert {"html": "<b>hi</b>", "text": ci["html"][0]["text"], "main": True} == ci["html"][0], ci
    assert ci["plotError"] is None, ci
    assert len(ci["plot"]) == 1 and ci["plot"][0]["png"] == "iVBORw0KGgoA", ci["plot"]  # a PNG
    assert "png" in ci["plot"][0]["formats"], ci["plot"]
    assert ci["ctx"]["cwd"] == "/tmp" and ci["ctx"]["language"] == "python", ci["ctx"]
    assert ci["inCtx"] == "'/tmp'", ci
    assert ci["defaultHasNoY"] == "NameError", ci  # contexts do not share state
    assert ci["contexts"] == sorted(["default", ci["ctxId"]]), ci
    assert ci["afterRestart"] == "NameError", ci  # a restart starts afresh
    assert ci["contextsAfter"] == ["default"], ci
    assert ci["file"] == "written by python", ci
    # An abandoned cell's output never reaches the next run, nor our ids.
    assert ci["abandoned"] == "TimeoutError", ci
    assert ci["fresh"] == {"stdout": ["fresh\n"], "text": "'x'", "results": [[]]}, ci["fresh"]


def test_metrics_are_the_sandboxes_own(new_sdk):
    m = new_sdk["metrics"]
    for sample in m["first"] + m["second"]:
        assert sample["timestamp"] is True and sample["cpuCount"] >= 1, sample
        # 2 MiB written through the files API are on its disk.
        assert sample["diskUsed"] >= 2 * 1024 * 1024, sample
    assert len(m["first"]) == 1 and len(m["second"]) == 1, m
    # This machine has the memory and CPU controllers (cgroup v1), as the
    # CI's does: the counts are real.
    busy = m["second"][0]
    assert busy["memUsed"] > 0 and busy["memTotal"] > 0, busy
    # A shell spinning on one CPU of the sandbox's two: ~50 % on an idle
    # machine, well above an idle sandbox's ~0 on a loaded one.
    assert 5 <= busy["cpuUsedPct"] <= 100.5, busy
    assert 5 <= m["first"][0]["cpuUsedPct"] <= 100.5, m["first"]


def test_a_tenants_command_quota_counts_e2b_processes(new_sdk):
    q = new_sdk["quota"]
    # commands_in_flight 1: the background process holds it.
    assert q["second"]["name"] == "RateLimitError", q
    assert "commands_in_flight" in q["second"]["message"], q
    assert q["after"] == "room again\n", q
