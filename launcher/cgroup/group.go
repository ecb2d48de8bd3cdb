package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Group is one run's cgroup: a directory in each hierarchy it uses.
type Group struct {
	v2     string            // cgroup2 directory, "" when none
	v1     map[string]string // controller → directory
	home   map[string]string // controller → the launcher's own v1 directory (to come back to)
	report Report

	mu sync.Mutex
	// noClone: CLONE_INTO_CGROUP must not be used any more (the group was
	// killed once, or a clone into it was killed at once; see Start).
	noClone bool
	// lockFD holds an exclusive flock on the group's first directory for as
	// long as the group is in use: a group whose lock is free belongs to a
	// launcher that is gone (see sweep). -1 when none.
	lockFD int
}

// New makes the group described by o. It does not fail when the host
// cannot give what was asked: the Report says what is in force and why
// not the rest (the caller decides whether that refuses the run). It fails
// only on a bad name or parent.
func (h *Host) New(o Options) (*Group, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	g := &Group{v1: map[string]string{}, home: map[string]string{}, lockFD: -1}
	var reasons, tokens []string
	note := func(token, format string, args ...any) {
		reasons = append(reasons, fmt.Sprintf(format, args...))
		if !slices.Contains(tokens, token) {
			tokens = append(tokens, token)
		}
	}
	// Creation failures, grouped by cause: "cgroup2, v1 pids: permission denied".
	var causes []string
	failed := map[string][]string{}
	fail := func(where string, err error) {
		c := errText(err)
		if failed[c] == nil {
			causes = append(causes, c)
		}
		failed[c] = append(failed[c], where)
	}
	plan := h.plan(o)
	if o.Stale != "" {
		// The sweep looks in every hierarchy a run may have used: an
		// abandoned run with a memory limit has a v1 memory directory even
		// when this run has none.
		every := o
		every.Limits.MemoryBytes = 1
		h.sweep(h.plan(every), o.Name, o.Stale)
	}
	// Which limits cgroup2 must carry: those no v1 hierarchy serves.
	var v2need []string
	if o.Limits.Processes > 0 && h.v1["pids"] == nil {
		v2need = append(v2need, "pids")
	}
	if o.Limits.MemoryBytes > 0 && h.v1["memory"] == nil {
		v2need = append(v2need, "memory")
	}
	v2has := map[string]bool{}
	if dir := plan.V2; dir != "" {
		parent := filepath.Dir(dir)
		if err := ensureParent(h.v2.mount, parent); err != nil {
			fail("cgroup2", err)
		} else {
			for _, c := range delegate(parent, v2need) {
				v2has[c] = true
			}
			if err := os.Mkdir(dir, 0o755); err != nil {
				fail("cgroup2", err)
			} else {
				g.v2 = dir
			}
		}
	}
	for _, c := range v1Controllers {
		dir := plan.V1[c]
		if dir == "" {
			continue
		}
		if c == "freezer" && g.v2 != "" {
			continue // cgroup.kill does the freezer's job
		}
		if c == "pids" && o.Limits.Processes == 0 && g.v2 != "" {
			continue
		}
		if err := ensureParent(h.v1[c].mount, filepath.Dir(dir)); err != nil {
			fail("v1 "+c, err)
			continue
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			fail("v1 "+c, err)
			continue
		}
		g.v1[c] = dir
		g.home[c] = h.v1[c].dir(h.v1[c].own)
	}
	if dirs := g.dirs(); len(dirs) > 0 {
		if fd, err := unix.Open(dirs[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
				g.lockFD = fd
			} else {
				unix.Close(fd)
			}
		}
	}
	for _, c := range causes {
		note("cgroup_unwritable", "cannot create the run's cgroup (%s): %s", strings.Join(failed[c], ", "), c)
	}
	// Why a limit is missing, when its hierarchy was there but not writable.
	unwritable := func(c string) bool {
		return (plan.V1[c] != "" && g.v1[c] == "") || (h.v1[c] == nil && plan.V2 != "" && g.v2 == "")
	}

	r := &g.report
	r.Version = h.Version()
	if o.NoV2 && r.Version == "hybrid" {
		r.Version = "v1"
	}
	switch {
	case g.v2 != "":
		r.Kill = KillCgroupKill
	case g.v1["freezer"] != "":
		r.Kill = KillFreezer
	case len(g.v1) > 0:
		r.Kill = KillSignals
	}
	if o.Limits.Processes > 0 {
		dir, file := g.limitFile("pids", v2has["pids"], "pids.max", "pids.max")
		switch {
		case dir == "" && unwritable("pids"):
			note("no_process_limit", "the process limit is not enforced")
		case dir == "":
			note("no_process_limit", "%s: the process limit is not enforced", missingController(g, "pids"))
		default:
			if err := writeFile(filepath.Join(dir, file), strconv.FormatInt(o.Limits.Processes, 10)); err != nil {
				note("no_process_limit", "cannot set the process limit: %s", errText(err))
			} else {
				r.Processes = o.Limits.Processes
			}
		}
	}
	if o.Limits.MemoryBytes > 0 {
		if unwritable("memory") {
			note("no_memory_limit", "the memory limit is not enforced")
		} else if err := g.setMemory(v2has["memory"], o.Limits.MemoryBytes); err != nil {
			note("no_memory_limit", "%s", err)
		} else {
			r.Memory = o.Limits.MemoryBytes
		}
	}
	switch {
	case g.v2 == "" && len(g.v1) == 0:
		r.State = Off
		if h.Version() == "" {
			note("no_cgroups", "no cgroup hierarchy is mounted")
		}
	case len(reasons) > 0 || r.Kill == KillSignals:
		r.State = Degraded
		if r.Kill == KillSignals {
			note("no_atomic_kill", "no cgroup2 and no freezer: the run is killed by signals, member by member")
		}
	default:
		r.State = On
	}
	r.Reason = strings.Join(reasons, "; ")
	r.Token = strings.Join(tokens, ",")
	return g, nil
}

