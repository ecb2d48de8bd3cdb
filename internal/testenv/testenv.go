// Package testenv lets tests demand privileges and tools: outside CI a missing
// one skips the test with a message that says what is missing; under CI=true
// it fails the test, because CI must run everything.
package testenv

import (
	"net"
	"os"
	"os/exec"
	"testing"
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

// FreePort returns a loopback TCP port that nothing listened on a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
