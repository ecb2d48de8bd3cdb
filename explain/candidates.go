package explain

import (
	"hash/maphash"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/schema"
)

// procNames are the entries of a process's /proc directory runtimes and
// servers read (and a few a hostile one would).
var procNames = []string{
	"", "auxv", "cgroup", "cmdline", "comm", "coredump_filter", "cpuset", "cwd", "environ", "exe", "fd", "fdinfo",
	"gid_map", "io", "limits", "loginuid", "map_files", "maps", "mem", "mountinfo", "mounts", "mountstats", "net",
	"net/dev", "net/if_inet6", "net/route", "net/tcp", "net/tcp6", "net/udp", "net/udp6", "net/unix", "ns", "numa_maps",
	"oom_adj", "oom_score", "oom_score_adj", "pagemap", "personality", "projid_map", "root", "sched", "schedstat",
	"sessionid", "setgroups", "smaps", "smaps_rollup", "stack", "stat", "statm", "status", "syscall", "task",
	"timers", "timerslack_ns", "uid_map", "wchan", "attr/current", "attr/exec",
}

// systemTrees are the directories walked for candidates when nothing more
// specific matched, with how deep: where runtimes read configuration and
// counters, and where credentials lie.
var systemTrees = []struct {
	dir   string
	depth int
}{
	{"/proc", 1}, {"/proc/sys", 4}, {"/sys/kernel/mm", 3}, {"/sys/fs/cgroup", 3},
	{"/sys/devices/system/cpu", 1}, {"/etc", 4}, {"/dev", 2}, {"/root", 4}, {"/home", 5}, {"/tmp", 3},
	{"/var/tmp", 2}, {"/run", 2}, {"/usr/lib", 4}, {"/lib", 3}, {"/usr/share", 3}, {"/usr/local", 5},
	{"/opt", 4}, {"/srv", 4}, {"/var/lib", 3}, {"/mnt", 3}, {"/media", 3}, {"/usr/bin", 1}, {"/bin", 1},
}

// treeBudget bounds one tree of the scope or of the profile.
const treeBudget = 200_000

// candidates yields the paths to hash, likeliest first: the operator's,
// the run's own /proc entries, the runtime profile, the scope's trees,
// then system paths.
func candidates(cfg Config, pids map[int]bool) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, p := range cfg.Paths {
			if !yield(filepath.Clean(p)) {
				return
			}
		}
		if !procCandidates(pids, yield) {
			return
		}
		if !profileCandidates(cfg.Profile, yield) {
			return
		}
		if !scopeCandidates(cfg.Scope, yield) {
			return
		}
		for _, t := range systemTrees {
			if !walk(t.dir, t.depth, treeBudget, systemSkip, yield) {
				return
			}
		}
		// Every other process's /proc entries (a hostile server reads
		// them; nothing grants them).
		others := map[int]bool{}
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			if pid, err := strconv.Atoi(e.Name()); err == nil && !pids[pid] {
				others[pid] = true
			}
		}
		procCandidates(others, yield)
	}
}

// procCandidates yields each process's /proc entries, and its threads'
// while the process still runs.
func procCandidates(pids map[int]bool, yield func(string) bool) bool {
	list := make([]int, 0, len(pids))
	for p := range pids {
		list = append(list, p)
	}
	slices.Sort(list)
	for _, pid := range list {
		base := "/proc/" + strconv.Itoa(pid)
		for _, n := range procNames {
			if !yield(filepath.Join(base, n)) {
				return false
			}
		}
		tasks, _ := os.ReadDir(base + "/task")
		for _, t := range tasks {
			for _, n := range procNames {
				if !yield(filepath.Join(base, "task", t.Name(), n)) {
					return false
				}
			}
		}
	}
	return true
}

func profileCandidates(p *runtimeprofile.Profile, yield func(string) bool) bool {
	if p == nil {
		return true
	}
	if !yield(p.Exe) {
		return false
	}
	for _, e := range p.Entries {
		depth := 0
		if e.Class == runtimeprofile.ClassReadTree || e.Class == runtimeprofile.ClassExecTree {
			depth = 32
		}
		if !walk(e.Path, depth, treeBudget, nil, yield) {
			return false
		}
	}
	for _, n := range p.Names {
		if !yield(n) {
			return false
		}
	}
	return true
}

func scopeCandidates(s *schema.CanonicalScope, yield func(string) bool) bool {
	if s == nil {
		return true
	}
	for _, a := range s.AllowedPaths {
		depth := 0
		if a.Kind == schema.KindDir {
			depth = 32
		}
		if !walk(a.Path, depth, treeBudget, nil, yield) {
			return false
		}
		for d := filepath.Dir(a.Path); schema.IsWithin(s.Base, d) && d != s.Base; d = filepath.Dir(d) {
			if !yield(d) {
				return false
			}
		}
	}
	if !walk(s.Base, 32, treeBudget, nil, yield) {
		return false
	}
	// Just outside the base (../secret.txt) is where a server that climbs
	// out of its directory goes first.
	return walk(filepath.Dir(s.Base), 3, treeBudget, nil, yield)
}

// systemSkip keeps the system walk out of the processes' /proc entries
// (the run's are listed apart) and of the kernel's object trees.
func systemSkip(path string) bool {
	if pid, _, ok := procEntry(path); ok && pid > 0 {
		return true
	}
	switch path {
	case "/proc/self", "/proc/thread-self", "/proc/sys/fs/binfmt_misc", "/sys/fs/cgroup/unified":
		return true
	}
	return false
}

// walk yields root and, down to depth levels below it, what it holds
// (symlinks not followed: the daemon hashes what a path resolved to, or the
// name asked for), at most budget paths; false when yield asked to stop.
func walk(root string, depth, budget int, skip func(string) bool, yield func(string) bool) bool {
	n := 0
	var rec func(dir string, left int) bool
	rec = func(dir string, left int) bool {
		if left == 0 || n >= budget {
			return true
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return true
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if skip != nil && skip(p) {
				continue
			}
			n++
			if !yield(p) {
				return false
			}
			if n >= budget {
				return true
			}
			if e.IsDir() && !rec(p, left-1) {
				return false
			}
		}
		return true
	}
	if !yield(root) {
		return false
	}
	return rec(root, depth)
}

// resolve hashes candidates until every target is found or max paths were
// hashed; it returns the paths found by hash and how many it hashed.
func resolve(targets map[schema.PathHash]bool, cands iter.Seq[string], h *schema.PathHasher, max int) (map[schema.PathHash]string, int) {
	found := map[schema.PathHash]string{}
	if len(targets) == 0 {
		return found, 0
	}
	// Trees overlap (a profile's inside /usr/lib): each path is hashed once,
	// remembered by a 64-bit digest rather than by itself.
	seed := maphash.MakeSeed()
	seen := map[uint64]struct{}{}
	n := 0
	for p := range cands {
		d := maphash.String(seed, p)
		if _, ok := seen[d]; ok || p == "" {
			continue
		}
		seen[d] = struct{}{}
		n++
		if hash := h.Hash(p); targets[hash] && found[hash] == "" {
			found[hash] = p
			if len(found) == len(targets) {
				break
			}
		}
		if n >= max {
			break
		}
	}
	return found, n
}
