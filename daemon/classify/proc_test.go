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
