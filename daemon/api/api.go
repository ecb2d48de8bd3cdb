// Package api is the daemon's local registration protocol: newline-delimited
// JSON over a unix socket that only root can open. The launcher registers
// each run here before the server is exec'd. docs/daemon.md documents the
// wire format; this package holds the message types and the server.
package api

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Version is the protocol version; a request with another version is refused.
const Version = 1

// MaxMessageSize bounds one request line.
const MaxMessageSize = 1 << 20

// Operations.
const (
	OpRegister   = "register"
	OpUnregister = "unregister"
	OpStatus     = "status"
)

// Request is one line from a client.
type Request struct {
	Version  int           `json:"version"`
	Op       string        `json:"op"`
	Register *Registration `json:"register,omitempty"`
	RunID    string        `json:"run_id,omitempty"` // for unregister
}

// Registration announces a run: its process tree starts at RootPID, which
// must exist and not have exec'd the server yet.
type Registration struct {
	RunID       string                 `json:"run_id"`
	RootPID     int                    `json:"root_pid"`
	Mode        schema.RunMode         `json:"mode"`
	Scope       *schema.CanonicalScope `json:"scope"`
	ScopeHash   string                 `json:"scope_hash"` // CanonicalScope.Hash; checked against Scope
	Runtime     []classify.RuntimePath `json:"runtime"`    // the run's runtime profile
	LandlockABI int                    `json:"landlock_abi,omitempty"`
	// ExecPending says RootPID is still the launcher's own helper, about to
	// exec the server: its file operations until then are not reported.
	ExecPending bool `json:"exec_pending,omitempty"`
}

// Response answers one request.
type Response struct {
	OK     bool           `json:"ok"`
	Error  string         `json:"error,omitempty"`
	Slot   uint32         `json:"slot,omitempty"`
	Health *schema.Health `json:"health,omitempty"`
	// PathKeyID names the daemon's path-hash key (schema.PathHasher.KeyID),
	// in answers to status and register: a launcher with another key
	// refuses to run.
	PathKeyID string `json:"path_key_id,omitempty"`
}

// Validate checks a registration before the daemon acts on it.
func (r *Registration) Validate() error {
	switch {
	case r.RunID == "" || len(r.RunID) > 128 || !schema.IsToken(r.RunID):
		return errors.New("run_id must be 1-128 token characters")
	case r.RootPID <= 1:
		return fmt.Errorf("root_pid %d is not a process the daemon can watch", r.RootPID)
	case r.Mode != schema.ModeEnforce && r.Mode != schema.ModeAudit:
		return fmt.Errorf("mode %q: want %q or %q", r.Mode, schema.ModeEnforce, schema.ModeAudit)
	case r.Scope == nil:
		return errors.New("scope missing")
	case len(r.Scope.AllowedPaths) == 0:
		return errors.New("scope has no allowed paths")
	case len(r.Runtime) > 4096:
		return errors.New("runtime profile has more than 4096 entries")
	}
	for _, p := range r.Scope.AllowedPaths {
		if !isCleanAbs(p.Path) {
			return fmt.Errorf("scope allowed path is not a clean absolute path")
		}
	}
	for _, p := range r.Runtime {
		if !isCleanAbs(p.Path) {
			return fmt.Errorf("runtime path is not a clean absolute path")
		}
	}
	return nil
}

// isCleanAbs accepts an absolute path already in its lexically clean form
// (no "..", ".", "//" or trailing "/"), without NUL, of at most PATH_MAX.
func isCleanAbs(p string) bool {
	return len(p) <= 4096 && path.IsAbs(p) && path.Clean(p) == p && !strings.ContainsRune(p, 0)
}
