// Package compat holds the compatibility test of docs/compatibility.md: it
// runs popular MCP servers (pinned in deploy/mcp-servers), go-sdk's
// everything-server and a Python server in a virtual environment through
// the real `mcpwarden run` with the default runtime profile, drives
// initialize, tools/list and a real call of each, and checks the table in
// docs/compatibility.md against what it measured.
package compat
