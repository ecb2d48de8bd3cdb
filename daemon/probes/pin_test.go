package probes

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/kevent"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// The test binary doubles as a watched process: for every line on stdin it
// opens the file named there and answers "ok".
const openerEnv = "MCPWARDEN_PROBES_TEST_OPENER"

func TestMain(m *testing.M) {
	if os.Getenv(openerEnv) != "" {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if f, err := os.Open(sc.Text()); err == nil {
				f.Close()
			}
			fmt.Println("ok")
		}
		os.Exit(0)
	}
	code := m.Run()
	// internal/pintest does this for the packages that start daemons; it
	// imports this package, so these tests keep their own pin directories.
	testPins.Range(func(dir, test any) bool {
		if _, err := os.Stat(dir.(string)); !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "FAIL: %s left probes pinned in %s\n", test, dir)
			code = max(code, 1)
		}
		return true
	})
	os.Exit(code)
}

// testPins are the pin directories testPinDir made, by test.
var testPins sync.Map

type opener struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startOpener(t *testing.T) *opener {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), openerEnv+"=1")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := &opener{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	return o
}

func (o *opener) open(t *testing.T, path string) {
	t.Helper()
	if _, err := io.WriteString(o.in, path+"\n"); err != nil || !o.out.Scan() {
		t.Fatalf("opener: %v", err)
	}
}

// testPinDir is a pin directory of this test alone, removed (hooks
// detached) when it ends.
func testPinDir(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(BPFFS, "mcpwarden-test-"+hex.EncodeToString(b[:]))
	testPins.Store(dir, t.Name())
	t.Cleanup(func() {
		if _, err := Unload(dir); err != nil {
			t.Errorf("unload %s: %v", dir, err)
		}
	})
	return dir
}

// waitRecord reads p's ring until a record of slot on path arrives.
func waitRecord(t *testing.T, p *Probes, slot uint32, path string) kevent.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := make(chan kevent.Record, 1024)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, out) }()
	defer func() { cancel(); <-done }()
	for {
		select {
		case r := <-out:
			if r.Slot == slot && r.Path1 == path {
				return r
			}
		case <-ctx.Done():
			t.Fatalf("no record of slot %d for %s", slot, path)
		}
	}
}

// TestPinnedProbesOutliveTheDaemon: probes kept pinned go on recording a
// watched process while no daemon runs; the next Load adopts them and reads
// what was recorded meanwhile.
func TestPinnedProbesOutliveTheDaemon(t *testing.T) {
	pin := testPinDir(t)
	dir := t.TempDir()
	before, during := filepath.Join(dir, "before"), filepath.Join(dir, "during")
	for _, f := range []string{before, during} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o := startOpener(t)
	cfg := DefaultConfig()
	cfg.PinDir = pin
	p, err := Load(cfg)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if r := p.Resumed(); r.Adopted || r.Replaced {
		t.Fatalf("first load resumed %+v", r)
	}
	if err := p.Watch(uint32(o.cmd.Process.Pid), 5); err != nil {
		t.Fatal(err)
	}
	o.open(t, before)
	waitRecord(t, p, 5, before)
	if err := p.Alive(time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := p.Keep(); err != nil {
		t.Fatalf("keep: %v", err)
	}

	o.open(t, during) // nobody reads the ring now

	p2, err := Load(cfg)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	defer p2.Close()
	r := p2.Resumed()
	if !r.Adopted || r.Watched != 1 || r.LastAlive.IsZero() || r.Stopped.IsZero() {
		t.Fatalf("resumed %+v", r)
	}
	waitRecord(t, p2, 5, during)

	// Another version's probes (here: another ring size) replace these,
	// and the watched process moves over.
	cfg3 := cfg
	cfg3.RingBytes = 1 << 20
	if err := p2.Keep(); err != nil {
		t.Fatal(err)
	}
	p3, err := Load(cfg3)
	if err != nil {
		t.Fatalf("load another version: %v", err)
	}
	defer p3.Close()
	if r := p3.Resumed(); !r.Replaced || r.Watched != 1 {
		t.Fatalf("resumed %+v", r)
	}
	o.open(t, before)
	waitRecord(t, p3, 5, before)
	entries, _ := os.ReadDir(pin)
	if len(entries) != 1 {
		t.Errorf("pin directory holds %d objects after the replacement, want 1", len(entries))
	}
	// A clean stop that does not keep the probes leaves nothing in bpffs,
	// not even the daemon's (now empty) directory.
	if err := p3.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := os.Stat(pin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin directory after Close: %v, want it removed", err)
	}
}

// TestLazySyscallHooks: with LazySyscalls the syscall hooks attach only
// when asked, and a watched process is seen only then.
func TestLazySyscallHooks(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := DefaultConfig()
	cfg.LazySyscalls = true
	p, err := Load(cfg)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer p.Close()
	if p.SyscallHooks() {
		t.Fatal("syscall hooks attached before they were asked for")
	}
	if err := p.SetSyscallHooks(true); err != nil {
		t.Fatal(err)
	}
	if !p.SyscallHooks() {
		t.Fatal("syscall hooks not attached")
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	o := startOpener(t)
	if err := p.Watch(uint32(o.cmd.Process.Pid), 3); err != nil {
		t.Fatal(err)
	}
	o.open(t, path)
	waitRecord(t, p, 3, path)
	if err := p.SetSyscallHooks(false); err != nil {
		t.Fatal(err)
	}
	if p.SyscallHooks() || len(p.Hooks()) != 3 {
		t.Fatalf("hooks after detaching the syscall ones: %v", p.Hooks())
	}
}

// TestNamespacedIDs: a process in a pid namespace of its own is reported
// with its host ids and with the ids its own /proc gives it.
func TestNamespacedIDs(t *testing.T) {
	p := load(t)
	if err := p.SetSyscallHooks(true); err != nil {
		t.Fatal(err)
	}
	unshare := testenv.RequireCommand(t, "unshare")
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A shell waits for a first line before it becomes unshare, so that
	// unshare forks the opener only once it is watched (watching follows
	// forks made afterwards; on a loaded machine unshare could otherwise
	// fork before Watch).
	sh := testenv.RequireCommand(t, "sh")
	cmd := exec.Command(sh, "-c", `read -r _ && exec "$0" "$@"`, unshare, "--pid", "--fork", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), openerEnv+"=1")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	if err := p.Watch(uint32(cmd.Process.Pid), 9); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatal(err)
	}
	o := &opener{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	o.open(t, path)
	r := waitRecord(t, p, 9, path)
	if r.NSTGID != 1 || r.NSPID != 1 || r.TGID == 1 {
		t.Fatalf("namespaced opener: host tgid %d, namespace tgid %d tid %d (want 1, 1)", r.TGID, r.NSTGID, r.NSPID)
	}
}
