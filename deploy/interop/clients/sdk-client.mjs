// A TypeScript SDK client for mcpwarden's interop tests
// (launcher/proxy/interop): it connects to one stdio server, runs the ops
// it is given and prints what it saw, one JSON document on stdout.
//
//   node sdk-client.mjs SPEC.json
//
// SPEC: {"sdk": "v1"|"v2", "era": "2025-11-25"|"2026-07-28",
//        "command": [argv...], "rootsDir": "" | "/abs/dir", "ops": [op...]}
// op:   {"name", "method", "params"} (launcher/proxy/interop/ops_test.go)
// out:  [{"op", "result"} | {"op", "error": {"code", "message"}}]
//
// Handlers: sampling answers a fixed text, elicitation declines, roots
// lists rootsDir (none when empty: declared, but none, as go-sdk's default).
// v1 (@modelcontextprotocol/sdk) speaks the legacy era only; v2
// (@modelcontextprotocol/client) runs 2026-07-28 in its "auto" mode:
// server/discover first, initialize for a server that has none.
import { readFileSync } from "node:fs";

// stdout carries the one JSON document; the SDKs' own notes go to stderr.
for (const level of ["log", "info", "warn", "debug"]) {
  console[level] = (...args) => process.stderr.write(args.join(" ") + "\n");
}

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));

async function loadSDK(sdk) {
  if (sdk === "v1") {
    const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
    const { StdioClientTransport } = await import("@modelcontextprotocol/sdk/client/stdio.js");
    const t = await import("@modelcontextprotocol/sdk/types.js");
    return {
      Client,
      StdioClientTransport,
      options: {},
      // A tool run as a task (2025-11-25): created, polled, its result
      // fetched (the task's id and the related-task _meta differ run by run).
      task: async (client, p) => {
        const created = await client.request({ method: "tools/call", params: { ...p, task: { ttl: 60000 } } }, t.CreateTaskResultSchema);
        const taskId = created.task.taskId;
        const got = await client.request({ method: "tasks/get", params: { taskId } }, t.GetTaskResultSchema);
        const result = await client.request({ method: "tasks/result", params: { taskId } }, t.CallToolResultSchema);
        delete result._meta;
        return { created: created.task.status, polled: typeof got.status, result };
      },
      handle: (client, method, fn) => {
        const schema = {
          "sampling/createMessage": t.CreateMessageRequestSchema,
          "elicitation/create": t.ElicitRequestSchema,
          "roots/list": t.ListRootsRequestSchema,
        }[method];
        client.setRequestHandler(schema, fn);
      },
    };
  }
  if (sdk === "v2") {
    const { Client } = await import("@modelcontextprotocol/client");
    const { StdioClientTransport } = await import("@modelcontextprotocol/client/stdio");
    const mode = spec.era === "2026-07-28" ? "auto" : "legacy";
    return {
      Client,
      StdioClientTransport,
      options: { versionNegotiation: { mode } },
      handle: (client, method, fn) => client.setRequestHandler(method, fn),
    };
  }
  throw new Error(`unknown sdk ${sdk}`);
}

const { Client, StdioClientTransport, options, handle, task } = await loadSDK(spec.sdk);
const client = new Client(
  { name: `interop-ts-${spec.sdk}`, version: "1.0.0" },
  {
    ...options,
    capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } },
  },
);
handle(client, "sampling/createMessage", async () => ({
  model: "interop-model",
  role: "assistant",
  content: { type: "text", text: "hi from the client" },
}));
handle(client, "elicitation/create", async () => ({ action: "decline" }));
handle(client, "roots/list", async () => ({
  roots: spec.rootsDir ? [{ uri: `file://${spec.rootsDir}`, name: "work" }] : [],
}));
client.onerror = () => {}; // transport noise (a server's stderr, a closing pipe)

const [command, ...args] = spec.command;
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "ignore" });

const out = [];
const errorOf = (e) => ({
  code: typeof e?.code === "number" ? e.code : 0,
  message: String(e?.message ?? e),
});

try {
  await client.connect(transport);
} catch (e) {
  out.push({ op: "connect", error: errorOf(e) });
  process.stdout.write(JSON.stringify(out));
  process.exit(0);
}
out.push({
  op: "connect",
  result: {
    serverInfo: client.getServerVersion(),
    capabilities: client.getServerCapabilities(),
    instructions: client.getInstructions(),
    protocolVersion: client.getNegotiatedProtocolVersion?.(),
  },
});

// A filesystem server takes the client's roots after initialized, and a
// call before that runs against its old list: wait (bounded) until it
// lists the root, direct and wrapped alike.
if (spec.rootsDir) {
  const deadline = Date.now() + 20000;
  for (;;) {
    let res;
    try {
      res = await client.callTool({ name: "list_allowed_directories", arguments: {} });
    } catch {
      break; // not a filesystem server
    }
    if (res.isError || JSON.stringify(res.content).includes(spec.rootsDir)) break;
    if (Date.now() > deadline) {
      out.push({ op: "roots", error: { code: 0, message: `the server never listed ${spec.rootsDir}` } });
      break;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

const calls = {
  "tools/list": (p) => client.listTools(p),
  "tools/call": (p) => client.callTool(p),
  "resources/list": (p) => client.listResources(p),
  "resources/templates/list": (p) => client.listResourceTemplates(p),
  "resources/read": (p) => client.readResource(p),
  "prompts/list": (p) => client.listPrompts(p),
  "prompts/get": (p) => client.getPrompt(p),
  "completion/complete": (p) => client.complete(p),
  "logging/setLevel": async (p) => (await client.setLoggingLevel(p.level), "ok"),
  "resources/subscribe": async (p) => (await client.subscribeResource(p), "ok"),
  "resources/unsubscribe": async (p) => (await client.unsubscribeResource(p), "ok"),
  ...(task ? { "x-task": (p) => task(client, p) } : {}),
};

for (const op of spec.ops) {
  const fn = calls[op.method];
  if (!fn) {
    out.push({ op: op.name, error: { code: 0, message: `no TypeScript SDK call for ${op.method}` } });
    continue;
  }
  try {
    out.push({ op: op.name, result: await fn(op.params ?? undefined) });
  } catch (e) {
    out.push({ op: op.name, error: errorOf(e) });
  }
}

process.stdout.write(JSON.stringify(out));
await client.close().catch(() => {});
process.exit(0);
