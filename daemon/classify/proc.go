package classify

import (
	"strconv"
	"strings"
)

// CanonicalProc names a process's own /proc entries by its pid, as the
// kernel's Landlock records do: /proc/self/X of process tgid is
// /proc/<tgid>/X, and /proc/thread-self/X of thread tid is
// /proc/<tgid>/task/<tid>/X. The probes report a refused open by the path
// the process asked for, the Landlock record by the file the kernel
// resolved; with both named alike the two halves of one denial share a
// path hash and are paired, while two processes' own entries stay two
// paths. Any other path is returned unchanged. (The pids are those of the
// daemon's pid namespace: a process with a procfs of its own pid namespace
// sees other numbers, and its records do not pair this way.)
func CanonicalProc(path string, tgid, tid uint32) string {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return path
	}
	first, tail, _ := strings.Cut(rest, "/")
	var base string
	switch first {
	case "self":
		base = "/proc/" + strconv.FormatUint(uint64(tgid), 10)
	case "thread-self":
		base = "/proc/" + strconv.FormatUint(uint64(tgid), 10) + "/task/" + strconv.FormatUint(uint64(tid), 10)
	default:
		return path
	}
	if tail == "" && !strings.HasSuffix(rest, "/") {
		return base
	}
	return base + "/" + tail
}

// SelfProc is CanonicalProc's inverse for classification: a process's
// own /proc entry, named by its pid as its /proc names it (the path the
// probes walk back from an opened descriptor), becomes /proc/self (or
// /proc/thread-self for its own thread), so it is classified like the
// /proc/self the runtime profile grants. Another process's entry stays as
// it is (and outside).
func SelfProc(path string, tgid, tid uint32) string {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return path
	}
	first, tail, _ := strings.Cut(rest, "/")
	if first != strconv.FormatUint(uint64(tgid), 10) {
		return path
	}
	if task, ok := strings.CutPrefix(tail, "task/"); ok {
		t, ttail, _ := strings.Cut(task, "/")
		if t == strconv.FormatUint(uint64(tid), 10) {
			if ttail == "" {
				return "/proc/thread-self"
			}
			return "/proc/thread-self/" + ttail
		}
	}
	if tail == "" {
		return "/proc/self"
	}
	return "/proc/self/" + tail
}
