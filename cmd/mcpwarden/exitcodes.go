package main

// Exit codes of mcpwarden. `run` passes the server's own status through when
// the server ran; the codes below are chosen above the usual shell range for
// a program's own failures and below 126 (which shells reserve).
const (
	exitOK          = 0
	exitUsage       = 64 // EX_USAGE: bad flags or arguments
	exitBadScope    = 65 // EX_DATAERR: the scope record was refused
	exitKernel      = 69 // EX_UNAVAILABLE: the kernel lacks what the scope needs (Landlock ABI)
	exitServerStart = 70 // the server could not be started under the fence
	exitInternal    = 71 // an internal or environment failure (state dir, audit log, daemon)
	exitAuditSink   = 74 // EX_IOERR: the audit sink could not take records
	exitScopeEnded  = 77 // EX_NOPERM: the scope expired or was revoked during the run, which was stopped
	exitConfig      = 78 // EX_CONFIG: the host configuration cannot be read or used (a daemon with another path key)
)
