"""The operator console (/admin) in a real browser: Debian's Chromium driven
by playwright-core (tests/e2e/console_browser/drive-console.mjs) against a
real daemon.

Needs: node >= 20 and npm (on the machine), Debian's `chromium` (installed
here with apt-get when missing, as root), and playwright-core at the version
pinned in console_browser/package-lock.json, installed with `npm ci` into
console_browser/node_modules on the first run and reused offline after it.
playwright-core never downloads a browser: it drives /usr/bin/chromium.
A missing tool fails the test with the reason; it never skips.

Screenshots go to $SANDLOOM_E2E_ARTIFACTS/<test> when that is set, else to
the test's tmp_path; the directory is printed (pytest -s shows it).
"""

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from sandloom_client import Sandbox

HERE = Path(__file__).resolve().parent
NODE_DIR = HERE / "console_browser"
SCRIPT = NODE_DIR / "drive-console.mjs"
CHROMIUM = Path("/usr/bin/chromium")
APT_TIMEOUT = 900
NPM_TIMEOUT = 300
BROWSER_TIMEOUT = 180
# The daemons here give their sandboxes the host's network: in the private
# mode every sandbox session adds (and its end removes) a veth on the host,
# and Chromium aborts its requests in flight when the host's interfaces
# change (net::ERR_NETWORK_CHANGED), which failed a run. The console is not
# about networking; test_network_private.py is.
CONSOLE_ENV = {"SANDBOX_NETWORK_MODE": "host"}


def _tail(text, n=40):
    return "\n".join((text or "").strip().splitlines()[-n:])


def _ensure_chromium():
    if os.access(CHROMIUM, os.X_OK):
        return
    if os.geteuid() != 0:
        pytest.fail(f"{CHROMIUM} is missing and this test is not root, so it cannot install it: "
                    f"run `apt-get install --no-install-recommends chromium` as root",
                    pytrace=False)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"]):
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.fail(f"installing Debian's chromium failed: {' '.join(cmd)}: {e}", pytrace=False)
        if r.returncode != 0:
            pytest.fail(f"installing Debian's chromium failed: {' '.join(cmd)} exited "
                        f"{r.returncode}\n{_tail(r.stdout)}\n{_tail(r.stderr)}", pytrace=False)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"apt-get installed chromium but {CHROMIUM} is still missing", pytrace=False)


def _tool(name):
    path = shutil.which(name)
    if not path:
        pytest.fail(f"`{name}` is not on PATH: the console browser test needs Node.js >= 20 "
                    f"and npm", pytrace=False)
    return path


