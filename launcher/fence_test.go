package launcher_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/schema"
)

// debianPython is Debian's python3, the interpreter the tests' python
// servers run under.
const debianPython = "/usr/bin/python3"

// workspace is a base with a scope dir, a sibling outside the scope, escape
// symlinks, and a secret outside the base.
type workspace struct {
	base, allowed, sibling, outside, secret, deep1, deep10 string
}

// startWriteSession runs the naive server under `mcpwarden run` with a
// write scope of the workspace's "allowed" directory, with the run's
// namespaces or (noNS) Landlock and seccomp alone.
func startWriteSession(t *testing.T, noNS bool) (*fencetest.Session, workspace) {
	t.Helper()
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	return fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS}), w
}

// startEnvSession runs the naive server under `mcpwarden run` with a
// read scope of the workspace's "allowed" directory and env added to the
// launcher's environment.
func startEnvSession(t *testing.T, env []string) *fencetest.Session {
	t.Helper()
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	return fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, Env: env})
}

func newWorkspace(t *testing.T) workspace {
	t.Helper()
	root := t.TempDir()
	w := workspace{
		base:    filepath.Join(root, "base"),
		outside: filepath.Join(root, "outside"),
	}
	w.allowed = filepath.Join(w.base, "allowed")
	w.sibling = filepath.Join(w.base, "sibling")
	w.secret = filepath.Join(w.outside, "secret.txt")
	deep := w.allowed
	for i := 1; i <= 10; i++ {
		deep = filepath.Join(deep, fmt.Sprintf("d%d", i))
	}
	for _, d := range []string{w.allowed, w.sibling, w.outside, deep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w.deep1 = filepath.Join(w.allowed, "a.txt")
	w.deep10 = filepath.Join(deep, "deep.txt")
	files := map[string]string{
		w.deep1:                               "inside",
		w.deep10:                              "deep inside",
		filepath.Join(w.sibling, "s.txt"):     "SIBLING-SECRET-42",
		w.secret:                              "OUTSIDE-SECRET-42",
		filepath.Join(w.outside, "tool.sh"):   "#!/bin/sh\necho ran\n",
		filepath.Join(w.allowed, "run-me.sh"): "#!/bin/sh\necho ran\n",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustSymlink(t, w.secret, filepath.Join(w.allowed, "link-out.txt"))
	mustSymlink(t, w.outside, filepath.Join(w.allowed, "dir-out"))
	mustSymlink(t, w.sibling, filepath.Join(w.allowed, "dir-sibling"))
	return w
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

type fenceCase struct {
	name   string
	req    map[string]any
	wantOK bool
	errno  []string // acceptable errnos when denied
	data   string   // expected data when allowed
	// exact: only errno, even with namespaces (the layer that must say no
	// is the one named).
	exact bool
}

func runCases(t *testing.T, s *fencetest.Session, cases []fenceCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.Do(c.req)
			if c.wantOK {
				if !r.OK {
					t.Fatalf("%v: want allowed, got %s %s", c.req, r.Errno, r.Error)
				}
				if c.data != "" && r.Data != c.data {
					t.Fatalf("%v: data %q, want %q", c.req, r.Data, c.data)
				}
				return
			}
			if r.OK {
				t.Fatalf("%v: ESCAPE — the fence allowed it (data %q)", c.req, r.Data)
			}
			if r.Data != "" && strings.Contains(r.Data, "SECRET-42") {
				t.Fatalf("%v: denied but leaked data %q", c.req, r.Data)
			}
			want := c.errno
			if s.Namespaces && !c.exact {
				want = append(append([]string(nil), want...), fencetest.NamespaceDenials...)
			}
			for _, e := range want {
				if r.Errno == e {
					return
				}
			}
			t.Fatalf("%v: denied with %q (%s), want one of %v", c.req, r.Errno, r.Error, want)
		})
	}
}

var denied = []string{"EACCES", "EPERM"}

// TestFenceReadScope proves that the kernel alone stops a naive server with a
// read scope: it checks no paths itself.
func TestFenceReadScope(t *testing.T) { fencetest.ForEachLayering(t, testFenceReadScope) }

