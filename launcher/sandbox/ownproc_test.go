package sandbox

import (
	"os"
	"strconv"
	"testing"
)

func TestOwnProc(t *testing.T) {
	me := "/proc/" + strconv.Itoa(os.Getpid())
	for in, want := range map[string]string{
		"/proc/self":          me,
		"/proc/self/maps":     me + "/maps",
		"/proc/selfish":       "/proc/selfish",
		"/proc/1":             "/proc/1",
		"/usr/lib/x":          "/usr/lib/x",
		"/proc/self/task/1/x": me + "/task/1/x",
	} {
		got, err := ownProc(in)
		if err != nil || got != want {
			t.Errorf("ownProc(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
