// The demo's MCP client (scripts/demo.sh): the TypeScript SDK's Client
// (@modelcontextprotocol/sdk, installed with the pinned servers in
// deploy/mcp-servers) starts one server entry of an MCP client
// configuration the way Claude Desktop does (its command, its args, its
// env block added to the environment) and makes the tool calls it is given.
//
//   node demo-client.mjs CONFIG NAME CALLS.json [RUN_FLAG...]
//
// CALLS.json holds an array of [tool, arguments]. RUN_FLAGs (--mode audit,
// --proxy=false) go right after "run" in a wrapped entry's arguments, as an
// operator would edit the entry for a canary; an entry that is not wrapped
// is refused then. Each answer is one JSON line on stdout:
// {"tool", "ok", "text"}; the server's and mcpwarden's stderr pass through.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "..", "deploy", "mcp-servers", "package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");

const [config, name, callsFile, ...runFlags] = process.argv.slice(2);
if (!callsFile) {
  console.error("usage: node demo-client.mjs CONFIG NAME CALLS.json [RUN_FLAG...]");
  process.exit(64);
}
const entry = (JSON.parse(readFileSync(config, "utf8")).mcpServers || {})[name];
if (!entry || !entry.command) {
  console.error(`demo-client: ${config} has no stdio server ${JSON.stringify(name)}`);
  process.exit(65);
}
const args = [...(entry.args || [])];
if (runFlags.length > 0) {
  if (args[0] !== "run") {
    console.error(`demo-client: ${name} is not wrapped (its args do not start with "run")`);
    process.exit(65);
  }
  args.splice(1, 0, ...runFlags);
}
const calls = JSON.parse(readFileSync(callsFile, "utf8"));

// Generous: the machine may be loaded, and a wrapped server's first start
// builds its fence.
const timeout = 180000;
const transport = new StdioClientTransport({
  command: entry.command,
  args,
  env: { ...process.env, ...(entry.env || {}) },
  stderr: "inherit",
});
const client = new Client({ name: "mcpwarden-demo", version: "1" }, { capabilities: {} });
try {
  await client.connect(transport, { timeout });
  for (const [tool, a] of calls) {
    let line;
    try {
      const r = await client.callTool({ name: tool, arguments: a }, undefined, { timeout });
      const text = (r.content || []).map((c) => c.text || "").join("");
      line = { tool, ok: !r.isError, text };
    } catch (e) {
      // A JSON-RPC error: the proxy's refusals come this way.
      line = { tool, ok: false, text: e.message };
    }
    console.log(JSON.stringify(line));
  }
} catch (e) {
  console.error(`demo-client: ${e.message}`);
  process.exitCode = 1;
} finally {
  await client.close();
}