func testFenceReadScope(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})

	// A TCP listener, an abstract and a pathname unix listener outside the run.
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	go acceptAll(tcp)
	abstractName := fmt.Sprintf("@mcpwarden-test-%d", os.Getpid())
	squat := fmt.Sprintf("/tmp/.X11-unix/mcpwarden-%d-%v", os.Getpid(), noNS)
	abs, err := net.Listen("unix", abstractName)
	if err != nil {
		t.Fatal(err)
	}
	defer abs.Close()
	go acceptAll(abs)
	sockPath := filepath.Join(w.outside, "srv.sock")
	us, err := net.Listen("unix", sockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer us.Close()
	go acceptAll(us)

	// An inherited descriptor to a secret, without close-on-exec.
	fd, err := syscall.Open(w.secret, syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	inherited := os.NewFile(uintptr(fd), "secret")
	defer inherited.Close()

	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, ExtraFiles: []*os.File{inherited}, NoNamespaces: noNS})
	pids := strings.Fields(s.Do(map[string]any{"op": "pid"}).Data)
	if len(pids) != 2 {
		t.Fatalf("pid: %v (stderr %s)", pids, s.Stderr())
	}
	launcherPID := s.Cmd.Process.Pid
	outsideRel := strings.Repeat("../", strings.Count(w.allowed, "/")) + strings.TrimPrefix(w.secret, "/")

	cases := []fenceCase{
		{name: "read inside", req: map[string]any{"op": "read", "path": w.deep1}, wantOK: true, data: "inside"},
		{name: "read 10 levels deep", req: map[string]any{"op": "read", "path": w.deep10}, wantOK: true, data: "deep inside"},
		{name: "list inside", req: map[string]any{"op": "readdir", "path": w.allowed}, wantOK: true},
		{name: "read absolute outside", req: map[string]any{"op": "read", "path": w.secret}, errno: denied},
		{name: "read dotdot outside", req: map[string]any{"op": "read", "path": w.allowed + "/" + outsideRel}, errno: denied},
		{name: "read dotdot sibling", req: map[string]any{"op": "read", "path": w.allowed + "/../sibling/s.txt"}, errno: denied},
		{name: "read sibling", req: map[string]any{"op": "read", "path": filepath.Join(w.sibling, "s.txt")}, errno: denied},
		{name: "list sibling", req: map[string]any{"op": "readdir", "path": w.sibling}, errno: denied},
		{name: "list base", req: map[string]any{"op": "readdir", "path": w.base}, errno: denied},
		{name: "read symlinked file out", req: map[string]any{"op": "read", "path": filepath.Join(w.allowed, "link-out.txt")}, errno: denied},
		{name: "read through symlinked dir out", req: map[string]any{"op": "read", "path": filepath.Join(w.allowed, "dir-out", "secret.txt")}, errno: denied},
		{name: "read through symlinked sibling dir", req: map[string]any{"op": "read", "path": filepath.Join(w.allowed, "dir-sibling", "s.txt")}, errno: denied},
		{name: "read proc self root", req: map[string]any{"op": "read", "path": "/proc/self/root" + w.secret}, errno: denied},
		{name: "read proc self cwd sibling", req: map[string]any{"op": "read", "path": "/proc/self/cwd/sibling/s.txt"}, errno: denied},
		{name: "read proc launcher root", req: map[string]any{"op": "read", "path": fmt.Sprintf("/proc/%d/root%s", launcherPID, w.secret)}, errno: denied},
		{name: "read proc launcher fd", req: map[string]any{"op": "read", "path": fmt.Sprintf("/proc/%d/fd/3", launcherPID)}, errno: denied},
		{name: "read etc shadow", req: map[string]any{"op": "read", "path": "/etc/shadow"}, errno: denied},
		{name: "read etc passwd", req: map[string]any{"op": "read", "path": "/etc/passwd"}, errno: denied},
		{name: "list etc", req: map[string]any{"op": "readdir", "path": "/etc"}, errno: denied},
		{name: "list root", req: map[string]any{"op": "readdir", "path": "/"}, errno: denied},
		{name: "write new file in read scope", req: map[string]any{"op": "write", "path": filepath.Join(w.allowed, "new.txt"), "data": "x"}, errno: denied},
		{name: "overwrite file in read scope", req: map[string]any{"op": "write", "path": w.deep1, "data": "x"}, errno: denied},
		{name: "append in read scope", req: map[string]any{"op": "append", "path": w.deep1, "data": "x"}, errno: denied},
		{name: "truncate in read scope", req: map[string]any{"op": "truncate", "path": w.deep1}, errno: denied},
		{name: "mkdir in read scope", req: map[string]any{"op": "mkdir", "path": filepath.Join(w.allowed, "newdir")}, errno: denied},
		{name: "remove in read scope", req: map[string]any{"op": "remove", "path": w.deep1}, errno: denied},
		{name: "rename in read scope", req: map[string]any{"op": "rename", "path": w.deep1, "to": filepath.Join(w.allowed, "b.txt")}, errno: denied},
		{name: "symlink in read scope", req: map[string]any{"op": "symlink", "path": filepath.Join(w.allowed, "l"), "to": "/etc/shadow"}, errno: denied},
		{name: "write outside", req: map[string]any{"op": "write", "path": filepath.Join(w.outside, "x"), "data": "x"}, errno: denied},
		{name: "chmod outside", req: map[string]any{"op": "chmod", "path": w.secret}, errno: denied},
		{name: "exec shell", req: map[string]any{"op": "exec", "path": "/bin/sh", "args": []string{"-c", "cat " + w.secret}}, errno: denied},
		{name: "exec coreutils", req: map[string]any{"op": "exec", "path": "/usr/bin/id"}, errno: denied},
		{name: "exec script outside", req: map[string]any{"op": "exec", "path": filepath.Join(w.outside, "tool.sh")}, errno: denied},
		{name: "exec script in scope", req: map[string]any{"op": "exec", "path": filepath.Join(w.allowed, "run-me.sh")}, errno: denied},
		{name: "exec the ELF loader", req: map[string]any{"op": "exec", "path": "/lib64/ld-linux-x86-64.so.2", "args": []string{"/bin/cat", w.secret}}, errno: append([]string{""}, denied...)},
		{name: "tcp connect loopback", req: map[string]any{"op": "connect", "addr": tcp.Addr().String()}, errno: denied},
		{name: "mptcp connect loopback", req: map[string]any{"op": "connect_mptcp", "addr": tcp.Addr().String()}, errno: denied},
		{name: "sctp connect loopback", req: map[string]any{"op": "connect_sctp", "addr": tcp.Addr().String()}, errno: denied},
		{name: "tcp bind", req: map[string]any{"op": "bind", "addr": "127.0.0.1:0"}, errno: denied},
		{name: "udp send", req: map[string]any{"op": "udp", "addr": "127.0.0.1:9"}, errno: denied},
		{name: "abstract unix socket outside", req: map[string]any{"op": "unix", "path": abstractName}, errno: denied},
		{name: "pathname unix socket outside", req: map[string]any{"op": "unix", "path": sockPath}, errno: denied},
		{name: "signal the launcher", req: map[string]any{"op": "kill", "pid": launcherPID, "sig": int(syscall.SIGTERM)}, errno: denied},
		{name: "signal the test", req: map[string]any{"op": "kill", "pid": os.Getpid(), "sig": int(syscall.SIGTERM)}, errno: denied},
		{name: "signal init", req: map[string]any{"op": "kill", "pid": 1, "sig": 0}, errno: denied},
		{name: "io_uring", req: map[string]any{"op": "io_uring"}, errno: []string{"EPERM"}},
		// The abstract names are the network namespace's: without the
		// run's own, a name held here is held from the whole host.
		{name: "bind an abstract unix name (a socketpair's end)", req: map[string]any{"op": "abstract_bind", "name": squat}, errno: []string{"EACCES"}, exact: true},
		{name: "network interfaces (a netlink bind) still work", req: map[string]any{"op": "ifaces"}, wantOK: true},
		{name: "private tmpdir is writable", req: map[string]any{"op": "write", "path": "$TMPDIR/probe", "data": "x"}, wantOK: true},
	}
	// $TMPDIR is the server's own; ask it.
	env := s.Do(map[string]any{"op": "env"}).Data
	tmpdir := ""
	for _, kv := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok {
			tmpdir = v
		}
	}
	if tmpdir == "" {
		t.Fatalf("server has no TMPDIR: %q", env)
	}
	for i := range cases {
		if p, ok := cases[i].req["path"].(string); ok {
			cases[i].req["path"] = strings.Replace(p, "$TMPDIR", tmpdir, 1)
		}
	}
	runCases(t, s, cases)
	if l, err := net.Listen("unix", "@"+squat); err != nil {
		t.Errorf("ESCAPE: the run holds the host's abstract socket name %s: %v", squat, err)
	} else {
		l.Close()
	}

	assertNoSecretFD(t, s)
	if code := s.Close(); code != 0 {
		t.Errorf("exit code %d, want 0 (stderr %s)", code, s.Stderr())
	}
	if _, err := os.Stat(tmpdir); !os.IsNotExist(err) {
		t.Errorf("private TMPDIR %s still exists after the run: %v", tmpdir, err)
	}
	if b, _ := os.ReadFile(w.deep1); string(b) != "inside" {
		t.Errorf("file in read scope changed: %q", b)
	}
}

