// Package cgroup gives one run of the launcher a control group of its own:
// the fence helper is placed in it before it can run any server code, so
// the server and everything it starts are in it too. The group bounds the
// run (processes and memory) and is killed whole when the run ends.
//
// It works on pure cgroup v2 hosts, on hybrid hosts (a cgroup2 mount next to
// v1 controllers, where the limits come from the v1 pids and memory
// hierarchies and the kill from cgroup2's cgroup.kill) and on pure v1 hosts
// (freezer, then SIGKILL to every member until none is left).
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Limits bound one run. Zero means no limit.
type Limits struct {
	// Processes is pids.max: tasks, so threads count too.
	Processes int64
	// MemoryBytes is memory.max (v2) or memory.limit_in_bytes (v1); swap is
	// capped so that the run cannot page its way past it.
	MemoryBytes int64
}

// State is how much of the cgroup layer is in force.
type State string

const (
	// On: a cgroup of the run's own, killed whole, with every limit asked for.
	On State = "on"
	// Degraded: a cgroup exists but some limit or the atomic kill is missing.
	Degraded State = "degraded"
	// Off: no cgroup; the launcher falls back to killing the server's session.
	Off State = "off"
)

// KillMethod is how the whole group is killed.
type KillMethod string

const (
	KillCgroupKill KillMethod = "cgroup.kill" // cgroup v2: one write kills every member, forks included
	KillFreezer    KillMethod = "freezer"     // v1: freeze, SIGKILL every member, thaw, until empty
	KillSignals    KillMethod = "signals"     // v1 without freezer: SIGKILL every member until empty
)

// Report says what the group enforces, for `scope check` and the launch
// record. Reason says what is missing for people, Token the same as
// comma-separated words for records; neither contains a path.
type Report struct {
	State     State      `json:"state"`
	Reason    string     `json:"reason,omitempty"`
	Token     string     `json:"token,omitempty"`   // e.g. "no_memory_limit,cgroup2_unwritable"
	Version   string     `json:"version,omitempty"` // "v2", "hybrid", "v1"
	Kill      KillMethod `json:"kill,omitempty"`
	Processes int64      `json:"max_processes,omitempty"` // the limit in force, 0 = none
	Memory    int64      `json:"max_memory_bytes,omitempty"`
}

// hierarchy is one mounted cgroup tree and the launcher's own place in it.
type hierarchy struct {
	mount string // where it is mounted
	own   string // the launcher's cgroup, relative to mount ("" = root)
}

func (h *hierarchy) dir(rel string) string { return filepath.Join(h.mount, rel) }

// Host is where the cgroup hierarchies are and where this process sits in
// them. Build it with Probe.
type Host struct {
	v2 *hierarchy
	v1 map[string]*hierarchy // by controller: "pids", "memory", "freezer"
}

// v1Controllers are the v1 controllers a run uses.
var v1Controllers = []string{"pids", "memory", "freezer"}

// Probe reads /proc/self/mountinfo and /proc/self/cgroup.
func Probe() (*Host, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read own cgroup: %w", err)
	}
	return parseHost(mi, cg), nil
}

// parseHost combines the mount table and the process's cgroup membership.
func parseHost(mountinfo, self []byte) *Host {
	type mnt struct{ root, point string }
	var v2 *mnt
	v1 := map[string]*mnt{}
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root point options [optional...] - fstype source super
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 {
			continue
		}
		m := &mnt{root: unescapeMount(lf[3]), point: unescapeMount(lf[4])}
		switch rf[0] {
		case "cgroup2":
			if v2 == nil {
				v2 = m
			}
		case "cgroup":
			for _, opt := range strings.Split(rf[2], ",") {
				for _, c := range v1Controllers {
					if opt == c && v1[c] == nil {
						v1[c] = m
					}
				}
			}
		}
	}
	h := &Host{v1: map[string]*hierarchy{}}
	// own returns the launcher's cgroup relative to the mount, or false when
	// it lies outside what is mounted there.
	own := func(m *mnt, path string) (*hierarchy, bool) {
		rel, ok := strings.CutPrefix(path, m.root)
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/") && m.root != "/") {
			return nil, false
		}
		rel = strings.TrimPrefix(rel, "/")
		if rel != "" && !filepath.IsLocal(rel) {
			return nil, false
		}
		return &hierarchy{mount: m.point, own: rel}, true
	}
	for _, line := range strings.Split(string(self), "\n") {
		// id:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			if v2 != nil {
				if hh, ok := own(v2, parts[2]); ok {
					h.v2 = hh
				}
			}
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if m := v1[c]; m != nil {
				if hh, ok := own(m, parts[2]); ok {
					h.v1[c] = hh
				}
			}
		}
	}
	return h
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Version names the layout: "v2" (pure), "hybrid" or "v1"; "" without cgroups.
func (h *Host) Version() string {
	hasV1 := h.v1["pids"] != nil || h.v1["memory"] != nil
	switch {
	case h.v2 != nil && hasV1:
		return "hybrid"
	case h.v2 != nil:
		return "v2"
	case hasV1 || h.v1["freezer"] != nil:
		return "v1"
	}
	return ""
}

// Options say what group to make.
type Options struct {
	// Name is the group's directory name in every hierarchy; it must be a
	// single path element (e.g. "mcpwarden-" + the run id).
	Name   string
	Limits Limits
	// Parent is the cgroup under which the group is made, as a path from the
	// root of each hierarchy (e.g. "/mcpwarden"); created when missing.
	// Default: the launcher's own cgroup in each hierarchy, so the run stays
	// inside whatever bounds the launcher itself has.
	Parent string
	// NoV2 ignores cgroup2 (to exercise the v1 kill on a hybrid host).
	NoV2 bool
	// Stale, when set, is the name prefix of groups that dead launchers may
	// have left next to this one; they are removed first (see sweep).
	Stale string
}

// ErrName is returned for a group name that is not one path element.
var ErrName = errors.New("cgroup: the group name must be one path element")

func (o *Options) check() error {
	if o.Name == "" || o.Name == "." || o.Name == ".." || strings.ContainsAny(o.Name, "/\x00\n") {
		return ErrName
	}
	if o.Parent != "" && !filepath.IsAbs(o.Parent) {
		return fmt.Errorf("cgroup: the parent %q must be an absolute cgroup path (e.g. /mcpwarden)", o.Parent)
	}
	if o.Limits.Processes < 0 || o.Limits.MemoryBytes < 0 {
		return errors.New("cgroup: limits must not be negative")
	}
	return nil
}
