package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWarmUpLeavesNothingOpen: the pidfd the warm-up's process lookup opens
// is released (a launcher runs for as long as its server: a descriptor
// left open would be inherited by nothing but still held for the run).
// Descriptors are compared by what they are, not counted: other tests of
// the package may close or open theirs meanwhile (a count once fell 15 ->
// 12 in a loaded CI run).
func TestWarmUpLeavesNothingOpen(t *testing.T) {
	open := func() map[string]string {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		fds := map[string]string{}
		for _, e := range ents {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil {
				fds[e.Name()] = target
			}
		}
		return fds
	}
	before := open()
	for range 3 {
		<-WarmUp()
	}
	for fd, target := range open() {
		// The warm-up's lookups open pidfds (anon_inode:[pidfd]); the
		// listing's own directory is open during each listing.
		if before[fd] != target && strings.HasPrefix(target, "anon_inode:") {
			t.Errorf("descriptor %s (%s) is open after the warm-up and was not before", fd, target)
		}
	}
}
