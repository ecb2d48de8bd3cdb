package cgroup

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Handle names an existing group, so that another process (the watcher)
// can kill it.
type Handle struct {
	V2 string            `json:"v2,omitempty"`
	V1 map[string]string `json:"v1,omitempty"`
}

// Handle returns what Open needs to find the group again.
func (g *Group) Handle() Handle {
	h := Handle{V2: g.v2}
	if len(g.v1) > 0 {
		h.V1 = map[string]string{}
		for c, d := range g.v1 {
			h.V1[c] = d
		}
	}
	return h
}

// Open turns a handle back into a group. Every directory must be a cgroup
// directory below a cgroup mount of this host: the handle crosses a process
// boundary, and the watcher must not be talked into killing anything else.
func (h *Host) Open(hd Handle) (*Group, error) {
	g := &Group{v1: map[string]string{}, home: map[string]string{}, lockFD: -1}
	under := func(dir string, hh *hierarchy) bool {
		if hh == nil || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			return false
		}
		rel, err := filepath.Rel(hh.mount, dir)
		return err == nil && rel != "." && filepath.IsLocal(rel)
	}
	if hd.V2 != "" {
		if !under(hd.V2, h.v2) {
			return nil, fmt.Errorf("cgroup: %q is not a group below the cgroup2 mount", hd.V2)
		}
		g.v2 = hd.V2
	}
	for c, d := range hd.V1 {
		if !slices.Contains(v1Controllers, c) || !under(d, h.v1[c]) {
			return nil, fmt.Errorf("cgroup: %q is not a group below the v1 %s mount", d, c)
		}
		g.v1[c] = d
	}
	if !g.Exists() {
		return nil, errors.New("cgroup: the handle names no group")
	}
	g.report.Kill = KillSignals
	switch {
	case g.v2 != "":
		g.report.Kill = KillCgroupKill
	case g.v1["freezer"] != "":
		g.report.Kill = KillFreezer
	}
	return g, nil
}

// String is the handle as one JSON argument.
func (hd Handle) String() string {
	b, _ := json.Marshal(hd)
	return string(b)
}

// ParseHandle reads a handle written by Handle.String.
func ParseHandle(s string) (Handle, error) {
	var hd Handle
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hd); err != nil {
		return Handle{}, fmt.Errorf("cgroup: bad handle: %w", err)
	}
	return hd, nil
}

// Watch blocks until lifeline reports EOF or an error — the launcher that
// holds its other end has exited, whether it ended the run itself or was
// SIGKILLed — then kills the group and removes it. This is what ends a
// run whose launcher died when no pid namespace does it: the server's own
// descendants do not get the parent-death signal, the group's members do
// not outlive this.
func Watch(lifeline io.Reader, g *Group, timeout time.Duration) error {
	var b [1]byte
	for {
		if _, err := lifeline.Read(b[:]); err != nil {
			break
		}
	}
	return g.Remove(timeout)
}

// WatcherName is the watcher's argv[0]: the fence helper binary started
// under this name watches a run's group instead of fencing a server.
const WatcherName = "mcpwarden-fence-watch"

// LifelineFD is the watcher's end of the launcher's lifeline pipe.
const LifelineFD = 3

// WatchMain is the watcher process's whole life: args is the group's
// handle (Handle.String); fd 3 is the lifeline. It returns the exit code.
func WatchMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, WatcherName+": started by 'mcpwarden run' with a group handle and a lifeline on fd 3; it is not run by hand")
		return 2
	}
	hd, err := ParseHandle(args[0])
	if err == nil {
		var h *Host
		if h, err = Probe(); err == nil {
			var g *Group
			if g, err = h.Open(hd); err == nil {
				err = Watch(os.NewFile(LifelineFD, "lifeline"), g, 10*time.Second)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, WatcherName+":", err)
		return 1
	}
	return 0
}
