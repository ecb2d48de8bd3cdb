package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's audit log is one for the whole host, and `go test ./...`
// runs packages side by side (and other checkouts' tests may run on the
// same host). A test that floods it until the kernel loses records, or
// sets its backlog_limit, changes what every daemon on the host sees: a
// daemon test in another package running then gets kernel_audit_lost or
// events_dropped gaps on its runs, or misses Landlock records. So the
// tests take a lock on the audit log, across processes:
//
//   - AuditUser (shared): the test runs a daemon with the audit stream on,
//     or asserts a Landlock record, a CLEAN verdict or no observation gap.
//   - AuditDisturber (exclusive): the test makes the kernel lose audit
//     records, sets its backlog_limit or otherwise changes what every
//     reader of the audit log sees.
//
// A disturber waiting for the lock keeps new users out (a turnstile), so
// it is not starved by users that overlap one another.
const hostLockDirName = "mcpwarden-test-locks"

// HostLockDir is where the cross-process test locks live: /run (root's,
// one per host) when it can be used, else the temp directory.
func HostLockDir() string {
	hostLockDirOnce.Do(func() {
		for _, parent := range []string{"/run", os.TempDir()} {
			dir := filepath.Join(parent, hostLockDirName)
			if err := os.MkdirAll(dir, 0o700); err == nil {
				if f, err := os.CreateTemp(dir, "probe-"); err == nil {
					f.Close()
					os.Remove(f.Name())
					hostLockDir = dir
					return
				}
			}
		}
		hostLockDir = os.TempDir()
	})
	return hostLockDir
}

var (
	hostLockDirOnce sync.Once
	hostLockDir     string
)

// In this process the users share one hold of the shared lock, so that a
// user nested in another (a subtest, a helper) never queues behind a
// disturber waiting for the outer one: that would deadlock.
var auditUsers struct {
	mu    sync.Mutex
	n     int
	lock  *os.File
	ready chan struct{} // closed once the first user holds the lock
	err   error
}

// AuditUser holds the shared audit lock until tb ends (call it first in
// the test, so that its daemons stop before the lock is released).
func AuditUser(tb testing.TB) {
	tb.Helper()
	u := &auditUsers
	u.mu.Lock()
	first := u.n == 0
	if first {
		u.ready, u.err, u.lock = make(chan struct{}), nil, nil
	}
	u.n++
	ready := u.ready
	u.mu.Unlock()
	release := func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.n--; u.n == 0 && u.lock != nil {
			u.lock.Close() // drops the flock
			u.lock = nil
		}
	}
	if first {
		start := time.Now()
		f, err := lockThroughTurnstile("audit", unix.LOCK_SH)
		u.mu.Lock()
		u.lock, u.err = f, err
		u.mu.Unlock()
		close(ready)
		logWait(tb, "shared", start)
	} else {
		<-ready
	}
	tb.Cleanup(release)
	if u.err != nil {
		tb.Fatalf("testenv: the host's audit test lock: %v", u.err)
	}
}

// AuditDisturber holds the exclusive audit lock until tb ends. It must not
// be called while this process holds the shared one (it would wait for
// itself): a disturbing test is never inside a user.
func AuditDisturber(tb testing.TB) {
	tb.Helper()
	start := time.Now()
	f, err := lockThroughTurnstile("audit", unix.LOCK_EX)
	if err != nil {
		tb.Fatalf("testenv: the host's audit test lock: %v", err)
	}
	logWait(tb, "exclusive", start)
	tb.Cleanup(func() { f.Close() })
}

// lockThroughTurnstile takes NAME.lock (how: LOCK_SH or LOCK_EX) after the
// turnstile NAME.turnstile: an exclusive taker holds the turnstile while it
// waits, so shared takers arriving after it wait behind it.
func lockThroughTurnstile(name string, how int) (*os.File, error) {
	dir := HostLockDir()
	gate, err := flockFile(filepath.Join(dir, name+".turnstile"), unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer gate.Close()
	return flockFile(filepath.Join(dir, name+".lock"), how)
}

// flockFile opens path (creating it) and flocks it, retrying on EINTR.
func flockFile(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return f, nil
}

// logWait says how long the test waited for a lock, when it did: a test
// that took long may have waited for another package.
func logWait(tb testing.TB, kind string, start time.Time) {
	tb.Helper()
	if d := time.Since(start); d > time.Second {
		tb.Logf("testenv: waited %s for the host's %s audit test lock (another test disturbs or uses the kernel's audit log)", d.Round(100*time.Millisecond), kind)
	}
}
