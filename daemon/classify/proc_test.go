package classify

import "testing"

func TestCanonicalProc(t *testing.T) {
	for _, tc := range []struct {
		path      string
		tgid, tid uint32
		want      string
	}{
		{"/proc/self/statm", 42, 42, "/proc/42/statm"},
		{"/proc/self/task/43/stat", 42, 43, "/proc/42/task/43/stat"},
		{"/proc/thread-self/comm", 42, 43, "/proc/42/task/43/comm"},
		{"/proc/self", 42, 42, "/proc/42"},
		{"/proc/self/", 42, 42, "/proc/42/"},
		{"/proc/thread-self", 42, 43, "/proc/42/task/43"},
		{"/proc/42/statm", 42, 42, "/proc/42/statm"},   // already by pid
		{"/proc/7/statm", 42, 42, "/proc/7/statm"},     // another process's: never renamed
		{"/proc/selfish/x", 42, 42, "/proc/selfish/x"}, // not the self link
		{"/proc/meminfo", 42, 42, "/proc/meminfo"},     // not per process
		{"/home/u/proc/self/x", 42, 42, "/home/u/proc/self/x"},
		{"/procself/x", 42, 42, "/procself/x"},
		{"", 42, 42, ""},
	} {
		if got := CanonicalProc(tc.path, tc.tgid, tc.tid); got != tc.want {
			t.Errorf("CanonicalProc(%q, %d, %d) = %q, want %q", tc.path, tc.tgid, tc.tid, got, tc.want)
		}
	}
}

func TestSelfProc(t *testing.T) {
	for _, tc := range []struct {
		path      string
		tgid, tid uint32
		want      string
	}{
		{"/proc/10/maps", 10, 10, "/proc/self/maps"},
		{"/proc/10", 10, 10, "/proc/self"},
		{"/proc/10/task/11/stat", 10, 11, "/proc/thread-self/stat"},
		{"/proc/10/task/11", 10, 11, "/proc/thread-self"},
		{"/proc/10/task/12/stat", 10, 11, "/proc/self/task/12/stat"}, // another thread of the process: still its own entry
		{"/proc/100/maps", 10, 10, "/proc/100/maps"},                 // another process: never renamed
		{"/proc/1/maps", 10, 10, "/proc/1/maps"},
		{"/proc/101/maps", 10, 10, "/proc/101/maps"},
		{"/proc/meminfo", 10, 10, "/proc/meminfo"},
		{"/home/proc/10/x", 10, 10, "/home/proc/10/x"},
	} {
		if got := SelfProc(tc.path, tc.tgid, tc.tid); got != tc.want {
			t.Errorf("SelfProc(%q, %d, %d) = %q, want %q", tc.path, tc.tgid, tc.tid, got, tc.want)
		}
	}
}