// TestFenceWriteScope: a write scope may create, change, rename and remove
// inside, but still nothing outside, and still no exec of what it wrote.
func TestFenceWriteScope(t *testing.T) { fencetest.ForEachLayering(t, testFenceWriteScope) }

func testFenceWriteScope(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	newFile := filepath.Join(w.allowed, "new.sh")
	cases := []fenceCase{
		{name: "create", req: map[string]any{"op": "write", "path": newFile, "data": "#!/bin/sh\necho pwned\n"}, wantOK: true},
		{name: "overwrite", req: map[string]any{"op": "write", "path": w.deep1, "data": "changed"}, wantOK: true},
		{name: "mkdir", req: map[string]any{"op": "mkdir", "path": filepath.Join(w.allowed, "nd")}, wantOK: true},
		{name: "rename across dirs inside", req: map[string]any{"op": "rename", "path": w.deep10, "to": filepath.Join(w.allowed, "nd", "moved.txt")}, wantOK: true},
		{name: "exec what it wrote", req: map[string]any{"op": "exec", "path": newFile}, errno: denied},
		{name: "write sibling", req: map[string]any{"op": "write", "path": filepath.Join(w.sibling, "x"), "data": "x"}, errno: denied},
		{name: "overwrite outside through symlink", req: map[string]any{"op": "write", "path": filepath.Join(w.allowed, "link-out.txt"), "data": "x"}, errno: denied},
		{name: "rename out of scope", req: map[string]any{"op": "rename", "path": w.deep1, "to": filepath.Join(w.sibling, "stolen.txt")}, errno: append([]string{"EXDEV"}, denied...)},
		{name: "hard link outside file in", req: map[string]any{"op": "link", "path": w.secret, "to": filepath.Join(w.allowed, "hl.txt")}, errno: append([]string{"EXDEV"}, denied...)},
		{name: "remove base sibling", req: map[string]any{"op": "remove", "path": filepath.Join(w.sibling, "s.txt")}, errno: denied},
	}
	if s.Namespaces {
		// The minimal root confines a mode change by path to the write
		// scope and TMPDIR (all else is read-only or absent): allowed there,
		// set-id bits never (seccomp).
		cases = append(cases, fenceCase{name: "chmod inside (path)", req: map[string]any{"op": "chmod", "path": newFile}, wantOK: true})
	} else {
		cases = append(cases, fenceCase{name: "chmod inside (path)", req: map[string]any{"op": "chmod", "path": newFile}, errno: denied})
	}
	runCases(t, s, cases)
	if code := s.Close(); code != 0 {
		t.Errorf("exit code %d (stderr %s)", code, s.Stderr())
	}
	if b, _ := os.ReadFile(w.secret); string(b) != "OUTSIDE-SECRET-42" {
		t.Errorf("outside file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(w.sibling, "s.txt")); err != nil {
		t.Errorf("sibling file gone: %v", err)
	}
}

// TestFenceNetworkGrant: a granted port connects, others do not.
func TestFenceNetworkGrant(t *testing.T) { fencetest.ForEachLayering(t, testFenceNetworkGrant) }

func testFenceNetworkGrant(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	granted, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer granted.Close()
	go acceptAll(granted)
	other, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go acceptAll(other)
	port := granted.Addr().(*net.TCPAddr).Port
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "network": map[string]any{"connect_tcp": []int{port}}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	runCases(t, s, []fenceCase{
		{name: "granted port", req: map[string]any{"op": "connect", "addr": granted.Addr().String()}, wantOK: true},
		{name: "other port", req: map[string]any{"op": "connect", "addr": other.Addr().String()}, errno: denied},
		{name: "bind not granted", req: map[string]any{"op": "bind", "addr": "127.0.0.1:0"}, errno: denied},
		{name: "mptcp to granted port still refused", req: map[string]any{"op": "connect_mptcp", "addr": granted.Addr().String()}, errno: denied},
		{name: "AF_UNSPEC re-connect of a granted socket to another port", req: map[string]any{"op": "tcp_reconnect", "addr": granted.Addr().String(), "to": other.Addr().String()}, errno: denied},
		{name: "UDP-Lite with a grant", req: map[string]any{"op": "socket", "flags": unix.AF_INET, "mode": unix.SOCK_DGRAM, "n": 136}, errno: []string{"EACCES"}, exact: true},
		{name: "ICMP ping socket with a grant", req: map[string]any{"op": "socket", "flags": unix.AF_INET, "mode": unix.SOCK_DGRAM, "n": unix.IPPROTO_ICMP}, errno: []string{"EACCES"}, exact: true},
		{name: "SCTP with a grant", req: map[string]any{"op": "socket", "flags": unix.AF_INET, "mode": unix.SOCK_STREAM, "n": unix.IPPROTO_SCTP}, errno: []string{"EACCES"}, exact: true},
	})
}

// TestFenceAllowIOUring: allow_io_uring lifts only the io_uring block,
// and needs the namespaces: under --no-namespaces the run is refused
// (exit 69, recorded), as io_uring would reach the host's unix sockets
// (TestFenceIOUringHostUnixSocket).
func TestFenceAllowIOUring(t *testing.T) { fencetest.ForEachLayering(t, testFenceAllowIOUring) }

func testFenceAllowIOUring(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "allow_io_uring": true})
	if noNS {
		log := filepath.Join(t.TempDir(), "audit.jsonl")
		code, _, stderr := runCLI(t, b.Mcpwarden, w.base, "run", "--scope", scope, "--base", w.base, "--audit-log", log, "--no-namespaces", "--", b.Naive)
		if code != 69 || !strings.Contains(stderr, "allow_io_uring") || !strings.Contains(stderr, "remove allow_io_uring") {
			t.Fatalf("allow_io_uring under --no-namespaces: exit %d, %s; want 69 and why", code, stderr)
		}
		if recs := launchLayers(t, log); recs[len(recs)-1].ExitReason != schema.ExitRefusedKernel {
			t.Errorf("the refusal's record: %+v", recs[len(recs)-1])
		}
		code, _, stderr = runCLI(t, b.Mcpwarden, w.base, "scope", "check", scope, "--base", w.base, "--no-namespaces")
		if code != 69 || !strings.Contains(stderr, "allow_io_uring") {
			t.Errorf("scope check --no-namespaces of an io_uring scope: exit %d, %s; want 69", code, stderr)
		}
		return
	}
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	r := s.Do(map[string]any{"op": "io_uring"})
	if !r.OK && r.Errno == "EPERM" {
		t.Fatalf("io_uring still blocked with allow_io_uring: %s", r.Error)
	}
	runCases(t, s, []fenceCase{{name: "still fenced", req: map[string]any{"op": "read", "path": w.secret}, errno: denied}})
}

