"""The official MCP TypeScript SDK (@modelcontextprotocol/sdk, pinned in
mcp_sdk/package.json and package-lock.json) against the MCP endpoint: its
StreamableHTTPClientTransport connects with the token in requestInit, lists
the tools, resolves and creates a sandbox and runs a command in it
(mcp_sdk/client.mjs prints what it saw as JSON).

Node.js and npm are installed when missing (Debian's nodejs and npm
packages; needs root). The npm packages go to a temporary directory, never
into the source tree. A missing tool fails the test with the reason: it is
never skipped."""

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

SDK_DIR = Path(__file__).resolve().parent / "mcp_sdk"
MCP = "/api/v1/sandboxes/mcp/streamable-http"
TOOLS = {"sandbox_profile", "sandbox_resolve", "sandbox_create", "sandbox_status",
         "sandbox_audit_get", "sandbox_exec", "sandbox_exec_status", "sandbox_cancel",
         "sandbox_write_file", "sandbox_read_file", "sandbox_suspend", "sandbox_resume",
         "sandbox_release"}
# Ours, additive (issue 14).
OURS = {"sandbox_list_dir", "sandbox_make_dir", "sandbox_delete_path", "sandbox_move_path",
        "sandbox_write_text", "sandbox_read_text"}
MIN_NODE = 18  # the SDK's engines field


def _tail(text, n=3000):
    return text[-n:] if text else ""


