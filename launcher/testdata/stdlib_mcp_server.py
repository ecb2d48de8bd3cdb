#!/usr/bin/env python3
"""A minimal MCP server over stdio using only the standard library."""
import json
import os
import sys


def tools():
    return [{
        "name": "read_file",
        "description": "Read a text file",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }]


def handle(req):
    method = req.get("method")
    if method == "initialize":
        return {"protocolVersion": req["params"].get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "stdlib-python", "version": "1"}}
    if method == "tools/list":
        return {"tools": tools()}
    if method == "tools/call":
        p = req["params"]
        if p.get("name") != "read_file":
            raise KeyError("unknown tool")
        with open(p["arguments"]["path"], encoding="utf-8") as f:
            text = f.read()
        return {"content": [{"type": "text", "text": text}]}
    raise KeyError("unknown method")


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        if "id" not in req:
            continue
        try:
            resp = {"jsonrpc": "2.0", "id": req["id"], "result": handle(req)}
        except Exception as e:  # report, keep serving
            resp = {"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32603, "message": type(e).__name__ + ": " + str(e)}}
        sys.stdout.write(json.dumps(resp) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