def _ensure_playwright(npm):
    """playwright-core as pinned by the lock file, installed once (npm ci)."""
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/playwright-core"]["version"]
    installed = NODE_DIR / "node_modules" / "playwright-core" / "package.json"
    if installed.is_file() and json.loads(installed.read_text()).get("version") == pinned:
        return pinned
    env = dict(os.environ, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1")
    cmd = [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"]
    try:
        r = subprocess.run(cmd, cwd=NODE_DIR, env=env, capture_output=True, text=True,
                           timeout=NPM_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"`npm ci` in {NODE_DIR} failed: {e}", pytrace=False)
    if r.returncode != 0 or not installed.is_file():
        pytest.fail(f"`npm ci` in {NODE_DIR} could not install playwright-core {pinned} "
                    f"(exit {r.returncode}; the npm registry must be reachable on the first run)"
                    f"\n{_tail(r.stdout)}\n{_tail(r.stderr)}", pytrace=False)
    return pinned


@pytest.fixture(scope="module")
def node():
    """Every tool the browser test needs, installed or explained."""
    node = _tool("node")
    npm = _tool("npm")
    out = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    m = re.match(r"v(\d+)\.", out)
    if not m or int(m.group(1)) < 20:
        pytest.fail(f"playwright-core needs Node.js >= 20, {node} is {out or 'unknown'}",
                    pytrace=False)
    _ensure_chromium()
    _ensure_playwright(npm)
    return node


@pytest.fixture
def shots(request, tmp_path):
    base = os.environ.get("SANDLOOM_E2E_ARTIFACTS")
    path = Path(base) / request.node.name if base else tmp_path / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    yield path
    print(f"\nconsole screenshots: {path}")


def drive(node, daemon, mode, shots, **fleet):
    env = dict(os.environ, CONSOLE_URL=f"http://127.0.0.1:{daemon.port}",
               CONSOLE_TOKEN=daemon.token, CONSOLE_MODE=mode, CONSOLE_SHOTS=str(shots),
               CHROMIUM=str(CHROMIUM))
    env.update({k: str(v) for k, v in fleet.items()})
    try:
        r = subprocess.run([node, str(SCRIPT)], cwd=NODE_DIR, env=env, capture_output=True,
                           text=True, timeout=BROWSER_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the browser run ({mode}) did not finish in {BROWSER_TIMEOUT} s\n"
                    f"{_tail(e.stdout if isinstance(e.stdout, str) else '')}", pytrace=False)
    print(r.stdout)
    if r.returncode != 0:
        pytest.fail(f"the console failed in the browser ({mode}); screenshots in {shots}\n"
                    f"--- stdout ---\n{_tail(r.stdout)}\n--- stderr ---\n{_tail(r.stderr)}",
                    pytrace=False)


def test_console_token_handling_and_empty_fleet(node, daemon_factory, shots):
    """Token form, a wrong token (401 → message, back to the form), the empty
    fleet's explicit states, sessionStorage only, "forget token"."""
    d = daemon_factory(CONSOLE_ENV)
    drive(node, d, "empty", shots)


def test_console_sandbox_execution_output_and_release(node, daemon_factory, shots):
    """A real sandbox and execution: listed, filtered, output shown as text,
    released through the button (then checked through the REST API); a
    release the API refuses (execution in flight: 409) shows its code."""
    d = daemon_factory(CONSOLE_ENV)
    c = d.client()
    tag = uuid.uuid4().hex[:12]
    sb = Sandbox(c, f"sbx-console-{tag}", f"scope-console-{tag}")
    other = Sandbox(c, f"sbx-console-other-{tag}", f"scope-console-other-{tag}")
    busy = Sandbox(c, f"sbx-console-busy-{tag}", f"scope-console-busy-{tag}")
    for s in (sb, other, busy):
        assert s.resolve().status == 200
        assert s.connect().status == 200, s.connect()
    marker = f"console-marker-{tag} <b>not markup</b>"
    exec_id = f"x-console-{tag}"
    r = sb.exec(["/bin/sh", "-c", 'printf "%s\\n" "$1"; printf "stderr-%s\\n" "$1" >&2; exit 3',
                 "sh", marker], exec_id=exec_id)
    assert r.status == 200 and r.body["exit_code"] == 3, r
    assert marker in r.body["stdout"], r
    template = f"tpl-{tag}"
    r = other.exec(["sh", "-c", f"mkdir -p /envs/{template} && echo t > /envs/{template}/f"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = c.post(f"{other.path}/templates", json={"generation": other.generation, "name": template,
                                                "source_path": f"/envs/{template}"})
    assert r.status == 200, r
    big_exec, big_len = f"x-big-{tag}", 300_000
    r = other.exec(["python3", "-c", f"import sys; sys.stdout.write('y' * {big_len})"],
                   exec_id=big_exec)
    assert r.status == 200 and len(r.body["stdout"]) == big_len, r.status
    cancelled_exec = f"x-cancelled-{tag}"
    r = other.exec(["sleep", "60"], exec_id=cancelled_exec, background=True)
    assert r.status == 200
    assert c.post(f"{other.path}/exec/{cancelled_exec}/cancel?generation={other.generation}"
                  ).status == 200
    for _ in range(100):  # recorded before the browser filters on it
        x = c.get(f"{other.path}/exec/{cancelled_exec}",
                  params={"generation": other.generation}).body
        if x["status"] != "RUNNING":
            break
        time.sleep(0.1)
    assert x["termination_reason"] == "CANCELLED_BY_CLIENT", x
    live = Sandbox(c, f"sbx-console-live-{tag}", f"scope-console-live-{tag}")
    assert live.resolve().status == 200 and live.connect().status == 200
    live_exec = f"x-live-{tag}"
    r = live.exec(["sh", "-c", "for i in $(seq 1 60); do echo live-$i; sleep 0.5; done"],
                  exec_id=live_exec, background=True)
    assert r.status == 200 and r.body["status"] == "RUNNING", r
    busy_exec = f"x-busy-{tag}"
    r = busy.exec(["sleep", "120"], exec_id=busy_exec, background=True, timeout_seconds=150)
    assert r.status == 200 and r.body["status"] == "RUNNING", r

    try:
        drive(node, d, "fleet", shots, SANDBOX_ID=sb.id, SCOPE=sb.scope,
              OTHER_SANDBOX_ID=other.id, OTHER_SCOPE=other.scope, EXEC_ID=exec_id, EXIT_CODE=3,
              MARKER=marker, BUSY_SANDBOX_ID=busy.id, TEMPLATE=template, BIG_EXEC_ID=big_exec,
              BIG_LEN=big_len, CANCELLED_EXEC_ID=cancelled_exec, LIVE_EXEC_ID=live_exec)
    finally:
        c.post(f"{busy.path}/exec/{busy_exec}/cancel?generation={busy.generation}")

    route = sb.route()
    assert route.status == 200 and route.body["status"] == "RELEASED", route
    assert route.body["last_release_reason"] == "CLIENT_RELEASE", route
    assert other.route().body["status"] == "READY", "only the chosen sandbox is released"
    assert busy.route().body["status"] != "RELEASED", "the refused release released nothing"
    listed = c.get("/api/v1/templates").body["templates"]
    assert template not in [t["name"] for t in listed], "the console's unpublish did not happen"
    for name in ("exec-output.png", "release-refused.png", "fleet.png"):
        assert (shots / name).stat().st_size > 0, name


def test_console_marks_routes_whose_owner_restarted(node, daemon_factory, shots):
    """After a restart every old route still reads READY, but its owner
    (the worker epoch) is gone: the route says owner_live false (REST and
    the admin list) and the console badges it with what to do."""
    first = daemon_factory(CONSOLE_ENV)
    tag = uuid.uuid4().hex[:12]
    stale = Sandbox(first.client(), f"sbx-stale-{tag}", "scope")
    assert stale.resolve().status == 200 and stale.connect().status == 200
    assert stale.route().body["owner_live"] is True
    assert first.stop() == 0
    d = daemon_factory(CONSOLE_ENV, state_dir=first.state, port=first.port, token=first.token)
    c = d.client()
    fresh = Sandbox(c, f"sbx-fresh-{tag}", "scope")
    assert fresh.resolve().status == 200 and fresh.connect().status == 200
    stale = Sandbox(c, stale.id, stale.scope)
    route = stale.route().body
    assert route["status"] == "READY" and route["owner_live"] is False, route
    listed = {s["sandbox_id"]: s for s in
              c.get("/api/v1/admin/sandboxes").body["sandboxes"]}
    assert listed[stale.id]["owner_live"] is False and listed[fresh.id]["owner_live"] is True
    drive(node, d, "restarted", shots, STALE_SANDBOX_ID=stale.id, FRESH_SANDBOX_ID=fresh.id)
    assert (shots / "restarted.png").stat().st_size > 0
    # Resolving again heals it.
    assert stale.resolve().status == 200 and stale.connect().status == 200
    assert stale.route().body["owner_live"] is True


def test_console_terminal_runs_a_shell_in_the_sandbox(node, daemon_factory, shots):
    """The console's Terminal tab: xterm.js (compiled in) over the terminal's
    WebSocket, the token as a subprotocol; a command typed in the browser
    runs in the sandbox, and its exit is shown."""
    d = daemon_factory(CONSOLE_ENV)
    c = d.client()
    tag = uuid.uuid4().hex[:12]
    sb = Sandbox(c, f"sbx-console-term-{tag}", f"scope-console-term-{tag}")
    assert sb.resolve().status == 200
    assert sb.connect().status == 200
    marker = f"typed-in-the-console-{tag}"
    drive(node, d, "terminal", shots, TERMINAL_SANDBOX_ID=sb.id, MARKER=marker)
    r = sb.read("/workspace/from-console.txt")
    assert r.status == 200, r
    import base64
    assert base64.b64decode(r.body["content_base64"]) == (marker + "\n").encode()
    assert (shots / "terminal.png").stat().st_size > 0