def ensure_node():
    """node and npm on PATH, installing Debian's packages when missing."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        if os.geteuid() != 0:
            pytest.fail(f"{' and '.join(missing)} not found and not root to install them: "
                        f"apt-get install -y nodejs npm", pytrace=False)
        packages = ["nodejs", "npm"] if "node" in missing else ["npm"]
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for cmd in (["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]):
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
            if r.returncode != 0:
                pytest.fail(f"{' '.join(cmd)} failed ({r.returncode}) while installing "
                            f"{packages} for the MCP SDK test:\n{_tail(r.stderr or r.stdout)}",
                            pytrace=False)
        still = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
        if still:
            pytest.fail(f"{still} still missing after apt-get install {packages}", pytrace=False)
    r = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=60)
    m = re.match(r"v(\d+)\.", r.stdout.strip())
    if r.returncode != 0 or not m:
        pytest.fail(f"node --version failed: {r.stdout!r} {r.stderr!r}", pytrace=False)
    if int(m.group(1)) < MIN_NODE:
        pytest.fail(f"node {r.stdout.strip()} is too old for @modelcontextprotocol/sdk "
                    f"(needs >= {MIN_NODE})", pytrace=False)


@pytest.fixture(scope="module")
def sdk_dir(tmp_path_factory):
    """A scratch copy of mcp_sdk/ with the pinned packages installed by npm ci."""
    ensure_node()
    work = tmp_path_factory.mktemp("mcp-sdk")
    for name in ("package.json", "package-lock.json", "client.mjs"):
        shutil.copy2(SDK_DIR / name, work / name)
    r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts",
                        "--loglevel=error"],
                       cwd=work, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        pytest.fail(f"npm ci of the pinned MCP SDK failed ({r.returncode}):\n"
                    f"{_tail(r.stderr or r.stdout)}", pytrace=False)
    if not (work / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        pytest.fail("npm ci did not install @modelcontextprotocol/sdk", pytrace=False)
    return work


def run_client(daemon, sdk_dir, sandbox_id, scope, *, token=None, bridge=False):
    """The SDK client's report; bridge=True: over stdio through `sandloom mcp`."""
    url = f"http://127.0.0.1:{daemon.port}{MCP}"
    env = dict(os.environ, SANDLOOM_MCP_TOKEN=token or daemon.token)
    if bridge:
        env["SANDLOOM_MCP_BRIDGE"] = str(Path(daemon.binary).parent / "sandloom")
    r = subprocess.run(["node", "client.mjs", url, sandbox_id, scope], cwd=sdk_dir, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (f"the SDK client failed ({r.returncode}):\n{_tail(r.stderr)}\n"
                               f"--- stdout ---\n{_tail(r.stdout)}\n"
                               f"--- daemon stderr ---\n{_tail(daemon.stderr())}")
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    assert lines, f"the SDK client printed nothing; stderr:\n{_tail(r.stderr)}"
    return json.loads(lines[-1])


def test_official_typescript_sdk_client(daemon, sdk_dir):
    sandbox_id = f"sdk-{uuid.uuid4().hex[:16]}"
    scope = f"scope-{uuid.uuid4().hex[:8]}"
    out = run_client(daemon, sdk_dir, sandbox_id, scope)

    # The SDK's initialize handshake, answered statelessly.
    assert out["protocolVersion"] in ("2025-06-18", "2025-11-25"), out
    assert out["sessionId"] is None, "the server must not issue Mcp-Session-Id"
    assert out["serverInfo"]["name"] == "agent-sandbox", out
    assert "tools" in out["capabilities"], out
    assert "sandbox_release" in (out["instructions"] or ""), out

    assert set(out["tools"]) == TOOLS | OURS and len(out["tools"]) == 13 + len(OURS), out["tools"]
    assert out["titles"] == {"sandbox_profile": "Sandbox runtime profile"}, out["titles"]

    # Ours through the official client: the text round trip and a listing.
    assert out["writeText"]["isError"] is False, out["writeText"]
    assert out["readText"]["structured"]["text"] == "née ✓\n", out["readText"]
    assert "n.txt" in [e["name"] for e in out["listDir"]["structured"]["entries"]], out["listDir"]

    # Every structured result passed the SDK's outputSchema validation.
    assert out["profile"]["isError"] is False, out["profile"]
    assert out["profile"]["structured"]["transport"] == "streamable-http", out["profile"]

    resolved = out["resolve"]
    assert resolved["isError"] is False, resolved
    assert resolved["structured"]["sandbox_id"] == sandbox_id, resolved
    assert resolved["structured"]["worker_id"] == daemon.worker_id, resolved
    generation = resolved["structured"]["generation"]

    assert out["create"]["isError"] is False, out["create"]
    assert out["create"]["structured"] == {"sandbox_id": sandbox_id, "generation": generation,
                                           "status": "READY"}, out["create"]

    run = out["exec"]
    assert run["isError"] is False, run
    assert run["structured"]["status"] == "SUCCEEDED", run
    assert "sdk-marker-42" in run["structured"]["stdout"], run
    assert "sdk-marker-42" in run["text"], run  # the text block mirrors it

    stale = out["staleExec"]
    assert stale["isError"] is True and stale["structured"] is None, stale
    assert "STALE_SANDBOX_ROUTE" in stale["text"], stale

    assert out["release"]["isError"] is False, out["release"]
    assert out["release"]["structured"] == {"sandbox_id": sandbox_id, "status": "RELEASED"}

    # Unknown tool: a JSON-RPC error the SDK raises (-32602).
    assert out["unknownTool"] and out["unknownTool"]["code"] == -32602, out["unknownTool"]
    assert out["transportErrors"] == [], out["transportErrors"]

    # The sandbox really went through its lifecycle on the daemon.
    r = daemon.client().get(f"/api/v1/sandboxes/{sandbox_id}")
    assert r.status == 200 and r.body["status"] == "RELEASED", r
    assert r.body["generation"] == generation + 1, r


def test_official_sdk_over_stdio_through_the_bridge(daemon, sdk_dir):
    """`sandloom mcp` as an stdio-only agent runs it: the SDK's
    StdioClientTransport starts the bridge, which relays every message to
    the endpoint; the handshake, the schemas and a sandbox's whole life
    pass through unchanged."""
    sandbox_id = f"br-{uuid.uuid4().hex[:16]}"
    out = run_client(daemon, sdk_dir, sandbox_id, "bridge-scope", bridge=True)
    assert out["serverInfo"]["name"] == "agent-sandbox", out
    assert set(out["tools"]) == TOOLS | OURS, out["tools"]
    assert out["profile"]["isError"] is False, out["profile"]
    assert out["resolve"]["structured"]["sandbox_id"] == sandbox_id, out["resolve"]
    generation = out["resolve"]["structured"]["generation"]
    assert out["create"]["structured"]["status"] == "READY", out["create"]
    assert "sdk-marker-42" in out["exec"]["structured"]["stdout"], out["exec"]
    assert out["readText"]["structured"]["text"] == "née ✓\n", out["readText"]
    assert "STALE_SANDBOX_ROUTE" in out["staleExec"]["text"], out["staleExec"]
    assert out["unknownTool"]["code"] == -32602, out["unknownTool"]
    assert out["transportErrors"] == [], out["transportErrors"]
    r = daemon.client().get(f"/api/v1/sandboxes/{sandbox_id}")
    assert r.status == 200 and r.body["status"] == "RELEASED", r
    assert r.body["generation"] == generation + 1, r


def test_the_bridge_with_a_tenant_key_keeps_to_the_tenant(daemon, sdk_dir):
    """A tenant's key in the bridge: the agent names its sandbox plainly and
    sees it so; the service stored it in the tenant's namespace."""
    c = daemon.client()
    tid = "br-" + uuid.uuid4().hex[:8]
    assert c.post("/api/v1/admin/tenants", json={"tenant_id": tid}).status == 201
    key = c.post(f"/api/v1/admin/tenants/{tid}/keys", json={"name": "desktop"}).body
    name = f"tb-{uuid.uuid4().hex[:12]}"
    out = run_client(daemon, sdk_dir, name, "s", token=key["api_key"], bridge=True)
    assert out["resolve"]["structured"]["sandbox_id"] == name, out["resolve"]
    assert "sdk-marker-42" in out["exec"]["structured"]["stdout"], out["exec"]
    assert out["release"]["structured"] == {"sandbox_id": name, "status": "RELEASED"}
    r = c.get(f"/api/v1/sandboxes/{tid}~{name}/audit")
    assert r.status == 200, r
    assert r.body["history"][-1]["released_by"] == f"tenant:{tid}/key:{key['key_id']}", r.body
    assert c.get(f"/api/v1/sandboxes/{name}").status == 404


def test_the_bridge_answers_a_wrong_key_as_a_json_rpc_error(daemon, tmp_path):
    """Without the SDK: a request line with a wrong key gets one JSON-RPC
    error naming the service's code, a line that is not JSON a parse error,
    and stdout holds nothing else."""
    binary = Path(daemon.binary).parent / "sandloom"
    lines = ['{"jsonrpc":"2.0","id":1,"method":"ping"}', "not json",
             '{"jsonrpc":"2.0","method":"notifications/initialized"}']
    r = subprocess.run([str(binary), "mcp"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=60,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                            "SANDLOOM_URL": f"http://127.0.0.1:{daemon.port}",
                            "SANDLOOM_API_KEY": "sl" + "0" * 12 + "_" + "0" * 48,
                            "HOME": str(tmp_path)})  # no config file
    assert r.returncode == 0, r.stderr
    answers = sorted((json.loads(line) for line in r.stdout.splitlines()),
                     key=lambda a: str(a["id"]))
    assert len(answers) == 2, r.stdout
    assert answers[0]["id"] == 1 and answers[0]["error"]["code"] == -32603, answers
    assert "SANDBOX_UNAUTHORIZED" in answers[0]["error"]["message"], answers
    assert answers[1] == {"jsonrpc": "2.0", "id": None,
                          "error": {"code": -32700, "message": "Parse error"}}, answers
    assert "SANDBOX_UNAUTHORIZED" in r.stderr and "0" * 48 not in r.stderr + r.stdout


def test_the_readmes_agent_configuration_starts_a_working_bridge(daemon):
    """The README's mcpServers snippet, as an agent reads it: its command
    and args (the CLI on PATH), its env with this daemon's URL and key, and
    an initialize, tools/list and ping through it."""
    import re
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"^```json\n(.*?)^```", readme, re.S | re.M)
              if "mcpServers" in b]
    assert len(blocks) == 1, "the README shows one agent configuration"
    server = blocks[0]["mcpServers"]["sandloom"]
    assert set(server["env"]) == {"SANDLOOM_URL", "SANDLOOM_API_KEY"}, server
    env = {"PATH": f"{Path(daemon.binary).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "HOME": str(daemon.state), "SANDLOOM_URL": f"http://127.0.0.1:{daemon.port}",
           "SANDLOOM_API_KEY": daemon.token}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "readme", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
    ]
    r = subprocess.run([server["command"], *server["args"]], env=env, timeout=60, text=True,
                       input="".join(json.dumps(m) + "\n" for m in messages),
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    answers = {a["id"]: a for a in map(json.loads, r.stdout.splitlines())}
    assert set(answers) == {1, 2, 3}, r.stdout
    assert answers[1]["result"]["protocolVersion"] == "2025-06-18", answers[1]
    assert {t["name"] for t in answers[2]["result"]["tools"]} == TOOLS | OURS
    assert answers[3]["result"] == {}, answers[3]
