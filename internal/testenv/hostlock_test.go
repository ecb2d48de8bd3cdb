package testenv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain lets the test binary act as a lock holder of TestHostLockAcrossProcesses.
func TestMain(m *testing.M) {
	if os.Getenv("TESTENV_PORTS") != "" {
		// Take ports and hold them until stdin closes.
		for range 300 {
			fmt.Println(FreePort(&testing.T{}))
		}
		fmt.Println("done")
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	if name, how := os.Getenv("TESTENV_LOCK_NAME"), os.Getenv("TESTENV_LOCK_HOW"); name != "" {
		mode := unix.LOCK_SH
		if how == "ex" {
			mode = unix.LOCK_EX
		}
		f, err := lockThroughTurnstile(name, mode)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("locked")
		io.Copy(io.Discard, os.Stdin) // held until the parent closes stdin
		f.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type holder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	locked chan string
}

// startSelf starts this test binary again, running no test (TestMain acts
// on env), with its stdin and stdout piped; it ends when its stdin closes,
// at the latest when the test ends.
func startSelf(t *testing.T, env ...string) (*exec.Cmd, io.WriteCloser, io.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	return cmd, stdin, stdout
}

func startHolder(t *testing.T, name, how string) *holder {
	t.Helper()
	cmd, stdin, stdout := startSelf(t, "TESTENV_LOCK_NAME="+name, "TESTENV_LOCK_HOW="+how)
	h := &holder{cmd: cmd, stdin: stdin, locked: make(chan string, 1)}
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		h.locked <- strings.TrimSpace(line)
	}()
	return h
}

func (h *holder) waitLocked(t *testing.T) {
	t.Helper()
	if got := <-h.locked; got != "locked" {
		t.Fatalf("lock holder: %q", got)
	}
}

func (h *holder) release() { h.stdin.Close(); h.cmd.Wait() }

// busy reports whether path cannot be flocked (how) right now.
func busy(t *testing.T, path string, how int) bool {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
	if err != nil && err != unix.EWOULDBLOCK {
		t.Fatal(err)
	}
	return err != nil
}

// TestHostLockAcrossProcesses: the audit test lock holds across processes
// (go test runs packages as processes side by side): users share it, a
// disturber excludes users and users arriving while a disturber waits
// queue behind it.
func TestHostLockAcrossProcesses(t *testing.T) {
	name := fmt.Sprintf("selftest-%d", os.Getpid())
	dir := HostLockDir()
	lock, gate := filepath.Join(dir, name+".lock"), filepath.Join(dir, name+".turnstile")
	t.Cleanup(func() { os.Remove(lock); os.Remove(gate) })

	user1 := startHolder(t, name, "sh")
	user1.waitLocked(t)
	user2 := startHolder(t, name, "sh")
	user2.waitLocked(t) // users share
	if !busy(t, lock, unix.LOCK_EX) {
		t.Fatal("two users hold the lock, yet it can be taken exclusively")
	}
	disturber := startHolder(t, name, "ex")
	// The disturber waits for the users holding the turnstile: a user
	// arriving now queues behind it.
	for deadline := time.Now().Add(2 * time.Minute); !busy(t, gate, unix.LOCK_EX); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a disturber waiting for the users does not hold the turnstile")
		}
	}
	select {
	case got := <-disturber.locked:
		t.Fatalf("the disturber got the lock while users hold it: %q", got)
	default:
	}
	user3 := startHolder(t, name, "sh")
	user1.release()
	user2.release()
	disturber.waitLocked(t)
	select {
	case got := <-user3.locked:
		t.Fatalf("a user got the lock while the disturber holds it: %q", got)
	default:
	}
	if !busy(t, lock, unix.LOCK_SH) {
		t.Fatal("the disturber holds the lock, yet it can be shared")
	}
	disturber.release()
	user3.waitLocked(t)
}

// TestAuditUserNested: users nested in one process share one hold, so a
// subtest's user never waits for its parent's.
func TestAuditUserNested(t *testing.T) {
	AuditUser(t)
	t.Run("inner", func(t *testing.T) { AuditUser(t) })
	if auditUsers.n != 1 {
		t.Fatalf("%d users after the inner one ended, want 1", auditUsers.n)
	}
}

// TestFreePortAcrossProcesses: a port FreePort gave another live test
// process is never given here (each process remembered only its own: two
// packages could be handed one port and the later bind failed).
func TestFreePortAcrossProcesses(t *testing.T) {
	_, _, stdout := startSelf(t, "TESTENV_PORTS=1")
	theirs := map[int]bool{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "done" {
		var p int
		if _, err := fmt.Sscan(sc.Text(), &p); err != nil {
			t.Fatalf("the other process: %q", sc.Text())
		}
		theirs[p] = true
	}
	if len(theirs) != 300 {
		t.Fatalf("the other process took %d ports, want 300", len(theirs))
	}
	lo, hi := portPool()
	if hi-lo > 0 && hi-lo < 3000 {
		// Under CI the test runs or fails: the pool follows the host's
		// ephemeral port range (sysctl net.ipv4.ip_local_port_range).
		if InCI() {
			t.Fatalf("port pool [%d, %d) too small for the test: widen the range below net.ipv4.ip_local_port_range", lo, hi)
		}
		t.Skipf("port pool [%d, %d) too small for the test", lo, hi)
	}
	for range 1000 {
		if p := FreePort(t); theirs[p] {
			t.Fatalf("FreePort gave %d, which another live test process holds", p)
		}
	}
}
