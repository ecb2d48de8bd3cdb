package launcher_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Hostile tests of the namespace and identity layers (issue 9, layers 2
// and 4). Each asks what the server can see or do of the host beyond what
// Landlock and seccomp decide: stat and statfs (which Landlock does not
// check), /proc, signals, the host name, the network, planting through the
// private TMPDIR, the ELF loader on workspace bytes, and who owns what.

// launchLayers reads the layers of every launch record in log.
func launchLayers(t *testing.T, log string) []schema.Launch {
	t.Helper()
	var out []schema.Launch
	for _, r := range readRecords(t, log) {
		var ev schema.Event
		if err := json.Unmarshal([]byte(r.raw), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Launch != nil {
			out = append(out, *ev.Launch)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no launch record in %s", log)
	}
	return out
}

func layerOf(l schema.Launch, name schema.LayerName) schema.Layer {
	for _, ly := range l.Layers {
		if ly.Name == name {
			return ly
		}
	}
	return schema.Layer{}
}

// TestNSWhatTheServerSees: in its mount namespace the server finds only
// its runtime and scope (host paths it could stat before are gone), every
// mount nosuid and nodev, the scope read-only and noexec, its own /proc
// with no process outside the run, no way to name a process outside it,
// its own host name, and loopback as its only network interface.
func TestNSWhatTheServerSees(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log})
	hostName, _ := os.Hostname()
	launcherPID := s.Cmd.Process.Pid
	self, _ := os.Readlink("/proc/self/ns/pid")
	_ = self

	// Host paths that exist here and are neither runtime nor scope.
	for _, p := range []string{"/etc/shadow", "/etc/passwd", "/etc/hostname", "/root", "/home", "/var", "/usr/bin/id",
		w.secret, w.sibling, w.outside, filepath.Join(w.base, "sibling", "s.txt"), testenv.RepoRoot(),
		fmt.Sprintf("/proc/%d", launcherPID), fmt.Sprintf("/proc/%d/status", os.Getpid())} {
		if _, err := os.Lstat(p); err != nil {
			t.Fatalf("test setup: %s does not exist on the host: %v", p, err)
		}
		if r := s.Do(map[string]any{"op": "lstat", "path": p}); r.OK || r.Errno != "ENOENT" {
			t.Errorf("lstat %s: %+v; the server can tell it exists on the host", p, r)
		}
	}
	// What it is given exists, with the mount flags of its layer.
	flags := func(p string) uint64 {
		r := s.Do(map[string]any{"op": "statfs", "path": p})
		var typ, fl uint64
		if _, err := fmt.Sscanf(r.Data, "type=%x flags=%x", &typ, &fl); !r.OK || err != nil {
			t.Fatalf("statfs %s: %+v", p, r)
		}
		return fl
	}
	for p, want := range map[string]uint64{
		w.allowed: unix.ST_RDONLY | unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC,
		b.Naive:   unix.ST_RDONLY | unix.ST_NOSUID | unix.ST_NODEV,
		"/":       unix.ST_RDONLY | unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC,
	} {
		if got := flags(p); got&want != want {
			t.Errorf("statfs %s: flags %#x, want at least %#x", p, got, want)
		}
	}
	if got := flags(b.Naive); got&unix.ST_NOEXEC != 0 {
		t.Errorf("the runtime is mounted noexec: %#x", got)
	}
	tmp := envOf(t, s, "TMPDIR")
	if got := flags(tmp); got&(unix.ST_NOSUID|unix.ST_NODEV|unix.ST_NOEXEC) != unix.ST_NOSUID|unix.ST_NODEV|unix.ST_NOEXEC || got&unix.ST_RDONLY != 0 {
		t.Errorf("statfs of the private TMPDIR %s: flags %#x, want nosuid,nodev,noexec, writable", tmp, got)
	}
	// Its own pid namespace: it is not pid 1 (the init is), its parent is
	// the init, and no process outside the run can be named or signalled.
	pids := strings.Fields(s.Do(map[string]any{"op": "pid"}).Data)
	if len(pids) != 2 || pids[1] != "1" || pids[0] == "1" {
		t.Errorf("pid, ppid in the run: %v, want the run's init as parent", pids)
	}
	for _, pid := range []int{launcherPID, os.Getpid()} {
		if r := s.Do(map[string]any{"op": "kill", "pid": pid, "sig": 0}); r.OK || r.Errno != "ESRCH" {
			t.Errorf("kill(%d, 0) of a process outside the run: %+v, want ESRCH (no such process there)", pid, r)
		}
	}
	// The init is not even visible to it (hidepid, not dumpable).
	if r := s.Do(map[string]any{"op": "lstat", "path": "/proc/1"}); r.OK || r.Errno != "ENOENT" {
		t.Errorf("lstat /proc/1 (the run's init): %+v", r)
	}
	// The granted devices work on their read-only, dev-enabled binds.
	if r := s.Do(map[string]any{"op": "write", "path": "/dev/null", "data": "x"}); !r.OK {
		t.Errorf("write /dev/null: %+v", r)
	}
	if r := s.Do(map[string]any{"op": "read", "path": "/dev/null"}); !r.OK {
		t.Errorf("read /dev/null: %+v", r)
	}
	if r := s.Do(map[string]any{"op": "hostname"}); !r.OK || r.Data == hostName || r.Data != "mcpwarden" {
		t.Errorf("host name %+v, want mcpwarden, not the host's %q", r, hostName)
	}
	if r := s.Do(map[string]any{"op": "ifaces"}); !r.OK || r.Data != "lo:up" {
		t.Errorf("network interfaces %+v, want loopback only, up", r)
	}
	// Its network tables are its own network namespace's: a listener of
	// the host's is not in them (without the namespace they are the
	// host's, a known limit).
	hostL, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostL.Close()
	hostPort := fmt.Sprintf(":%04X ", hostL.Addr().(*net.TCPAddr).Port)
	if r := s.Do(map[string]any{"op": "read", "path": "/proc/self/net/tcp"}); !r.OK || strings.Contains(r.Data, hostPort) {
		t.Errorf("/proc/self/net/tcp in the run: %+v; want its own table, without the host's listener on %s", r, hostPort)
	}
	// Page-cache residency: the kernel answers cachestat only for a file
	// the caller owns or may write, and the dedicated uid owns no host
	// file (without it, a server running as the runtime's owner learns
	// which pages other processes read: a known limit).
	if r := s.Do(map[string]any{"op": "cachestat", "path": b.Naive}); r.OK || r.Errno != "EPERM" {
		t.Errorf("cachestat of the runtime's executable: %+v, want EPERM", r)
	}
	if code := s.Close(); code != 0 {
		t.Fatalf("exit %d: %s", code, s.Stderr())
	}
	for _, l := range launchLayers(t, log) {
		for _, name := range []schema.LayerName{schema.LayerMountNS, schema.LayerPIDNS, schema.LayerIPCNS, schema.LayerUTSNS, schema.LayerNetNS, schema.LayerUserNS, schema.LayerIdentity} {
			if ly := layerOf(l, name); ly.State != schema.LayerOn {
				t.Errorf("%s record: layer %s is %+v, want on", l.Phase, name, ly)
			}
		}
	}
}

func envOf(t *testing.T, s *fencetest.Session, name string) string {
	t.Helper()
	for _, kv := range strings.Split(s.Do(map[string]any{"op": "env"}).Data, "\n") {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	t.Fatalf("the server has no %s", name)
	return ""
}

// TestNSNetworkGrantKeepsTheHostNetwork: a scope that grants TCP ports
// gets the host's network (no network namespace), and the record says why.
func TestNSNetworkGrantKeepsTheHostNetwork(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go acceptAll(l)
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	port := l.Addr().(*net.TCPAddr).Port
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "network": map[string]any{"connect_tcp": []int{port}}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log})
	if r := s.Do(map[string]any{"op": "connect", "addr": l.Addr().String()}); !r.OK {
		t.Errorf("granted connect to the host's loopback: %+v", r)
	}
	s.Close()
	for _, rec := range launchLayers(t, log) {
		if ly := layerOf(rec, schema.LayerNetNS); ly.State != schema.LayerDegraded || ly.Reason != "scope_grants_network,link_local_denied" {
			t.Errorf("netns layer %+v", ly)
		}
	}
}

