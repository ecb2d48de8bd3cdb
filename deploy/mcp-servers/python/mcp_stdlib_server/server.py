"""MCP over stdio (newline-delimited JSON-RPC 2.0) with the standard library.

Tools:
  echo            returns its text argument
  read_text_file  returns the contents of a file (the fence decides)
  now             the current time in a time zone (zoneinfo)
  fetch           the body of an http:// URL (name resolution, TCP)
"""
import datetime
import json
import os
import sys
import urllib.request
import zoneinfo

PROTOCOLS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]

TOOLS = [
    {"name": "echo", "description": "Echo the text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "read_text_file", "description": "Read a text file.",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "now", "description": "The current time in a time zone.",
     "inputSchema": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}},
    {"name": "fetch", "description": "Fetch an http:// URL.",
     "inputSchema": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}},
]


def call(name, args):
    if name == "echo":
        return str(args.get("text", ""))
    if name == "read_text_file":
        with open(os.fspath(args["path"]), encoding="utf-8") as f:
            return f.read(1 << 20)
    if name == "now":
        tz = zoneinfo.ZoneInfo(str(args["tz"]))
        return datetime.datetime.now(tz).isoformat()
    if name == "fetch":
        url = str(args["url"])
        if not url.startswith("http://"):
            raise ValueError("only http:// URLs")
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read(1 << 20).decode("utf-8", "replace")
    raise KeyError(name)


def handle(msg):
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        return None  # a notification
    if method == "initialize":
        asked = msg.get("params", {}).get("protocolVersion")
        return {"protocolVersion": asked if asked in PROTOCOLS else PROTOCOLS[0],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "mcp-stdlib-server", "version": "1.0.0"}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        p = msg.get("params", {})
        try:
            text = call(p.get("name"), p.get("arguments") or {})
            return {"content": [{"type": "text", "text": text}]}
        except KeyError as e:
            raise LookupError("unknown tool or argument: %s" % e)
        except (OSError, ValueError, zoneinfo.ZoneInfoNotFoundError) as e:
            return {"content": [{"type": "text", "text": "%s: %s" % (type(e).__name__, e)}], "isError": True}
    raise LookupError("method not found: %s" % method)


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            out = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}
        else:
            try:
                result = handle(msg)
                if result is None:
                    continue
                out = {"jsonrpc": "2.0", "id": msg.get("id"), "result": result}
            except LookupError as e:
                out = {"jsonrpc": "2.0", "id": msg.get("id"), "error": {"code": -32601, "message": str(e)}}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
