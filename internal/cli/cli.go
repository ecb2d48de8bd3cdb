// Package cli is the command-line plumbing the two mcpwarden programs
// share: exit codes, flag sets with their usage texts, the NATS connection
// flags and the host configuration behind every command's flags.
//
// `mcpwarden` (cmd/mcpwarden) holds what runs on an agent host for every
// server start — run, scope, approve, wrap, config — and links no NATS
// server, ClickHouse or eBPF code, so that a launch does not pay for
// their start-up. The daemon, the collector and the readers of the audit
// pipeline (daemon, collect, query, events, why) are mcpwarden-pipeline
// (cmd/mcpwarden-pipeline), which `mcpwarden` execs for them: one command
// for people, two programs. internal/deptest pins the split.
package cli

import (
	"fmt"
	"os"
)

// Exit codes of mcpwarden. `run` passes the server's own status through when
// the server ran; the codes below are chosen above the usual shell range for
// a program's own failures and below 126 (which shells reserve).
const (
	ExitOK          = 0
	ExitUsage       = 64 // EX_USAGE: bad flags or arguments
	ExitBadScope    = 65 // EX_DATAERR: the scope record was refused
	ExitKernel      = 69 // EX_UNAVAILABLE: the kernel lacks what the scope needs (Landlock ABI)
	ExitServerStart = 70 // the server could not be started under the fence
	ExitInternal    = 71 // an internal or environment failure (state dir, audit log, daemon)
	ExitAuditSink   = 74 // EX_IOERR: the audit sink could not take records
	ExitScopeEnded  = 77 // EX_NOPERM: the scope expired or was revoked during the run, which was stopped
	ExitConfig      = 78 // EX_CONFIG: the host configuration cannot be read or used (a daemon with another path key)
)

// Fail prints err for a person and returns code.
func Fail(code int, err error) int {
	fmt.Fprintln(os.Stderr, "mcpwarden:", err)
	return code
}
