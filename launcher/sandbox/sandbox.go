// Package sandbox is the helper side of the launcher: the small
// mcpwarden-fence program (cmd/mcpwarden-fence) that receives a Spec from
// the launcher, fences itself (Landlock, no_new_privs, an empty capability
// set, a seccomp filter, no inherited descriptors) and execs the server in
// its place. It links nothing but the standard library and x/sys.
//
// Everything runs on one locked OS thread and ends in execve on that same
// thread, so the server inherits exactly the restrictions applied here.
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/mcpwarden/mcpwarden/launcher/sandbox/seccomp"
)

// Descriptors the launcher passes to the helper.
const (
	SpecFD   = 3 // the launcher writes the Spec here, then closes it
	StatusFD = 4 // close-on-exec: EOF means exec succeeded; a Status means it did not
)

// HelperName is the helper's file name; the launcher finds it next to its
// own executable.
const HelperName = "mcpwarden-fence"

// maxSpecSize bounds what the helper reads from the launcher.
const maxSpecSize = 4 << 20

// PathRule grants Access (Landlock filesystem rights) beneath Path.
type PathRule struct {
	Path   string `json:"path"`
	Access uint64 `json:"access"`
}

// PortRule grants Access (Landlock network rights) on Port.
type PortRule struct {
	Port   uint16 `json:"port"`
	Access uint64 `json:"access"`
}

// Spec is everything the helper needs; it is built and checked by the launcher.
type Spec struct {
	Exe  string   `json:"exe"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`

	// Enforce is false only in audit mode: then the helper applies nothing
	// but still closes inherited descriptors and execs.
	Enforce      bool            `json:"enforce"`
	ABI          int             `json:"abi"`
	HandledFS    uint64          `json:"handled_fs"`
	HandledNet   uint64          `json:"handled_net"`
	Scoped       uint64          `json:"scoped"`
	RestrictFlag uint32          `json:"restrict_flags"`
	Paths        []PathRule      `json:"paths"`
	Ports        []PortRule      `json:"ports"`
	Seccomp      bool            `json:"seccomp"`
	Filter       seccomp.Options `json:"filter"`
	DropCaps     bool            `json:"drop_caps"`
	// Limits are set by the helper on itself (enforce mode), so that the
	// server and all it starts inherit them.
	Limits Limits `json:"limits"`
}

// Limits are the run's bounds the helper applies with setrlimit; the
// process and memory limits are the launcher's, on the run's cgroup.
type Limits struct {
	// FileSizeBytes is RLIMIT_FSIZE, the largest file the server may write
	// (0: unchanged). SIGXFSZ is ignored: a write past it fails with EFBIG.
	FileSizeBytes uint64 `json:"file_size_bytes,omitempty"`
	// TmpSizeBytes is the size of the private /tmp tmpfs, when the mount
	// namespace makes one (0: the kernel's default).
	TmpSizeBytes uint64 `json:"tmp_size_bytes,omitempty"`
}

// Stage names where the helper failed.
type Stage string

const (
	StageSpec     Stage = "spec"
	StageLandlock Stage = "landlock"
	StagePrivs    Stage = "privileges"
	StageSeccomp  Stage = "seccomp"
	StageExec     Stage = "exec"
)

// Status is what the helper reports when it could not exec the server.
type Status struct {
	Stage   Stage  `json:"stage"`
	Errno   int    `json:"errno"`
	Path    string `json:"path,omitempty"` // the file exec could not use, when known
	Message string `json:"message"`
}

func (s *Status) Error() string { return fmt.Sprintf("%s: %s", s.Stage, s.Message) }

// ReadSpec decodes a Spec from r.
func ReadSpec(r io.Reader) (*Spec, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxSpecSize+1))
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	if len(data) > maxSpecSize {
		return nil, errors.New("spec too large")
	}
	if len(data) == 0 {
		return nil, errors.New("no spec from the launcher (it exited or refused the run)")
	}
	var s Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	if s.Exe == "" || len(s.Argv) == 0 {
		return nil, errors.New("spec names no executable")
	}
	return &s, nil
}
