// Drives the Sandloom MCP endpoint with the official TypeScript SDK's
// Streamable HTTP client transport (tests/e2e/test_mcp_sdk.py runs it).
//
//   SANDLOOM_MCP_TOKEN=<token> node client.mjs <endpoint-url> <sandbox-id> <workspace-scope>
//
// (The token comes through the environment, not argv, so `ps` never shows it.)
// With SANDLOOM_MCP_BRIDGE=<path of the sandloom CLI> the client speaks
// stdio instead, through the SDK's StdioClientTransport, to `sandloom mcp`
// started with SANDLOOM_URL=<endpoint-url's origin> and the token as
// SANDLOOM_API_KEY: what Claude Desktop and Cursor do with the bridge.
// Connects (initialize handshake of the SDK's newest revision), lists the
// tools, resolves + creates a sandbox, runs a command in it, shows a tool
// error, releases the sandbox, and prints one JSON object on stdout for the
// test to assert on. Any failure exits 1 with the reason on stderr.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [url, sandboxId, scope] = process.argv.slice(2);
const token = process.env.SANDLOOM_MCP_TOKEN;
if (!url || !token || !sandboxId || !scope) {
  console.error("usage: SANDLOOM_MCP_TOKEN=<token> node client.mjs <url> <sandbox-id> <workspace-scope>");
  process.exit(2);
}

const bridge = process.env.SANDLOOM_MCP_BRIDGE;
const transport = bridge
  ? new StdioClientTransport({
      command: bridge,
      args: ["mcp"],
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", SANDLOOM_URL: new URL(url).origin,
             SANDLOOM_API_KEY: token },
      stderr: "inherit",
    })
  : new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
const client = new Client({ name: "sandloom-e2e", version: "1.0.0" });
const out = { transportErrors: [] };
transport.onerror = (e) => out.transportErrors.push(String(e?.message ?? e));

// callTool validates structuredContent against the tool's outputSchema
// (from the tools/list the client ran first), so a schema drift fails here.
async function tool(name, args) {
  const result = await client.callTool({ name, arguments: args });
  return {
    isError: result.isError === true,
    structured: result.structuredContent ?? null,
    text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n"),
  };
}

try {
  await client.connect(transport);
  // connect() reports transport errors (e.g. the optional GET stream being
  // refused with 405) through onerror; only errors after this point count.
  out.transportErrors = [];
  out.protocolVersion = transport.protocolVersion ?? null;
  out.sessionId = transport.sessionId ?? null;
  out.serverInfo = client.getServerVersion() ?? null;
  out.capabilities = client.getServerCapabilities() ?? null;
  out.instructions = client.getInstructions() ?? null;

  const listed = await client.listTools();
  out.tools = listed.tools.map((t) => t.name).sort();
  out.titles = Object.fromEntries(listed.tools.filter((t) => t.title).map((t) => [t.name, t.title]));

  out.profile = await tool("sandbox_profile", {});
  out.resolve = await tool("sandbox_resolve", { sandbox_id: sandboxId, workspace_scope_id: scope });
  const generation = out.resolve.structured?.generation;
  try {
    out.create = await tool("sandbox_create", { sandbox_id: sandboxId, generation });
    out.exec = await tool("sandbox_exec", {
      sandbox_id: sandboxId,
      generation,
      exec_id: `sdk-${Date.now()}`,
      argv: ["/bin/sh", "-c", "echo sdk-marker-$((6 * 7))"],
    });
    // Ours: text files and a listing, their results checked by the SDK
    // against the outputSchema like the reference's.
    const base = { sandbox_id: sandboxId, generation };
    out.writeText = await tool("sandbox_write_text", { ...base, path: "/workspace/n.txt", text: "née ✓\n" });
    out.readText = await tool("sandbox_read_text", { ...base, path: "/workspace/n.txt" });
    out.listDir = await tool("sandbox_list_dir", { ...base, path: "/workspace" });
    out.staleExec = await tool("sandbox_exec", {
      sandbox_id: sandboxId,
      generation: generation + 10,
      exec_id: `sdk-stale-${Date.now()}`,
      argv: ["true"],
    });
  } finally {
    out.release = await tool("sandbox_release", { sandbox_id: sandboxId });
  }
  try {
    await client.callTool({ name: "sandbox_teleport", arguments: {} });
    out.unknownTool = null;
  } catch (e) {
    out.unknownTool = { code: e?.code ?? null, message: String(e?.message ?? e) };
  }
  await client.close();
} catch (e) {
  console.error(`MCP SDK client failed: ${e?.stack ?? e}`);
  console.error(JSON.stringify(out));
  process.exit(1);
}
console.log(JSON.stringify(out));