// TestNSPlanting: symlinks and FIFOs made in the private TMPDIR cannot be
// moved or linked into the workspace, nor made there directly (Landlock);
// a file's bytes copied in stay a plain, unexecutable file. With the mount
// namespace TMPDIR is its own tmpfs (EXDEV). Without it TMPDIR and the
// workspace may share a file system: a lone symlink or FIFO still needs a
// right the workspace does not grant (EACCES), and a directory holding
// them would gain the workspace's MAKE_BLOCK, which Landlock refuses
// (EXDEV); a regular file the server wrote may be linked in.
func TestNSPlanting(t *testing.T) { fencetest.ForEachLayering(t, testNSPlanting) }

func testNSPlanting(t *testing.T, noNS bool) {
	s, w := startWriteSession(t, noNS)
	tmp := envOf(t, s, "TMPDIR")
	dir := filepath.Join(tmp, "plant")
	for _, req := range []map[string]any{
		{"op": "mkdir", "path": dir},
		{"op": "symlink", "path": filepath.Join(dir, "shadow"), "to": "/etc/shadow"},
		{"op": "symlink", "path": filepath.Join(dir, "out"), "to": w.secret},
		{"op": "mkfifo", "path": filepath.Join(dir, "fifo")},
		{"op": "symlink", "path": filepath.Join(tmp, "lone-link"), "to": w.secret},
		{"op": "write", "path": filepath.Join(tmp, "tool.sh"), "data": "#!/bin/sh\necho planted\n"},
	} {
		if r := s.Do(req); !r.OK {
			t.Fatalf("in its TMPDIR, %v: %+v", req, r)
		}
	}
	exdev, lone := []string{"EXDEV"}, []string{"EXDEV"}
	if !s.Namespaces {
		lone = []string{"EACCES"}
	}
	runCases(t, s, []fenceCase{
		{name: "rename a directory of links and a FIFO in", req: map[string]any{"op": "rename", "path": dir, "to": filepath.Join(w.allowed, "plant")}, errno: exdev, exact: true},
		{name: "rename a symlink in", req: map[string]any{"op": "rename", "path": filepath.Join(tmp, "lone-link"), "to": filepath.Join(w.allowed, "lone-link")}, errno: lone, exact: true},
		{name: "rename a FIFO in", req: map[string]any{"op": "rename", "path": filepath.Join(dir, "fifo"), "to": filepath.Join(w.allowed, "fifo")}, errno: lone, exact: true},
		{name: "exchange a symlink with a workspace file", req: map[string]any{"op": "renameat2", "path": filepath.Join(tmp, "lone-link"), "to": w.deep1, "flags": unix.RENAME_EXCHANGE}, errno: lone, exact: true},
		{name: "exchange the directory with a workspace directory", req: map[string]any{"op": "renameat2", "path": dir, "to": filepath.Join(w.allowed, "d1"), "flags": unix.RENAME_EXCHANGE}, errno: exdev, exact: true},
		{name: "hard link a symlink in", req: map[string]any{"op": "link", "path": filepath.Join(tmp, "lone-link"), "to": filepath.Join(w.allowed, "lone-link2")}, errno: lone, exact: true},
		{name: "hard link a regular file in", req: map[string]any{"op": "link", "path": filepath.Join(tmp, "tool.sh"), "to": filepath.Join(w.allowed, "tool-link.sh")}, errno: exdev, exact: true, wantOK: !s.Namespaces},
		{name: "run the linked file", req: map[string]any{"op": "exec", "path": filepath.Join(w.allowed, "tool-link.sh")}, errno: append([]string{"ENOENT"}, denied...), exact: true},
		{name: "copy: make the symlink in the workspace", req: map[string]any{"op": "symlink", "path": filepath.Join(w.allowed, "shadow"), "to": "/etc/shadow"}, errno: denied, exact: true},
		{name: "copy: make the FIFO in the workspace", req: map[string]any{"op": "mkfifo", "path": filepath.Join(w.allowed, "fifo2")}, errno: denied, exact: true},
		{name: "copy: a file's bytes", req: map[string]any{"op": "copy", "path": filepath.Join(tmp, "tool.sh"), "to": filepath.Join(w.allowed, "tool.sh")}, wantOK: true},
		{name: "run the copied file", req: map[string]any{"op": "exec", "path": filepath.Join(w.allowed, "tool.sh")}, errno: denied, exact: true},
	})
	s.Close()
	// On the host, nothing but the plain file arrived.
	ents, _ := os.ReadDir(w.allowed)
	for _, e := range ents {
		if e.Type()&(os.ModeSymlink|os.ModeNamedPipe) != 0 && e.Name() != "link-out.txt" && e.Name() != "dir-out" && e.Name() != "dir-sibling" {
			t.Errorf("planted in the workspace: %s (%v)", e.Name(), e.Type())
		}
		if e.Name() == "plant" {
			t.Errorf("the planted directory arrived")
		}
	}
	if st, err := os.Stat(filepath.Join(w.allowed, "tool.sh")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("the copied file: %v %v", st, err)
	}
}