// TestAuditModeRunsUnfenced: --mode audit runs without the fence and marks
// every record.
func TestAuditModeRunsUnfenced(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	inherited, err := os.Open(w.secret)
	if err != nil {
		t.Fatal(err)
	}
	defer inherited.Close()
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log, ExtraArgs: []string{"--mode", "audit"}, ExtraFiles: []*os.File{inherited}})
	if r := s.Do(map[string]any{"op": "read", "path": w.secret}); !r.OK {
		t.Fatalf("audit mode should not fence: %s", r.Error)
	}
	assertNoSecretFD(t, s)
	s.Close()
	if !strings.Contains(s.Stderr(), "WITHOUT the fence") {
		t.Errorf("audit mode not announced on stderr: %s", s.Stderr())
	}
	for _, ev := range readRecords(t, log) {
		if ev.Launch == nil || ev.Launch.Mode != "audit" {
			t.Errorf("record not marked audit: %+v", ev)
		}
	}
}

// assertNoSecretFD reads every descriptor the server has open above stdio
// and fails if one yields the secret the test passed down.
func assertNoSecretFD(t *testing.T, s *fencetest.Session) {
	t.Helper()
	// Descriptors above stdio may be the server's own (Go's runtime keeps
	// its cgroup's cpu.cfs_quota_us open): none may be the launcher's.
	for fd := 3; fd < 64; fd++ {
		if r := s.Do(map[string]any{"op": "readfd", "fd": fd}); r.OK && strings.Contains(r.Data, "SECRET-42") {
			t.Fatalf("server reads the secret through inherited fd %d", fd)
		}
		if r := s.Do(map[string]any{"op": "read", "path": fmt.Sprintf("/proc/self/fd/%d", fd)}); r.OK && strings.Contains(r.Data, "SECRET-42") {
			t.Fatalf("server reads the secret through /proc/self/fd/%d", fd)
		}
	}
}

