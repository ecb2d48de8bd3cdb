// Package testenv lets tests demand privileges and tools: outside CI a missing
// one skips the test with a message that says what is missing; under CI=true
// it fails the test, because CI must run everything.
package testenv

import (
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" || os.Getenv("CI") == "1" }

// Missing skips t outside CI and fails it under CI, naming what is missing.
func Missing(t testing.TB, what string) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true and %s; CI must run this test: fix the CI machine or scripts/test-env.sh", what)
	}
	t.Skipf("skipping: %s (run as root via 'make test' to include this test)", what)
}

// RequireRoot demands uid 0.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "this test needs root")
	}
}

// RequireCommand demands an executable on PATH and returns its path.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, name+" is not installed")
	}
	return p
}

// RequireFile demands that a file exists (a built binary, an npm package).
func RequireFile(t testing.TB, path, hint string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Missing(t, path+" is missing ("+hint+")")
	}
}

// GoTool demands a Go tool that scripts/test-env.sh install puts where
// `go install` does (GOBIN when set, else the first GOPATH entry's bin:
// staticcheck, helm, go-sdk's everything-server) and returns its path.
// Tests looked in GOPATH/bin only, and missed the tools on a runner that
// sets GOBIN.
func GoTool(tb testing.TB, name string) string {
	tb.Helper()
	dir := ""
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if len(lines) == 2 {
			dir = lines[0]
			if first, _, _ := strings.Cut(lines[1], string(filepath.ListSeparator)); dir == "" && first != "" {
				dir = filepath.Join(first, "bin")
			}
		}
	}
	if dir == "" {
		Missing(tb, "go env names no GOBIN nor GOPATH for "+name)
		return ""
	}
	p := filepath.Join(dir, name)
	RequireFile(tb, p, "run scripts/test-env.sh install")
	return p
}

// FreePort returns a loopback TCP port that nothing listened on a moment
// ago, never one it returned before in this process nor one another live
// test process holds (a flock on HostLockDir()/ports/PORT, kept until the
// process exits), and, where the host leaves room, below the kernel's
// ephemeral range.
//
// A test takes several ports before its servers bind them. A port the
// kernel picked for a listen on port 0 is one the kernel may pick again: a
// NATS cluster test once got the same port for a node's client and monitor
// listeners, and its node died with "address already in use". Below the
// ephemeral range, no outgoing connection of any process is given the
// port meanwhile either.
func FreePort(tb testing.TB) int {
	tb.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	if lo, hi := portPool(); hi > lo {
		for range 200 {
			p := lo + rand.IntN(hi-lo)
			if !portsGiven[p] && claimPort(p) && portListens(p) {
				portsGiven[p] = true
				return p
			}
		}
	}
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsGiven[p] && claimPort(p) {
			portsGiven[p] = true
			return p
		}
	}
	tb.Fatal("testenv: no free loopback port found in 200 tries")
	return 0
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
	portLocks  []*os.File // held until the process exits
)

// claimPort takes port p for this process against the other test
// processes of the host (go test runs packages side by side, each with its
// own portsGiven): an exclusive flock on a file named after it, held until
// the process exits. A port another process holds is not claimed. Where
// the lock directory cannot be used, every port is claimable (the listen
// check still applies).
func claimPort(p int) bool {
	dir := filepath.Join(HostLockDir(), "ports")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return true
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	portLocks = append(portLocks, f)
	return true
}

// portListens reports whether a listener can be bound on 127.0.0.1:p.
func portListens(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// portPool is [20000, the first ephemeral port) when that leaves at least
// 2000 ports; otherwise empty.
func portPool() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first-20000 < 2000 {
		return 0, 0
	}
	return 20000, first
}