// staleAge is how old an abandoned group must be before sweep removes it:
// a group is locked by its launcher within microseconds of being made.
var staleAge = time.Minute

// sweep removes the groups a dead launcher left next to the one about to
// be made (its watcher died with it, or never started): siblings whose
// name starts with prefix, older than StaleAge, without members, and whose
// lock no live process holds.
func (h *Host) sweep(plan Handle, name, prefix string) {
	anchor := plan.V2
	if anchor == "" {
		for _, c := range v1Controllers {
			if anchor = plan.V1[c]; anchor != "" {
				break
			}
		}
	}
	if anchor == "" {
		return
	}
	parent := filepath.Dir(anchor)
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() || n == name || !strings.HasPrefix(n, prefix) {
			continue
		}
		dir := filepath.Join(parent, n)
		st, err := os.Stat(dir)
		if err != nil || time.Since(st.ModTime()) < staleAge {
			continue
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			// Its launcher is gone. The same name in the other hierarchies
			// first, then the anchor; rmdir refuses a group with members.
			var others []string
			for _, c := range v1Controllers {
				if d := plan.V1[c]; d != "" && d != anchor {
					others = append(others, filepath.Join(filepath.Dir(d), n))
				}
			}
			if plan.V2 != "" && plan.V2 != anchor {
				others = append(others, filepath.Join(filepath.Dir(plan.V2), n))
			}
			for _, d := range others {
				_ = syscall.Rmdir(d)
			}
			_ = syscall.Rmdir(dir)
		}
		unix.Close(fd)
	}
}

// plan is the directories a group made with o would have, before any is
// made: cgroup2 (unless o.NoV2), v1 pids and freezer, and v1 memory when a
// memory limit is asked for.
func (h *Host) plan(o Options) Handle {
	rel := func(hh *hierarchy) string {
		if o.Parent != "" {
			return filepath.Join(strings.TrimPrefix(filepath.Clean(o.Parent), "/"), o.Name)
		}
		return filepath.Join(hh.own, o.Name)
	}
	var p Handle
	if h.v2 != nil && !o.NoV2 {
		p.V2 = h.v2.dir(rel(h.v2))
	}
	for _, c := range v1Controllers {
		hh := h.v1[c]
		if hh == nil || (c == "memory" && o.Limits.MemoryBytes == 0) {
			continue
		}
		if p.V1 == nil {
			p.V1 = map[string]string{}
		}
		p.V1[c] = hh.dir(rel(hh))
	}
	return p
}

// limitFile is where a limit of controller c goes: cgroup2 when it carries
// c for this group, else c's v1 hierarchy.
func (g *Group) limitFile(c string, onV2 bool, v2file, v1file string) (dir, file string) {
	if onV2 && g.v2 != "" {
		return g.v2, v2file
	}
	if d := g.v1[c]; d != "" {
		return d, v1file
	}
	return "", ""
}

// setMemory sets the memory limit and caps swap at zero, so that the run
// cannot exceed the limit by being swapped out.
func (g *Group) setMemory(onV2 bool, bytes int64) error {
	v := strconv.FormatInt(bytes, 10)
	if onV2 && g.v2 != "" {
		if err := writeFile(filepath.Join(g.v2, "memory.max"), v); err != nil {
			return fmt.Errorf("cannot set the memory limit: %s", errText(err))
		}
		if err := writeFile(filepath.Join(g.v2, "memory.swap.max"), "0"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cannot cap swap: %s", errText(err))
		}
		return nil
	}
	d := g.v1["memory"]
	if d == "" {
		return fmt.Errorf("%s: the memory limit is not enforced", missingController(g, "memory"))
	}
	if err := writeFile(filepath.Join(d, "memory.limit_in_bytes"), v); err != nil {
		return fmt.Errorf("cannot set the memory limit: %s", errText(err))
	}
	// memory+swap = memory: no swap beyond the limit (absent without swap accounting).
	if err := writeFile(filepath.Join(d, "memory.memsw.limit_in_bytes"), v); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cannot cap swap: %s", errText(err))
	}
	return nil
}