// catAndLoader returns the host's cat (its real path) and the glibc ELF
// loader, which runs any ELF file it is given: a test skips where the
// loader's path is not known for the architecture.
func catAndLoader(t *testing.T) (cat, loader string) {
	t.Helper()
	cat = testenv.RequireCommand(t, "cat")
	cat, _ = filepath.EvalSymlinks(cat)
	loader = map[string]string{"amd64": "/lib64/ld-linux-x86-64.so.2", "arm64": "/lib/ld-linux-aarch64.so.1"}[runtime.GOARCH]
	if loader == "" {
		t.Skipf("no glibc loader path known for %s", runtime.GOARCH)
	}
	testenv.RequireFile(t, loader, "a glibc system")
	return cat, loader
}

// TestNSNoExecOfWorkspaceBytes: bytes written into the workspace do not
// run, not even through the ELF loader, which the runtime grants: the
// workspace is mounted noexec, so the loader cannot map them executable.
// (Landlock does not decide mmap: without the mount namespace this is the
// known gap docs/launcher.md names.)
func TestNSNoExecOfWorkspaceBytes(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	cat, loader := catAndLoader(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	// --allow-exec cat grants cat with its loader and libraries: the
	// loader is then a granted executable, and cat's bytes readable.
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, ExtraArgs: []string{"--allow-exec", "cat"}})
	payload := filepath.Join(w.allowed, "payload")
	if r := s.Do(map[string]any{"op": "copy", "path": cat, "to": payload}); !r.OK {
		t.Fatalf("copy the runtime's cat into the workspace: %+v", r)
	}
	if r := s.Do(map[string]any{"op": "exec", "path": cat, "args": []string{w.deep1}}); !r.OK || r.Data != "inside" {
		t.Fatalf("the granted cat does not run: %+v", r)
	}
	r := s.Do(map[string]any{"op": "exec", "path": loader, "args": []string{payload, w.deep1}})
	if r.OK || strings.Contains(r.Data, "inside") {
		t.Fatalf("the ELF loader ran workspace bytes: %+v", r)
	}
	if r := s.Do(map[string]any{"op": "exec", "path": payload, "args": []string{w.deep1}}); r.OK {
		t.Fatalf("workspace bytes ran: %+v", r)
	}
	s.Close()
}

