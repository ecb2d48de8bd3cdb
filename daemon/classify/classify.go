// Package classify decides, for one observed file operation of a run, where
// its path lies relative to the run's scope (workspace, runtime, secret,
// outside) and what that means (allowed, blocked by the kernel, escape).
package classify

import (
	"path"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Verdict is the outcome of one operation against the scope (the contract
// type; the names below keep this package's call sites short).
type Verdict = schema.FileVerdict

const (
	Allowed         = schema.VerdictAllowed
	BlockedByKernel = schema.VerdictBlockedByKernel
	Escape          = schema.VerdictEscape
	Failed          = schema.VerdictFailed
)

// Access is what an operation does to a path.
type Access = schema.OpAccess

const (
	Read   = schema.OpRead
	Write  = schema.OpWrite
	Create = schema.OpCreate
)

// RuntimePath is one entry of a run's runtime profile: a file or directory
// the server's own runtime may use, read-only unless Write.
type RuntimePath struct {
	Path  string `json:"path"`
	Write bool   `json:"write,omitempty"`
}

// Policy is what a run may touch.
type Policy struct {
	Workspace []string      `json:"workspace"` // canonical allowed paths of the scope
	ReadOnly  bool          `json:"read_only"` // the scope's access_mode is read
	Runtime   []RuntimePath `json:"runtime"`
}

// Errno values that mean "refused" (same numbers on every Linux arch).
const (
	ePERM  = 1
	eACCES = 13
)

// Location is where a path lies for one run: its class and whether the
// scope or the runtime profile covers it, for reading and for writing. It
// depends only on the path and the policy, so callers may cache it.
type Location struct {
	Class    schema.PathClass
	Inside   bool
	Writable bool
}

// Classify returns the path class and verdict of one operation. known is
// false when the probes could not read the whole path: such a path is
// unknown, and its success cannot be shown to be inside the scope.
func (p *Policy) Classify(pth string, known bool, access Access, ret int64) (schema.PathClass, Verdict) {
	loc := Location{Class: schema.PathUnknown}
	if known && path.IsAbs(pth) {
		loc = p.Locate(pth)
	}
	return loc.Class, Judge(loc, access, ret)
}

// Judge gives the verdict of an operation with result ret at loc.
func Judge(loc Location, access Access, ret int64) Verdict {
	switch {
	case ret == -eACCES || ret == -ePERM:
		return BlockedByKernel
	case ret < 0:
		return Failed
	case !loc.Inside:
		return Escape
	case access != Read && !loc.Writable:
		return Escape
	}
	return Allowed
}

// Locate finds the class of a known absolute path and whether the scope or
// the runtime profile covers it (and for writing).
func (p *Policy) Locate(pth string) Location {
	loc := Location{Class: schema.PathOutside}
	for _, w := range p.Workspace {
		if schema.IsWithin(w, pth) {
			loc = Location{Class: schema.PathWorkspace, Inside: true, Writable: !p.ReadOnly}
			break
		}
	}
	if !loc.Inside {
		for _, r := range p.Runtime {
			if schema.IsWithin(r.Path, pth) {
				loc.Class, loc.Inside = schema.PathRuntime, true
				loc.Writable = loc.Writable || r.Write
			}
		}
	}
	if IsSecret(pth) {
		loc.Class = schema.PathSecret
	}
	return loc
}

// IsSecret reports whether a path looks like it holds credentials, by the
// same list the proxy refuses (schema.DefaultSecretPatterns). The class is
// reported even inside the scope: a workspace .env is still a secret.
func IsSecret(pth string) bool { return schema.DefaultSecrets.Match(pth) }
