package main

import "github.com/mcpwarden/mcpwarden/launcher/sandbox"

// isSandboxHelper reports whether the launcher re-executed this binary as
// the fence helper (see launcher/sandbox).
func isSandboxHelper() bool { return sandbox.IsHelper() }

// runSandboxHelper fences this process and execs the server; it returns
// only when that failed.
func runSandboxHelper() int { return sandbox.Main() }