// TestNoProcessOutlivesTheRun: a descendant the server leaves behind is
// killed when the run ends, and cannot leave the run's session.
func TestNoProcessOutlivesTheRun(t *testing.T) {
	fencetest.ForEachLayering(t, testNoProcessOutlivesTheRun)
}

func testNoProcessOutlivesTheRun(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	r := s.Do(map[string]any{"op": "spawn"})
	if !r.OK {
		t.Fatalf("spawn: %s", r.Error)
	}
	child, _ := strconv.Atoi(r.Data)
	// With its own pid namespace, the pid the server knows is the run's;
	// every process of the run is in that namespace.
	pidNS := ""
	if s.Namespaces {
		pidNS = fencetest.RunPIDNamespace(t, s.Cmd.Process.Pid)
	}
	runCases(t, s, []fenceCase{{name: "setsid", req: map[string]any{"op": "setsid"}, errno: []string{"EPERM"}}})
	if code := s.Close(); code != 0 {
		t.Fatalf("exit %d: %s", code, s.Stderr())
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var left []int
		if pidNS != "" {
			left = fencetest.ProcessesIn(pidNS)
		} else if alive(child) {
			left = []int{child}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("processes %v of the run outlived it", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

func acceptAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

type record struct {
	RunID     string `json:"run_id"`
	ScopeID   string `json:"scope_id"`
	ScopeHash string `json:"scope_hash"`
	Kind      string `json:"kind"`
	Launch    *struct {
		Phase       string `json:"phase"`
		Mode        string `json:"mode"`
		LandlockABI int    `json:"landlock_abi"`
		Degraded    bool   `json:"degraded"`
		ServerExe   string `json:"server_exe"`
		ExitStatus  int    `json:"exit_status"`
		ExitReason  string `json:"exit_reason"`
		DurationMS  int64  `json:"duration_ms"`
	} `json:"launch"`
	raw string
}

func readRecords(t *testing.T, path string) []record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad audit line %q: %v", sc.Text(), err)
		}
		r.raw = sc.Text()
		out = append(out, r)
	}
	return out
}

// answerOnce starts a run of o's server, sends it one line and returns
// its first answer ("" when it was refused or answered nothing) with the
// session, which the caller closes or waits for.
func answerOnce(t *testing.T, b fencetest.Binaries, o fencetest.StartOptions) (string, *fencetest.Session) {
	t.Helper()
	s := fencetest.Start(t, b, o)
	return answerOf(s), s
}

// answerOf sends s's server a line and returns its first line of answer
// ("" when it wrote none before it ended). A server that answers without
// reading (awk's BEGIN) may be gone, and its stdin with it, before the
// line is written: what it wrote is read all the same (a failed write is
// not taken for no answer).
func answerOf(s *fencetest.Session) string {
	_ = s.Send([]byte("go\n"))
	line, _ := s.ReadLine(2 * time.Minute)
	return line
}

// plantedCode is what a write-scope run whose server plants code must be
// refused with, and what each failure says. The server's first answer is
// "v1"; the code it plants answers "v2" on the next run.
type plantedCode struct {
	// want: what the refusal's stderr (exit 70) names, each of them.
	want []string
	// naming: how the refusal's failure message names it.
	naming string
	// planted: what the server did with the code the next run ran.
	planted string
	// unrefused: the note before the answers when the run was not
	// refused and the next run did not run the planted code; withStderr
	// adds the first run's stderr to that message.
	unrefused  string
	withStderr bool
}

// checkPlantedCodeRefused: the run of o must be refused (exit 70, naming
// p.want) or, failing that, the next run must not run the code the server
// planted (an ESCAPE).
func checkPlantedCodeRefused(t *testing.T, b fencetest.Binaries, o fencetest.StartOptions, p plantedCode) {
	t.Helper()
	first, s := answerOnce(t, b, o)
	if first == "" {
		code := s.Wait()
		named := code == 70
		for _, w := range p.want {
			named = named && strings.Contains(s.Stderr(), w)
		}
		if !named {
			t.Fatalf("refused with exit %d, want 70 naming %s: %s", code, p.naming, s.Stderr())
		}
		return
	}
	s.Close()
	next, s2 := answerOnce(t, b, o)
	s2.Close()
	if next == "v2" {
		t.Errorf("ESCAPE: the run was not refused; the next run ran the code the server %s (answers %q, %q)", p.planted, first, next)
	} else if p.withStderr {
		t.Errorf("the run was not refused (%sanswers %q, %q): %s", p.unrefused, first, next, s.Stderr())
	} else {
		t.Errorf("the run was not refused (%sanswers %q, %q)", p.unrefused, first, next)
	}
}

// checkSelfRewritingScript runs, in a write-scope run of each layering's
// noNS, a server whose script (file, written from source of its path)
// answers "v1" and rewrites itself to answer "v2", started with command
// of the script's path: as subtest "<name> in its write scope" the run
// must be refused as p says (checkPlantedCodeRefused); as "<name> outside
// the scope (runs)" the script lies outside the scope and runs.
func checkSelfRewritingScript(t *testing.T, b fencetest.Binaries, noNS bool, name, file string, source func(path string) string, command func(script string) []string, p plantedCode) {
	t.Helper()
	for _, inScope := range []bool{true, false} {
		sub := name + " in its write scope"
		if !inScope {
			sub = name + " outside the scope (runs)"
		}
		t.Run(sub, func(t *testing.T) {
			w := newWorkspace(t)
			dir := w.allowed
			if !inScope {
				dir = t.TempDir()
			}
			script := filepath.Join(dir, file)
			testenv.WriteFiles(t, map[string]string{script: source(script)})
			scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
			o := fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS, Command: command(script)}
			if !inScope {
				// Outside the scope the server may read its script but
				// not rewrite it: the next run answers v1 again.
				first, s := answerOnce(t, b, o)
				s.Close()
				next, s2 := answerOnce(t, b, o)
				s2.Close()
				if first != "v1" || next != "v1" {
					t.Fatalf("answers %q, %q, want v1 twice (the script read, its rewrite refused): %s", first, next, s.Stderr()+s2.Stderr())
				}
				return
			}
			checkPlantedCodeRefused(t, b, o, p)
		})
	}
}