// missingController says why controller c is not there for the group.
func missingController(g *Group, c string) string {
	if g.v2 != "" {
		return fmt.Sprintf("cgroup2 does not hand the %s controller to the run's cgroup: it is not available, or the parent cgroup has processes of its own (cgroup v2 enables controllers only below cgroups without member processes) — pass --cgroup-parent a cgroup without processes", c)
	}
	return fmt.Sprintf("no %s controller is mounted for the run", c)
}

// ensureParent creates parent (below mount) when it is missing.
func ensureParent(mount, parent string) error {
	if parent == mount {
		return nil
	}
	if st, err := os.Stat(parent); err == nil && st.IsDir() {
		return nil
	}
	return os.MkdirAll(parent, 0o755)
}

// delegate makes sure the cgroup2 controllers in need are enabled for the
// children of parent, and returns those that are. Enabling fails (EBUSY)
// when parent is not the root and has processes of its own: cgroup v2 lets
// only cgroups without member processes hand controllers down.
func delegate(parent string, need []string) []string {
	if len(need) == 0 {
		return nil
	}
	var ok []string
	enabled := fields(filepath.Join(parent, "cgroup.subtree_control"))
	for _, c := range need {
		if slices.Contains(enabled, c) {
			ok = append(ok, c)
			continue
		}
		if writeFile(filepath.Join(parent, "cgroup.subtree_control"), "+"+c) == nil {
			ok = append(ok, c)
		}
	}
	return ok
}

func fields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// writeFile writes one value to a cgroup control file (no create, no truncate
// semantics beyond what the kernel does).
func writeFile(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// errText is an error without its path: reasons end up in records.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.EACCES, unix.EPERM:
			return errno.Error() + " (run as root, or pass --cgroup-parent a cgroup this user may write)"
		case unix.EBUSY:
			return errno.Error()
		case unix.EROFS:
			return errno.Error() + " (the cgroup file system is read-only here)"
		}
	}
	return err.Error()
}

// Report says what the group enforces.
func (g *Group) Report() Report { return g.report }

// Join moves pid (all its threads) into the group in every hierarchy. It
// must run before pid can run anything it should not run outside the group.
func (g *Group) Join(pid int) error {
	v := strconv.Itoa(pid)
	if g.v2 != "" {
		if err := writeFile(filepath.Join(g.v2, "cgroup.procs"), v); err != nil {
			return fmt.Errorf("place process %d in the run's cgroup2 group: %w", pid, err)
		}
	}
	for _, c := range v1Controllers {
		if d := g.v1[c]; d != "" {
			if err := writeFile(filepath.Join(d, "cgroup.procs"), v); err != nil {
				return fmt.Errorf("place process %d in the run's v1 %s group: %w", pid, c, err)
			}
		}
	}
	return nil
}

// Exists reports whether the group has any directory at all.
func (g *Group) Exists() bool { return g != nil && (g.v2 != "" || len(g.v1) > 0) }

// Procs lists the processes in the group (thread-group ids; zombies are not
// members).
func (g *Group) Procs() ([]int, error) {
	dir := g.v2
	if dir == "" {
		for _, c := range v1Controllers {
			if d := g.v1[c]; d != "" {
				dir = d
				break
			}
		}
	}
	if dir == "" {
		return nil, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// Stats are the limit hits seen so far.
type Stats struct {
	ProcessLimitHits int64 // forks refused by pids.max
	OOMKills         int64 // processes killed for exceeding the memory limit
	MemoryLimitHits  int64 // times usage hit the limit (v1 failcnt, v2 "max" events)
}

// Stats reads the group's event counters (zero where a hierarchy is absent).
func (g *Group) Stats() Stats {
	var s Stats
	if d := g.v1["pids"]; d != "" {
		s.ProcessLimitHits = keyed(filepath.Join(d, "pids.events"), "max")
	} else if g.v2 != "" {
		s.ProcessLimitHits = keyed(filepath.Join(g.v2, "pids.events"), "max")
	}
	if d := g.v1["memory"]; d != "" {
		s.OOMKills = keyed(filepath.Join(d, "memory.oom_control"), "oom_kill")
		if b, err := os.ReadFile(filepath.Join(d, "memory.failcnt")); err == nil {
			s.MemoryLimitHits, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		}
	} else if g.v2 != "" {
		s.OOMKills = keyed(filepath.Join(g.v2, "memory.events"), "oom_kill")
		s.MemoryLimitHits = keyed(filepath.Join(g.v2, "memory.events"), "max")
	}
	return s
}

// keyed reads "key value" lines and returns key's value.
func keyed(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
