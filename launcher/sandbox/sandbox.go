// Package sandbox is the helper side of the launcher: the small
// mcpwarden-fence program (cmd/mcpwarden-fence) that receives a Spec from
// the launcher, fences itself (Landlock, no_new_privs, an empty capability
// set, a seccomp filter, no inherited descriptors) and execs the server in
// its place. It links nothing but the standard library and x/sys.
//
// The fence is applied on one locked OS thread and ends in execve on that
// same thread, so the server inherits exactly the restrictions applied
// there. When the launcher started the helper in new namespaces (it is then
// pid 1 of its pid namespace), the helper is the run's init: it builds the
// minimal root and the fence (the Landlock ruleset, the seccomp program),
// starts the exec stage (mcpwarden-exec, a static C program in execstage/)
// and hands it the fence (handover.go), which it applies before it execs the
// server; then the init reaps, forwards signals and exits with the
// server's status (init_linux.go, root_linux.go).
package sandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/mcpwarden/mcpwarden/launcher/sandbox/seccomp"
)

// Descriptors the launcher passes to the helper.
//
// On SpecFD the launcher writes the Spec as one JSON line, and later one
// byte, GoByte, once the run may start (its start record is on disk and
// BeforeExec returned); EOF instead of the byte means: exec nothing, exit.
// On StatusFD (close-on-exec) the helper writes JSON lines: a Status with
// Stage StageReady when everything up to the fence is set up, and then
// either EOF (it exec'd the server itself) or, as the run's init, a
// StageStarted Status and at the end a StageExit one. A Status with any
// other Stage is a failure; nothing was exec'd.
const (
	SpecFD   = 3
	StatusFD = 4
)

// GoByte on SpecFD lets the helper exec the server.
const GoByte = 'x'

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

	// Dir is the server's working directory; the helper enters it again
	// after building a new root (the path is the same inside).
	Dir string `json:"dir,omitempty"`
	// Identity is the host uid and gid the server runs as, when the helper
	// must change them (a root launcher); nil keeps the helper's.
	Identity *Identity `json:"identity,omitempty"`
	// NS is what the helper sets up in the namespaces it was started in;
	// nil when it was started in none.
	NS *Namespaces `json:"ns,omitempty"`
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
	// OpenFiles caps RLIMIT_NOFILE: the soft and hard limits are lowered
	// to it when above (0: unchanged).
	OpenFiles uint64 `json:"open_files,omitempty"`
	// TmpSizeBytes is the size of the private /tmp tmpfs, when the mount
	// namespace makes one (0: the kernel's default).
	TmpSizeBytes uint64 `json:"tmp_size_bytes,omitempty"`
}

// Stage names where the helper failed.
type Stage string

const (
	StageSpec       Stage = "spec"
	StageNamespaces Stage = "namespaces" // hostname, loopback, sysctls, the init's own set-up
	StageRoot       Stage = "root"       // the minimal root: mounts, links, pivot_root
	StageLandlock   Stage = "landlock"
	StagePrivs      Stage = "privileges"
	StageSeccomp    Stage = "seccomp"
	StageExec       Stage = "exec"

	// Not failures: the steps of a run that works.
	StageReady   Stage = "ready"   // set up; waiting for GoByte
	StageStarted Stage = "started" // (init) the server runs; PID is its pid in the run's namespace
	StageExit    Stage = "exit"    // (init) the server ended: Code, or Signal when it was killed
)

// Status is what the helper reports: the steps of a run (StageReady,
// StageStarted, StageExit) or why it could not exec the server.
type Status struct {
	Stage   Stage  `json:"stage"`
	Errno   int    `json:"errno,omitempty"`
	Path    string `json:"path,omitempty"` // the file exec could not use, when known
	Message string `json:"message,omitempty"`
	PID     int    `json:"pid,omitempty"`
	Code    int    `json:"code,omitempty"`
	Signal  int    `json:"signal,omitempty"`
}

// Failed reports whether s is a failure rather than a step of a run.
func (s *Status) Failed() bool {
	switch s.Stage {
	case StageReady, StageStarted, StageExit:
		return false
	}
	return true
}

func (s *Status) Error() string { return fmt.Sprintf("%s: %s", s.Stage, s.Message) }

// ReadSpec decodes a Spec, one line, from r.
func ReadSpec(r io.Reader) (*Spec, error) {
	return readSpec(bufio.NewReader(r))
}

func readSpec(r *bufio.Reader) (*Spec, error) {
	var data []byte
	for {
		chunk, err := r.ReadSlice('\n')
		data = append(data, chunk...)
		if len(data) > maxSpecSize {
			return nil, errors.New("spec too large")
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("read spec: %w", err)
		}
		break
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("no spec from the launcher (it exited or refused the run)")
	}
	var s Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	if s.Exe == "" || len(s.Argv) == 0 {
		return nil, errors.New("spec names no executable")
	}
	if err := s.NS.check(); err != nil {
		return nil, err
	}
	return &s, nil
}
