// Package api is the daemon's local protocol: newline-delimited JSON over
// its unix socket (internal/localsock: root, the daemon's user and an
// optional group). The launcher registers each run here before the server
// is exec'd, naming the root process by a pidfd sent with the request, and
// sends its launch and decision records here for the daemon to publish.
// docs/daemon.md documents the wire format; this package holds the message
// types and the server.
package api

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Version is the protocol version; a request with another version is
// refused. Version 2: the root process travels as a pidfd, records op.
const Version = 2

// MaxMessageSize bounds one request line.
const MaxMessageSize = 1 << 20

// Operations.
const (
	OpRegister   = "register"
	OpUnregister = "unregister"
	OpStatus     = "status"
	OpRecords    = "records"
)

// MaxRecords bounds the records of one request.
const MaxRecords = 4096

// RecordKinds are the kinds a launcher may send: its launch records and
// its proxy's decisions. Everything else (file_op, landlock_denial,
// finding, health) only the daemon's own observation produces.
var RecordKinds = []schema.Kind{schema.KindLaunch, schema.KindDecision}

// Request is one line from a client.
type Request struct {
	Version  int            `json:"version"`
	Op       string         `json:"op"`
	Register *Registration  `json:"register,omitempty"`
	RunID    string         `json:"run_id,omitempty"`  // for unregister
	Records  []schema.Event `json:"records,omitempty"` // for records
}

// Registration announces a run. Its process tree starts at the root
// process, named by the pidfd sent with the request (SCM_RIGHTS): a pid
// number would mean another process in the daemon's pid namespace than in
// a container's. The root must be a child of the registering process.
type Registration struct {
	RunID       string                 `json:"run_id"`
	Mode        schema.RunMode         `json:"mode"`
	Scope       *schema.CanonicalScope `json:"scope"`
	ScopeHash   string                 `json:"scope_hash"` // CanonicalScope.Hash; checked against Scope
	Runtime     []classify.RuntimePath `json:"runtime"`    // the run's runtime profile
	LandlockABI int                    `json:"landlock_abi,omitempty"`
	// ExecPending says the root is still the launcher's own helper, about
	// to exec the server: its file operations until then are not reported.
	ExecPending bool `json:"exec_pending,omitempty"`
	// HelperExe identifies the fence helper's executable: with ExecPending,
	// the root and the processes it forks stay the launcher's (building the
	// server's root, its namespaces) while they run it, until they exec
	// anything else.
	HelperExe *FileID `json:"helper_exe,omitempty"`
}

// FileID names a file by device (stat's st_dev) and inode, whatever mount
// namespace it is seen from.
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// Response answers one request.
type Response struct {
	OK     bool           `json:"ok"`
	Error  string         `json:"error,omitempty"`
	Health *schema.Health `json:"health,omitempty"`
	// PathKeyID names the daemon's path-hash key (schema.PathHasher.KeyID),
	// in answers to status and register: a launcher with another key
	// refuses to run.
	PathKeyID string `json:"path_key_id,omitempty"`
	*Registered
	Taken int `json:"taken,omitempty"` // records accepted
}

// Registered is the daemon's answer to a registration: the run's slot and
// the root process as the daemon sees it.
type Registered struct {
	Slot     uint32 `json:"slot"`
	RootPID  int    `json:"root_pid"`            // in the daemon's pid namespace
	UID      uint32 `json:"uid"`                 // of the registering launcher
	CgroupID uint64 `json:"cgroup_id,omitempty"` // cgroup v2 id of the root
}

// Validate checks a registration before the daemon acts on it.
func (r *Registration) Validate() error {
	switch {
	case r.RunID == "" || len(r.RunID) > 128 || !schema.IsToken(r.RunID):
		return errors.New("run_id must be 1-128 token characters")
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