// TestNSMemfdNoexec: the run's pid namespace has vm.memfd_noexec=2 (the
// host's stays as it is): a memfd can never be made executable there.
func TestNSMemfdNoexec(t *testing.T) {
	fencetest.RequireFence(t)
	if _, err := os.Stat("/proc/sys/vm/memfd_noexec"); err != nil {
		testenv.Missing(t, "the kernel has no vm.memfd_noexec (Linux 6.3+)")
	}
	nsenter := testenv.RequireCommand(t, "nsenter")
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base})
	if r := s.Do(map[string]any{"op": "ping"}); !r.OK {
		t.Fatal(r.Error)
	}
	server := s.HostPID(1) // the run's init
	// cat in the run's pid namespace (and the host's mounts) reads the
	// namespace's value.
	out, err := exec.Command(nsenter, "--target", strconv.Itoa(server), "--pid", "--", "cat", "/proc/sys/vm/memfd_noexec").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "2" {
		t.Errorf("vm.memfd_noexec in the run: %q %v, want 2", out, err)
	}
	host, _ := os.ReadFile("/proc/sys/vm/memfd_noexec")
	t.Logf("host vm.memfd_noexec: %s", strings.TrimSpace(string(host)))
	s.Close()
}

// TestNSIdentity: a root launcher runs the server as a dedicated uid of
// its own (not 0, not the owner), in a user namespace whose uid 0 maps to
// nothing on the host; files it creates in the write scope belong to
// --owner; a root-only 0600 file inside the scope stays unreadable (DAC
// now says no where Landlock says yes); the launch records name the uid
// and the owner.
func TestNSIdentity(t *testing.T) {
	// The owner is the base's by default, or chosen with --owner.
	t.Run("owner of the base", func(t *testing.T) { testNSIdentity(t, false) })
	t.Run("--owner", func(t *testing.T) { testNSIdentity(t, true) })
}

