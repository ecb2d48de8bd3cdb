// Package interop holds the proxy's fidelity tests with real MCP clients:
// the @modelcontextprotocol/conformance suite (through supergateway, a
// stdio↔HTTP bridge), go-sdk v1.8.0 as a Go client, the TypeScript SDK (v1
// and v2) and the MCP Inspector CLI. Each runs the same operations against
// real servers direct and through the real `mcpwarden run` binary, in both
// protocol eras, and compares what it saw. The clients are pinned in
// deploy/interop (installed by scripts/test-env.sh install).
//
// The package has no code of its own: everything is in its tests.
package interop
