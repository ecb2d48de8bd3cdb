// A server that needs more than its runtime profile: it reads /etc/passwd
// at start-up (as servers that look up users do) and /etc/os-release in its
// "host_info" tool; "note" writes a file in the workspace.
const fs = require("fs");
const users = fs.readFileSync("/etc/passwd", "utf8").split("\n").length; // throws EACCES under the fence
const ws = process.argv[2];
const rl = require("readline").createInterface({ input: process.stdin });
const out = (m) => process.stdout.write(JSON.stringify(m) + "\n");
rl.on("line", (line) => {
  const m = JSON.parse(line);
  if (m.method === "initialize") {
    out({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "needy", version: "1.0" } } });
  } else if (m.method === "tools/list") {
    out({ jsonrpc: "2.0", id: m.id, result: { tools: [
      { name: "host_info", annotations: { readOnlyHint: true }, inputSchema: { type: "object", properties: {} } },
      { name: "note", inputSchema: { type: "object", properties: { file: { type: "string" }, text: { type: "string" } } } },
    ] } });
  } else if (m.method === "tools/call") {
    try {
      let text;
      if (m.params.name === "host_info") text = fs.readFileSync("/etc/os-release", "utf8").split("\n")[0] + " users=" + users;
      else { fs.writeFileSync(ws + "/" + m.params.arguments.file, m.params.arguments.text); text = "ok"; }
      out({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text }] } });
    } catch (e) {
      out({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: String(e) }], isError: true } });
    }
  } else if (m.id !== undefined) {
    out({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "no " + m.method } });
  }
});