func testNSIdentity(t *testing.T, flag bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	const owner = 4242
	rootOnly := filepath.Join(w.allowed, "root-only.txt")
	ownerOnly := filepath.Join(w.allowed, "owner-only.txt")
	testenv.WriteFiles(t, map[string]string{rootOnly: "ROOT-SECRET-42", ownerOnly: "OWNER-DATA"})
	if err := os.Chmod(rootOnly, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ownerOnly, 0o600); err != nil {
		t.Fatal(err)
	}
	owned := []string{w.allowed, ownerOnly}
	var args []string
	if flag {
		args = []string{"--owner", fmt.Sprintf("%d:%d", owner, owner)}
	} else {
		owned = append(owned, w.base)
	}
	for _, p := range owned {
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log, ExtraArgs: args})
	runCases(t, s, []fenceCase{
		{name: "a root-only file in the scope", req: map[string]any{"op": "read", "path": rootOnly}, errno: []string{"EACCES"}, exact: true},
		{name: "the owner's own 0600 file", req: map[string]any{"op": "read", "path": ownerOnly}, wantOK: true, data: "OWNER-DATA"},
		{name: "create a file", req: map[string]any{"op": "write", "path": filepath.Join(w.allowed, "made.txt"), "data": "x"}, wantOK: true},
		{name: "mkdir", req: map[string]any{"op": "mkdir", "path": filepath.Join(w.allowed, "made.d")}, wantOK: true},
	})
	// The server's host identity.
	hostPID := s.HostPID(mustAtoi(t, strings.Fields(s.Do(map[string]any{"op": "pid"}).Data)[0]))
	uid := statusIDs(t, hostPID, "Uid:")
	if uid < launcher.RunUIDBase || uid >= launcher.RunUIDBase+launcher.RunUIDCount {
		t.Errorf("the server runs as host uid %d, want a dedicated one in [%d, %d)", uid, launcher.RunUIDBase, launcher.RunUIDBase+launcher.RunUIDCount)
	}
	// No capability it could use: none in any set that counts, and
	// no_new_privs, so no exec grants one (its bounding set, reset by the
	// kernel for a new user namespace, bounds nothing then).
	if caps := statusHex(t, hostPID, "CapEff:") | statusHex(t, hostPID, "CapPrm:") | statusHex(t, hostPID, "CapInh:") | statusHex(t, hostPID, "CapAmb:"); caps != 0 {
		t.Errorf("the server has capabilities %#x", caps)
	}
	if nnp := statusIDs(t, hostPID, "NoNewPrivs:"); nnp != 1 {
		t.Errorf("the server's no_new_privs is %d", nnp)
	}
	// And its bounding set is empty: the stage dropped every capability
	// up to the kernel's last one (it stops at the first it cannot name).
	if bnd := statusHex(t, hostPID, "CapBnd:"); bnd != 0 {
		t.Errorf("the server's bounding set is %#x", bnd)
	}
	// Its user namespace maps only the owner, to that uid: its uid 0 is no
	// host uid at all.
	m := s.Do(map[string]any{"op": "read", "path": "/proc/self/uid_map"})
	if f := strings.Fields(m.Data); !m.OK || len(f) != 3 || f[0] != strconv.Itoa(owner) || f[1] != strconv.Itoa(uid) || f[2] != "1" {
		t.Errorf("the server's uid_map %+v, want %d %d 1", m, owner, uid)
	}
	if r := s.Do(map[string]any{"op": "lstat", "path": filepath.Join(w.allowed, "made.txt")}); !r.OK || !strings.Contains(r.Data, fmt.Sprintf("uid=%d ", owner)) {
		t.Errorf("inside, the file it made: %+v, want it owned by %d (itself)", r, owner)
	}
	// The init runs as the same dedicated uid, without capabilities.
	helper := s.HelperPID()
	if got := statusIDs(t, helper, "Uid:"); got != uid {
		t.Errorf("the run's init runs as uid %d, want %d", got, uid)
	}
	if caps := statusHex(t, helper, "CapEff:") | statusHex(t, helper, "CapPrm:"); caps != 0 {
		t.Errorf("the run's init keeps capabilities %#x", caps)
	}
	if code := s.Close(); code != 0 {
		t.Fatalf("exit %d: %s", code, s.Stderr())
	}
	for _, p := range []string{filepath.Join(w.allowed, "made.txt"), filepath.Join(w.allowed, "made.d")} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != owner || sys.Gid != owner {
			t.Errorf("%s on the host is owned by %d:%d, want --owner %d:%d", filepath.Base(p), sys.Uid, sys.Gid, owner, owner)
		}
	}
	for _, l := range launchLayers(t, log) {
		if l.ServerUID != uid || l.FileOwner != fmt.Sprintf("%d:%d", owner, owner) {
			t.Errorf("%s record: server_uid %d, file_owner %q; want %d, %d:%d", l.Phase, l.ServerUID, l.FileOwner, uid, owner, owner)
		}
		if ly := layerOf(l, schema.LayerIdentity); ly.State != schema.LayerOn || ly.Reason != "dedicated_uid" {
			t.Errorf("identity layer %+v", ly)
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// statusIDs is the real id of a /proc/PID/status line (Uid:, Gid:).
func statusIDs(t *testing.T, pid int, key string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == key {
			return mustAtoi(t, f[1])
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return -1
}

func statusHex(t *testing.T, pid int, key string) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == key {
			v, err := strconv.ParseUint(f[1], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

// nobody is the unprivileged user the launcher runs as in these tests.
const nobody = 65534

// unprivilegedRun is a workspace, the binaries and a state directory that
// nobody can use: the launcher runs as nobody, not root.
type unprivilegedRun struct {
	bins               fencetest.Binaries
	base, state, scope string
	allowed, secret    string
}

func newUnprivilegedRun(t *testing.T, access string) *unprivilegedRun {
	t.Helper()
	fencetest.RequireFence(t) // root, to set it up
	testenv.RequireCommand(t, "setpriv")
	b := fencetest.Build(t)
	root, err := os.MkdirTemp("", "mcpwarden-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	u := &unprivilegedRun{base: filepath.Join(root, "base"), state: filepath.Join(root, "state")}
	u.allowed = filepath.Join(u.base, "allowed")
	u.secret = filepath.Join(root, "secret.txt")
	testenv.WriteFiles(t, map[string]string{filepath.Join(u.allowed, "a.txt"): "inside", u.secret: "NOBODY-SECRET-42"})
	for _, d := range []string{u.base, u.allowed, filepath.Join(u.allowed, "a.txt"), u.secret} {
		if err := os.Chown(d, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(u.state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(u.state, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	u.bins = fencetest.Binaries{Mcpwarden: filepath.Join(bin, "mcpwarden"), Fence: filepath.Join(bin, testenv.HelperName), Naive: filepath.Join(bin, "naiveserver")}
	u.bins.ExecStage = filepath.Join(bin, testenv.ExecStageName)
	for from, to := range map[string]string{b.Mcpwarden: u.bins.Mcpwarden, b.Fence: u.bins.Fence, b.ExecStage: u.bins.ExecStage, b.Naive: u.bins.Naive} {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	u.scope = fencetest.WriteScope(t, root, map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": access})
	if err := os.Chmod(u.scope, 0o644); err != nil {
		t.Fatal(err)
	}
	return u
}

// start runs the launcher as nobody, with wrapper (the program that
// becomes nobody) and attr.
func (u *unprivilegedRun) start(t *testing.T, wrapper []string, attr *syscall.SysProcAttr, extra ...string) *fencetest.Session {
	return fencetest.Start(t, u.bins, fencetest.StartOptions{
		Scope: u.scope, Base: u.base, AuditLog: filepath.Join(u.state, "audit.jsonl"),
		Wrapper: wrapper, SysProcAttr: attr,
		// A home nobody can use holds no configuration of root's.
		Env:       []string{"HOME=" + filepath.Dir(u.base)},
		ExtraArgs: append([]string{"--state-dir", u.state, "--cgroup=false"}, extra...),
	})
}

var asNobody = []string{"setpriv", "--reuid", strconv.Itoa(nobody), "--regid", strconv.Itoa(nobody), "--clear-groups", "--"}

// TestNSUnprivilegedLauncher: a launcher that is not root makes the same
// namespaces in a user namespace of its own (where this kernel allows it):
// the server is uid 0 there and nobody on the host, sees only its runtime
// and scope, and what it creates belongs to nobody.
func TestNSUnprivilegedLauncher(t *testing.T) {
	u := newUnprivilegedRun(t, "write")
	s := u.start(t, asNobody, nil)
	runCases(t, s, []fenceCase{
		{name: "read inside", req: map[string]any{"op": "read", "path": filepath.Join(u.allowed, "a.txt")}, wantOK: true, data: "inside"},
		{name: "write inside", req: map[string]any{"op": "write", "path": filepath.Join(u.allowed, "new.txt"), "data": "x"}, wantOK: true},
		{name: "the launcher's own file outside the scope", req: map[string]any{"op": "lstat", "path": u.secret}, errno: []string{"ENOENT"}, exact: true},
		{name: "the host's /etc/passwd", req: map[string]any{"op": "lstat", "path": "/etc/passwd"}, errno: []string{"ENOENT"}, exact: true},
		{name: "a process outside the run", req: map[string]any{"op": "kill", "pid": os.Getpid(), "sig": 0}, errno: []string{"ESRCH"}, exact: true},
		{name: "host name", req: map[string]any{"op": "hostname"}, wantOK: true, data: "mcpwarden"},
		{name: "network", req: map[string]any{"op": "ifaces"}, wantOK: true, data: "lo:up"},
	})
	if m := s.Do(map[string]any{"op": "read", "path": "/proc/self/uid_map"}); !m.OK || strings.Join(strings.Fields(m.Data), " ") != fmt.Sprintf("0 %d 1", nobody) {
		t.Errorf("the server's uid_map %+v, want 0 %d 1", m, nobody)
	}
	hostPID := s.HostPID(mustAtoi(t, strings.Fields(s.Do(map[string]any{"op": "pid"}).Data)[0]))
	if uid := statusIDs(t, hostPID, "Uid:"); uid != nobody {
		t.Errorf("the server runs as host uid %d, want %d", uid, nobody)
	}
	// Nothing in the run can make another user namespace: the limit in
	// the run's own is 0 (read from there).
	if nsenter, err := exec.LookPath("nsenter"); err != nil {
		testenv.Missing(t, "nsenter is not installed")
	} else if out, err := exec.Command(nsenter, "--target", strconv.Itoa(hostPID), "--user", "--", "cat", "/proc/sys/user/max_user_namespaces").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("user.max_user_namespaces in the run's user namespace: %q %v, want 0", out, err)
	}
	if code := s.Close(); code != 0 {
		t.Fatalf("exit %d: %s", code, s.Stderr())
	}
	if st, err := os.Stat(filepath.Join(u.allowed, "new.txt")); err != nil || st.Sys().(*syscall.Stat_t).Uid != nobody {
		t.Errorf("the file it created: %v %v", st, err)
	}
	for _, l := range launchLayers(t, filepath.Join(u.state, "audit.jsonl")) {
		for name, want := range map[schema.LayerName]string{schema.LayerUserNS: "launcher_userns", schema.LayerIdentity: "unprivileged_launcher", schema.LayerMountNS: ""} {
			if ly := layerOf(l, name); ly.State != schema.LayerOn || ly.Reason != want {
				t.Errorf("%s record: %s layer %+v, want on %q", l.Phase, name, ly, want)
			}
		}
		if l.ServerUID != nobody {
			t.Errorf("server_uid %d, want %d", l.ServerUID, nobody)
		}
	}
}

// inUserNSWithoutUserNS starts the wrapped launcher as nobody inside a
// user namespace whose user.max_user_namespaces is 0: no user namespace
// can be made below it, as on a host that restricts unprivileged user
// namespaces (Ubuntu 24.04's AppArmor, kernel.unprivileged_userns_clone=0).
// The limit is the namespace's own; the host's is not touched.
func inUserNSWithoutUserNS(t *testing.T) ([]string, *syscall.SysProcAttr) {
	sh := testenv.RequireCommand(t, "sh")
	setpriv := testenv.RequireCommand(t, "setpriv")
	wrapper := []string{sh, "-c", `echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"`, "sh", setpriv}
	wrapper = append(wrapper, asNobody[1:]...)
	attr := &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: nobody, HostID: nobody, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: nobody, HostID: nobody, Size: 1}},
		// The shell keeps capabilities in the new user namespace to set its limit.
		GidMappingsEnableSetgroups: true,
	}
	return wrapper, attr
}

// TestNSWithoutUserNamespaces: where an unprivileged launcher cannot make
// a user namespace, the run says so on stderr and in its records, and
// goes on with Landlock and seccomp (which still deny); with
// --require-namespaces, or a scope with require_isolation, it is refused
// with exit 69 and a message that says what is missing and what to do.
func TestNSWithoutUserNamespaces(t *testing.T) {
	u := newUnprivilegedRun(t, "read")
	wrapper, attr := inUserNSWithoutUserNS(t)
	s := u.start(t, wrapper, attr)
	runCases(t, s, []fenceCase{
		{name: "read inside", req: map[string]any{"op": "read", "path": filepath.Join(u.allowed, "a.txt")}, wantOK: true, data: "inside"},
		{name: "Landlock still denies outside", req: map[string]any{"op": "read", "path": u.secret}, errno: []string{"EACCES"}, exact: true},
	})
	if code := s.Close(); code != 0 {
		t.Fatalf("exit %d: %s", code, s.Stderr())
	}
	if !strings.Contains(s.Stderr(), "WARNING: no namespaces (userns_limit") {
		t.Errorf("the run did not say it has no namespaces: %s", s.Stderr())
	}
	for _, l := range launchLayers(t, filepath.Join(u.state, "audit.jsonl")) {
		for _, name := range []schema.LayerName{schema.LayerUserNS, schema.LayerMountNS, schema.LayerPIDNS, schema.LayerIPCNS, schema.LayerUTSNS, schema.LayerNetNS} {
			if ly := layerOf(l, name); ly.State != schema.LayerOff || ly.Reason != "userns_limit" {
				t.Errorf("%s record: %s layer %+v, want off userns_limit", l.Phase, name, ly)
			}
		}
		if ly := layerOf(l, schema.LayerLandlock); ly.State != schema.LayerOn {
			t.Errorf("landlock layer %+v", ly)
		}
	}

	// Required: refused, exit 69, nothing started.
	for _, c := range []struct {
		name  string
		extra []string
		scope string
	}{
		{"--require-namespaces", []string{"--require-namespaces"}, u.scope},
		{"require_isolation", nil, fencetest.WriteScope(t, filepath.Dir(u.scope), map[string]any{"allowed_paths": []string{"allowed"}, "require_isolation": true})},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.Chmod(c.scope, 0o644); err != nil {
				t.Fatal(err)
			}
			v := *u
			v.scope = c.scope
			s := v.start(t, wrapper, attr, c.extra...)
			code := s.Wait()
			if code != 69 {
				t.Fatalf("exit %d, want 69: %s", code, s.Stderr())
			}
			if !fencetest.ContainsAll(s.Stderr(), "requires namespaces", "userns_limit", "user.max_user_namespaces") {
				t.Errorf("the refusal does not say what is missing and how to fix it: %s", s.Stderr())
			}
			if strings.Contains(s.Stderr(), "[server ") {
				t.Errorf("the server ran: %s", s.Stderr())
			}
		})
	}
}

// TestNSRequireContradictions: --no-namespaces with a requirement of them,
// and --mode audit with --require-namespaces, are refused (exit 69).
func TestNSRequireContradictions(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "require_isolation": true})
	for _, extra := range [][]string{{"--no-namespaces"}, {"--mode", "audit"}} {
		s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, ExtraArgs: extra})
		if code := s.Wait(); code != 69 || !strings.Contains(s.Stderr(), "requires namespaces") {
			t.Errorf("%v with require_isolation: exit %d: %s", extra, code, s.Stderr())
		}
	}
}

// TestScopeCheckLayers: scope check --json lists every layer, in the
// launch records' order, as a run here would get them.
func TestScopeCheckLayers(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	for _, c := range []struct {
		extra   []string
		mountNS schema.LayerState
	}{{nil, schema.LayerOn}, {[]string{"--no-namespaces"}, schema.LayerOff}} {
		out, err := exec.Command(b.Mcpwarden, append([]string{"scope", "check", scope, "--base", w.base, "--json"}, c.extra...)...).Output()
		if err != nil {
			t.Fatalf("scope check %v: %v", c.extra, err)
		}
		var r struct {
			Layers []schema.Layer `json:"layers"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Layers) != len(schema.LayerNames) {
			t.Fatalf("layers %+v, want every one of %v", r.Layers, schema.LayerNames)
		}
		for i, ly := range r.Layers {
			if ly.Name != schema.LayerNames[i] {
				t.Errorf("layer %d is %s, want %s", i, ly.Name, schema.LayerNames[i])
			}
			if ly.Name == schema.LayerMountNS && ly.State != c.mountNS {
				t.Errorf("%v: mountns %+v, want %s", c.extra, ly, c.mountNS)
			}
		}
	}
	cmd := exec.Command(b.Mcpwarden, "scope", "check", scope, "--base", w.base, "--require-namespaces", "--no-namespaces")
	if err := cmd.Run(); exitCodeOf(err) != 69 {
		t.Errorf("scope check --require-namespaces --no-namespaces: %v, want exit 69", err)
	}
}

// TestNSSIGTERMStopsANodeServer: the run's init passes SIGTERM on to the
// server (pid 1 of a pid namespace drops a signal it has no handler for),
// so a node server that installs no SIGTERM handler still stops on it.
func TestNSSIGTERMStopsANodeServer(t *testing.T) {
	fencetest.RequireFence(t)
	node := testenv.RequireCommand(t, "node")
	b := fencetest.Build(t)
	w := newWorkspace(t)
	script := filepath.Join(t.TempDir(), "srv.js")
	testenv.WriteFiles(t, map[string]string{script: "process.stdin.on('data', () => process.stdout.write('{\"ok\":true}\\n'));\n"})
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, Command: []string{node, script}})
	if r := s.Do(map[string]any{"op": "ping"}); !r.OK {
		t.Fatalf("node server: %+v (%s)", r, s.Stderr())
	}
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.Wait(); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d after SIGTERM, want %d: %s", code, 128+int(syscall.SIGTERM), s.Stderr())
	}
}
