// Package pintest keeps the tests that start a daemon with a state
// directory of their own from leaving its eBPF probes attached to the host.
//
// A daemon that is killed, or stops with runs still live, leaves its probes
// pinned in bpffs for the next daemon of the same state directory (by
// design). A test's state directory has no next daemon: every fork, exec
// and exit of the host (every system call, with a run live) would go on
// running those programs. Unload detaches them when the test ends, with the
// daemon's own probes.Unload; Main fails the package when a pin directory
// of one of its state directories is still there at the end.
//
// Only the pin directories of the state directories a test registered are
// touched: other test runs on the host pin theirs under the same root.
package pintest

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"

	"github.com/mcpwarden/mcpwarden/daemon/probes"
)

var (
	mu   sync.Mutex
	seen = map[string]string{} // pin directory → the test that made it
)

// Unload detaches, when the test ends, every probe the daemon of stateDir
// pinned (the directory named by stateDir/probes.id). Call it before the
// daemon starts: cleanups run last-in first-out, so it runs after the
// daemon has stopped, and after a test's own check that pins outlived it.
func Unload(tb testing.TB, stateDir string) {
	tb.Helper()
	tb.Cleanup(func() {
		dir, err := probes.StatePinDir(stateDir, false)
		if err != nil {
			tb.Errorf("pintest: the probes id of %s: %v", stateDir, err)
			return
		}
		if dir == "" { // no daemon got as far as pinning anything
			return
		}
		mu.Lock()
		seen[dir] = tb.Name()
		mu.Unlock()
		if _, err := probes.Unload(dir); err != nil {
			tb.Errorf("pintest: unload the probes pinned in %s: %v", dir, err)
		}
	})
}

// Left lists the pin directories of registered state directories that are
// still in bpffs, with the test that made each.
func Left() []string {
	mu.Lock()
	defer mu.Unlock()
	var left []string
	for dir, test := range seen {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			left = append(left, fmt.Sprintf("%s (%s)", dir, test))
		}
	}
	sort.Strings(left)
	return left
}

// Main runs the package's tests (call it from TestMain: os.Exit(pintest.Main(m)))
// and fails the package when a pin directory its tests made is still there.
func Main(m *testing.M) int {
	code := m.Run()
	if left := Left(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: pintest: %d pin directories of this package's daemons are still in bpffs (register their state dir with pintest.Unload):\n", len(left))
		for _, l := range left {
			fmt.Fprintln(os.Stderr, "\t"+l)
		}
		if code == 0 {
			code = 1
		}
	}
	return code
}
