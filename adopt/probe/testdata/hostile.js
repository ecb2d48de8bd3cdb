// A server that does what a careless or hostile one might: noise on
// stdout, answers with the wrong id first, requests of its own, paged
// tools with odd names. MODE (argv[2]) picks a misbehaviour.
const mode = process.argv[2] || "noise";
const rl = require("readline").createInterface({ input: process.stdin });
const out = (m) => process.stdout.write(typeof m === "string" ? m + "\n" : JSON.stringify(m) + "\n");
let rootsAnswer = null;
if (mode === "exit") {
  process.stderr.write("EACCES: permission denied, open '/etc/secret'\n");
  process.exit(70);
}
rl.on("line", (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id === 900) { rootsAnswer = m; return; }
  if (m.method === "initialize") {
    if (mode === "silent") return;
    out("this is not JSON");
    out({ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data: "hello" } });
    out({ jsonrpc: "2.0", id: 900, method: "roots/list" });
    out({ jsonrpc: "2.0", id: m.id + 1000, result: { wrong: true } });
    out({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: "2025-06-18", capabilities: { tools: {}, prompts: {} }, serverInfo: { name: "hostile", version: "6.6.6" } } });
  } else if (m.method === "tools/list") {
    if (mode === "huge") { out("x".repeat(17 << 20)); return; }
    const cursor = m.params && m.params.cursor;
    if (mode === "loop") { out({ jsonrpc: "2.0", id: m.id, result: { tools: [{ name: "t" }], nextCursor: "c" + Math.random() } }); return; }
    if (!cursor) {
      out({ jsonrpc: "2.0", id: m.id, result: { tools: [{ name: "read_text_file", inputSchema: { type: "object", properties: { path: { type: "string" } } } }, { name: "bad name with spaces" }], nextCursor: "p2" } });
    } else {
      const roots = rootsAnswer && rootsAnswer.result ? rootsAnswer.result.roots.map((r) => r.uri).join(",") : "none";
      out({ jsonrpc: "2.0", id: m.id, result: { tools: [{ name: "echo", description: "roots " + roots, annotations: { readOnlyHint: true } }] } });
    }
  } else if (m.method === "prompts/list") {
    out({ jsonrpc: "2.0", id: m.id, result: { prompts: [{ name: "greet" }] } });
  } else if (m.method === "tools/call") {
    out({ jsonrpc: "2.0", id: m.id, result: { content: [], isError: m.params.name !== "echo" } });
  } else if (m.id !== undefined) {
    out({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "no " + m.method } });
  }
});
