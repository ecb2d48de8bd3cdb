package procinfo

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

func pidfd(t *testing.T, pid int) *os.File {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open: %v", err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFromPidfd(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	f := pidfd(t, cmd.Process.Pid)
	p, err := FromPidfd(f)
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != cmd.Process.Pid || p.PPID != os.Getpid() || p.UID != uint32(os.Getuid()) || p.Start == 0 {
		t.Errorf("child %+v", p)
	}
	self, err := Of(os.Getpid(), pidfd(t, os.Getpid()))
	if err != nil || self.Start > p.Start {
		t.Errorf("self %+v %v: started after its child?", self, err)
	}
	if _, err := Of(os.Getpid(), f); err == nil {
		t.Error("a pidfd of another process confirmed this one")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := FromPidfd(f); !errors.Is(err, ErrGone) {
		t.Errorf("reaped child: %v", err)
	}
	if err := Alive(f); !errors.Is(err, ErrGone) {
		t.Errorf("alive after exit: %v", err)
	}
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	if _, err := FromPidfd(r); !errors.Is(err, ErrNotPidfd) {
		t.Errorf("a pipe taken for a pidfd: %v", err)
	}
}

func TestCgroupID(t *testing.T) {
	mnt, err := cgroup2Mount()
	if err != nil || mnt == "" {
		testenv.Missing(t, fmt.Sprintf("no cgroup v2 mount (%v)", err))
	}
	p, err := Of(os.Getpid(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.CgroupID == 0 {
		t.Fatalf("cgroup id 0 with cgroup v2 at %s", mnt)
	}
}

func TestParsers(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		err  error
	}{
		{"pos:\t0\nflags:\t02000002\nPid:\t6016\nNSpid:\t6016 1\n", 6016, nil},
		{"Pid:\t-1\n", 0, ErrGone},
		{"Pid:\t0\n", 0, ErrInvisible},
		{"pos:\t0\nflags:\t0100000\n", 0, ErrNotPidfd},
	} {
		got, err := parsePidfdInfo([]byte(c.in))
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("parsePidfdInfo(%q) = %d, %v", c.in, got, err)
		}
	}
	for _, c := range []struct {
		in   string
		want int
		bad  bool
	}{
		{"Pid:\t6016\nNSpid:\t6016\t3\n", 3, false},
		{"Pid:\t6016\nNSpid:\t6016\t40\t2\n", 2, false},
		{"Pid:\t6016\nNSpid:\t6016\n", 6016, false},
		{"Pid:\t6016\n", 6016, false}, // a kernel without NSpid has no pid namespaces to show
		{"NSpid:\t\n", 0, true},
		{"NSpid:\t6016 x\n", 0, true},
		{"NSpid:\t6016 0\n", 0, true},
	} {
		got, err := ownPID([]byte(c.in), 6016)
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("ownPID(%q) = %d, %v", c.in, got, err)
		}
	}
	fields := "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20 21"
	for _, comm := range []string{"cat", "a) (b", "x)", ") 9 9 9", ""} {
		got, err := parseStartTime([]byte("123 (" + comm + ") " + fields))
		if err != nil || got != 4242 {
			t.Errorf("comm %q: %d %v", comm, got, err)
		}
	}
	if _, err := parseStartTime([]byte("123 (x) S 1")); err == nil {
		t.Error("short stat accepted")
	}
}

// FuzzParseStartTime: a process chooses its own comm; nothing it can put
// there makes the parser panic or read another field than the 22nd.
func FuzzParseStartTime(f *testing.F) {
	f.Add("cat")
	f.Add(") 1 2 3 (")
	f.Fuzz(func(t *testing.T, comm string) {
		line := "7 (" + comm + ") S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99 20\n"
		if got, err := parseStartTime([]byte(line)); err != nil || got != 99 {
			t.Fatalf("comm %q: start %d, %v", comm, got, err)
		}
	})
}

// TestChildren: the children of a process, each thread's, and a zombie
// told from a live one.
func TestChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 30 & sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var kids []int
	for deadline := time.Now().Add(time.Minute); len(kids) < 2; time.Sleep(10 * time.Millisecond) {
		var err error
		if kids, err = Children(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("children of sh: %v", kids)
		}
	}
	byScan, err := childrenByScan(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(kids)
	slices.Sort(byScan)
	if !slices.Equal(kids, byScan) {
		t.Errorf("children %v, by their parents %v", kids, byScan)
	}
	for _, k := range kids {
		if Exiting(k) {
			t.Errorf("a sleeping child %d is exiting", k)
		}
	}
	if mine, err := Children(os.Getpid()); err != nil || !slices.Contains(mine, cmd.Process.Pid) {
		t.Errorf("this process's children %v %v lack %d", mine, err, cmd.Process.Pid)
	}
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !Exiting(zombie.Process.Pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an exited, unreaped child is not exiting")
		}
	}
	zombie.Wait()
	if !Exiting(zombie.Process.Pid) {
		t.Error("a reaped child is not gone")
	}
	if _, err := Children(zombie.Process.Pid); !errors.Is(err, ErrGone) && err != nil {
		t.Errorf("children of a reaped process: %v", err)
	}
}

// FuzzParseStateParent: nothing a process puts in its comm makes the
// state and parent come from elsewhere.
func FuzzParseStateParent(f *testing.F) {
	f.Add("cat")
	f.Add(") Z 1 (")
	f.Fuzz(func(t *testing.T, comm string) {
		line := "7 (" + comm + ") S 4242 2 3\n"
		if s, ppid, err := parseStateParent([]byte(line)); err != nil || s != 'S' || ppid != 4242 {
			t.Fatalf("comm %q: state %c ppid %d, %v", comm, s, ppid, err)
		}
	})
}

func TestParseTimensOffsets(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"monotonic           0         0\nboottime            0         0\n", 0, true},
		{"monotonic       86400         0\nboottime            0         0\n", 24 * time.Hour, true},
		{"boottime 5 0\nmonotonic -3 500\n", -3*time.Second + 500, true},
		{"boottime 0 0\n", 0, false},
		{"monotonic x 0\n", 0, false},
		{"monotonic 99999999999999999 0\n", 0, false},
		{"", 0, false},
	} {
		got, err := parseTimensOffsets(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseTimensOffsets(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
