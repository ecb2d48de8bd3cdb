package launcher_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox/seccomp"
	"github.com/mcpwarden/mcpwarden/schema"
	"golang.org/x/sys/unix"
)

// These tests attack what Landlock ABI 7 does not decide and the seccomp
// layer closes. Each case was an escape before the seccomp allowlist.

// countingListener accepts TCP connections and counts them.
type countingListener struct {
	net.Listener
	accepted chan struct{}
}

func listenCounting(t *testing.T) *countingListener {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &countingListener{Listener: l, accepted: make(chan struct{}, 64)}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.accepted <- struct{}{}
			conn.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return c
}

// TestFenceTCPWithoutConnect: without a network grant, no TCP connection
// leaves and no socket listens, whatever call makes them, and no datagram
// reaches a pathname unix socket outside the scope.
func TestFenceTCPWithoutConnect(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	l := listenCounting(t)

	// A system logger's socket stand-in, outside the scope.
	logPath := filepath.Join(w.outside, "log.sock")
	logSock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: logPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer logSock.Close()

	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base})
	addr := l.Addr().String()
	runCases(t, s, []fenceCase{
		{name: "fast open sendto", req: map[string]any{"op": "tcp_fastopen_sendto", "addr": addr, "data": "TFO"}, errno: denied},
		{name: "fast open sendmsg", req: map[string]any{"op": "tcp_fastopen_sendmsg", "addr": addr, "data": "TFO"}, errno: denied},
		{name: "fast open sendmmsg", req: map[string]any{"op": "tcp_fastopen_sendmmsg", "addr": addr, "data": "TFO"}, errno: denied},
		{name: "TCP_FASTOPEN_CONNECT", req: map[string]any{"op": "tcp_fastopen_connect_opt"}, errno: denied},
		{name: "listen without bind", req: map[string]any{"op": "listen_autobind"}, errno: denied},
		{name: "unix datagram to a pathname socket", req: map[string]any{"op": "unix_dgram_sendto", "path": logPath, "data": "LOG-INJECTED"}, errno: denied},
		// A seqpacket pair ignores the destination: allowed, and harmless.
		{name: "seqpacket pair ignores the address", req: map[string]any{"op": "unix_seqpacket_sendto", "path": logPath, "data": "LOG-INJECTED"}, wantOK: true},
	})
	select {
	case <-l.accepted:
		t.Error("a TCP connection reached the listener without a grant")
	default:
	}
	if err := logSock.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, _, err := logSock.ReadFrom(buf); err == nil {
		t.Errorf("a datagram reached the socket outside the scope: %q", buf[:n])
	}
}

// metaDenied are the answers to a metadata change the fence refuses:
// seccomp's EPERM, Landlock's EACCES, or, with the namespace layer, a file
// the minimal root does not have (ENOENT) or mounts read-only (EROFS).
var metaDenied = []string{"EPERM", "EACCES", "ENOENT", "EROFS"}

// TestFenceMetadataReadScope: a read scope changes no metadata at all, and
// nothing outside the scope by path.
func TestFenceMetadataReadScope(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	requireUserXattr(t, w.secret)
	before := snapshot(t, w.secret, w.deep1)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base})
	inside := w.deep1
	runCases(t, s, []fenceCase{
		{name: "times by path outside", req: map[string]any{"op": "utimes_path", "path": w.secret}, errno: metaDenied},
		{name: "times by path inside", req: map[string]any{"op": "utimes_path", "path": inside}, errno: metaDenied},
		{name: "times through a read-only descriptor", req: map[string]any{"op": "futimens", "path": inside}, errno: metaDenied},
		{name: "xattr by path outside", req: map[string]any{"op": "setxattr", "path": w.secret, "value": "x"}, errno: metaDenied},
		{name: "xattr by path inside", req: map[string]any{"op": "setxattr", "path": inside, "value": "x"}, errno: metaDenied},
		{name: "setxattrat outside", req: map[string]any{"op": "setxattrat", "path": w.secret, "value": "x"}, errno: metaDenied},
		{name: "xattr through a descriptor", req: map[string]any{"op": "fsetxattr", "path": inside, "value": "x"}, errno: metaDenied},
		{name: "xattr removed outside", req: map[string]any{"op": "removexattr", "path": w.secret}, errno: metaDenied},
		{name: "xattr read outside", req: map[string]any{"op": "getxattr", "path": w.secret}, errno: append([]string{"ENOTSUP", "EOPNOTSUPP"}, metaDenied...)},
		{name: "ACL outside (a chmod)", req: map[string]any{"op": "setacl", "path": w.secret, "mode": 0o777}, errno: append([]string{"ENOTSUP", "EOPNOTSUPP"}, metaDenied...)},
		{name: "fchmod inside", req: map[string]any{"op": "fchmod", "path": inside, "mode": 0o777}, errno: metaDenied},
		// (ENOENT: a minimal root that hides the file refuses the open first.)
		{name: "fchmodat2 on an O_PATH descriptor", req: map[string]any{"op": "fchmodat2_empty_path", "path": w.secret, "mode": 0o777}, errno: metaDenied},
		{name: "fchown inside", req: map[string]any{"op": "fchown", "path": inside}, errno: metaDenied},
		{name: "chown by path outside", req: map[string]any{"op": "chown_path", "path": w.secret}, errno: metaDenied},
		{name: "chattr inside", req: map[string]any{"op": "chattr", "path": inside, "flags": 0x80 /* FS_NOATIME_FL */}, errno: metaDenied},
	})
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	if after := snapshot(t, w.secret, w.deep1); after != before {
		t.Errorf("metadata changed:\nbefore %s\nafter  %s", before, after)
	}
}

// TestFenceMetadataWriteScope: a write scope creates files, but no set-id
// file, and still changes no metadata by path or (without a dedicated uid)
// by descriptor.
func TestFenceMetadataWriteScope(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	requireUserXattr(t, w.secret)
	before := snapshot(t, w.secret)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base})
	in := func(n string) string { return filepath.Join(w.allowed, n) }
	runCases(t, s, []fenceCase{
		{name: "create plain", req: map[string]any{"op": "create_mode", "path": in("plain"), "mode": 0o644}, wantOK: true, data: "644"},
		{name: "create set-uid", req: map[string]any{"op": "create_mode", "path": in("suid"), "mode": 0o4755}, errno: []string{"EPERM"}},
		{name: "create set-gid", req: map[string]any{"op": "create_mode", "path": in("sgid"), "mode": 0o2755}, errno: []string{"EPERM"}},
		{name: "mknod set-uid", req: map[string]any{"op": "mknod_mode", "path": in("suid-mknod"), "mode": 0o4755}, errno: []string{"EPERM"}},
		{name: "O_TMPFILE set-uid", req: map[string]any{"op": "tmpfile_mode", "path": w.allowed, "mode": 0o4700}, errno: []string{"EPERM"}},
		{name: "fchmod set-uid", req: map[string]any{"op": "fchmod", "path": in("plain"), "mode": 0o4755}, errno: []string{"EPERM"}},
		// Landlock checked the open (read-only), not the fchmod: a server
		// running as the owner of its runtime could make it world-writable.
		{name: "fchmod of the runtime's executable, read-only descriptor", req: map[string]any{"op": "fchmod", "path": b.Naive, "mode": 0o755}, errno: metaDenied},
		{name: "ACL inside", req: map[string]any{"op": "setacl", "path": in("plain"), "mode": 0o777}, errno: append([]string{"ENOTSUP", "EOPNOTSUPP"}, metaDenied...)},
		{name: "xattr inside", req: map[string]any{"op": "setxattr", "path": in("plain"), "value": "x"}, errno: metaDenied},
		{name: "times by path outside", req: map[string]any{"op": "utimes_path", "path": w.secret}, errno: metaDenied},
		{name: "xattr by path outside", req: map[string]any{"op": "setxattr", "path": w.secret, "value": "x"}, errno: metaDenied},
		{name: "ACL outside", req: map[string]any{"op": "setacl", "path": w.secret, "mode": 0o777}, errno: append([]string{"ENOTSUP", "EOPNOTSUPP"}, metaDenied...)},
	})
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	for _, n := range []string{"suid", "sgid", "suid-mknod"} {
		if st, err := os.Stat(in(n)); err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s exists with mode %v", n, st.Mode())
		}
	}
	if after := snapshot(t, w.secret); after != before {
		t.Errorf("metadata outside changed:\nbefore %s\nafter  %s", before, after)
	}
}

// TestFenceExecOutsideTheRuntime: no bytes the server wrote run through a
// memfd, and no child gains capabilities in a new user namespace.
func TestFenceExecOutsideTheRuntime(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base})
	runCases(t, s, []fenceCase{
		{name: "a spawned child of the runtime still runs", req: map[string]any{"op": "spawn"}, wantOK: true},
		{name: "exec of a plain memfd", req: map[string]any{"op": "memfd_exec", "flags": 0}, errno: denied},
		{name: "exec of a memfd with MFD_EXEC", req: map[string]any{"op": "memfd_exec", "flags": unix.MFD_EXEC}, errno: denied},
		{name: "exec of a sealed memfd", req: map[string]any{"op": "memfd_exec", "flags": unix.MFD_NOEXEC_SEAL}, errno: denied},
		{name: "execveat of a memfd", req: map[string]any{"op": "execveat_memfd"}, errno: denied},
		{name: "child in a new user namespace", req: map[string]any{"op": "userns_child"}, errno: denied},
		{name: "child in new user and mount namespaces", req: map[string]any{"op": "userns_child", "flags": unix.CLONE_NEWNS | unix.CLONE_NEWNET}, errno: denied},
	})
}

// TestFenceOtherProcesses: a process outside the run with the same uid
// keeps its limits, priority and CPUs, and is neither traced, read, nor
// signalled (not even through SIGIO, which Landlock's signal scope also
// covers); IPC objects and watches outside the run are out of reach; a
// pidfd tells nothing of a host process (PIDFD_GET_INFO, ENOTTY without
// the run's pid namespace); no personality, tty injection or core dump.
func TestFenceOtherProcesses(t *testing.T) { fencetest.ForEachLayering(t, testFenceOtherProcesses) }

func testFenceOtherProcesses(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	// The victim has no capabilities, like the server: the capability LSM
	// already refuses a process with fewer capabilities changing the
	// priority of one with more, so a root victim would prove nothing.
	testenv.RequireCommand(t, "setpriv")
	victim := exec.Command("setpriv", "--bounding-set=-all", "--inh-caps=-all", "--", "sleep", "300")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = victim.Process.Kill(); _ = victim.Wait() }()
	pid := victim.Process.Pid
	beforeLimits, beforeNice := limitsOf(t, pid)

	// A key nobody uses (a run that crashed may have left one behind).
	var key, shmID int
	var err error
	for i := 0; i < 64; i++ {
		key = os.Getpid()<<8 | i
		if shmID, err = unix.SysvShmGet(key, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o600); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("shmget: %v", err)
	}
	defer func() { _, _ = unix.SysvShmCtl(shmID, unix.IPC_RMID, nil) }()
	seg, err := unix.SysvShmAttach(shmID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	copy(seg, "SHM-SECRET-42")
	defer func() { _ = unix.SysvShmDetach(seg) }()
	msgID, _, e := unix.Syscall(unix.SYS_MSGGET, uintptr(key), unix.IPC_CREAT|unix.IPC_EXCL|0o600, 0)
	if e != 0 {
		t.Fatalf("msgget: %v", e)
	}
	defer func() { _, _, _ = unix.Syscall(unix.SYS_MSGCTL, msgID, unix.IPC_RMID, 0) }()
	mq := fmt.Sprintf("/mcpwarden-test-%d", os.Getpid())
	mqName := append([]byte(mq[1:]), 0)
	mqFD, _, e := unix.Syscall6(unix.SYS_MQ_OPEN, uintptr(unsafe.Pointer(&mqName[0])), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600, 0, 0, 0)
	if e != 0 {
		t.Fatalf("mq_open: %v", e)
	}
	defer func() {
		unix.Close(int(mqFD))
		_, _, _ = unix.Syscall(unix.SYS_MQ_UNLINK, uintptr(unsafe.Pointer(&mqName[0])), 0, 0)
	}()

	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	gone := append([]string{"ENOENT", "ESRCH"}, denied...) // another ipc, mount or pid namespace also answers
	// Without a pid namespace the victim is reachable by pid: each layer
	// named must say no on its own.
	pidInfo := fenceCase{name: "PIDFD_GET_INFO of another process", req: map[string]any{"op": "pidfd_info", "pid": pid}, errno: []string{"ENOTTY"}, exact: true}
	if !noNS {
		pidInfo.errno = []string{"ESRCH"} // no such pid in the run's pid namespace
	}
	runCases(t, s, []fenceCase{
		pidInfo,
		{name: "a namespace of another process through its pidfd", req: map[string]any{"op": "pidfd_ns", "pid": pid, "flags": 3 /* PIDFD_GET_MNT_NAMESPACE */}, errno: append([]string{"ENOTTY"}, gone...)}, // not on the ioctl allowlist
		{name: "rt_sigqueueinfo to another process", req: map[string]any{"op": "signal_other", "pid": pid, "sig": int(unix.SIGTERM)}, errno: gone},
		{name: "tgkill of another process", req: map[string]any{"op": "signal_other", "pid": pid, "sig": int(unix.SIGTERM), "n": 1}, errno: gone},
		{name: "pidfd_send_signal to another process", req: map[string]any{"op": "pidfd_signal", "pid": pid, "sig": int(unix.SIGTERM)}, errno: gone},
		{name: "ptrace attach of another process", req: map[string]any{"op": "ptrace", "pid": pid, "flags": 0}, errno: gone},
		{name: "ptrace seize of another process", req: map[string]any{"op": "ptrace", "pid": pid, "flags": 1}, errno: gone},
		{name: "ptrace of the run's init (pid 1)", req: map[string]any{"op": "ptrace", "pid": 1, "flags": 1}, errno: gone},
		{name: "PTRACE_TRACEME", req: map[string]any{"op": "ptrace", "flags": 2}, errno: []string{"EPERM"}},
		{name: "process_vm_readv of another process", req: map[string]any{"op": "process_vm_readv", "pid": pid}, errno: gone},
		{name: "process_vm_readv of the run's init", req: map[string]any{"op": "process_vm_readv", "pid": 1}, errno: gone},
		{name: "personality READ_IMPLIES_EXEC", req: map[string]any{"op": "personality", "flags": 0x0400000}, errno: []string{"EPERM"}, exact: true},
		{name: "personality ADDR_NO_RANDOMIZE", req: map[string]any{"op": "personality", "flags": 0x0040000}, errno: []string{"EPERM"}, exact: true},
		{name: "TIOCSTI on stdin", req: map[string]any{"op": "tty_inject", "fd": 0}, errno: []string{"EPERM"}, exact: true},
		{name: "TIOCLINUX on stderr", req: map[string]any{"op": "tty_inject", "fd": 2, "n": 1}, errno: []string{"EPERM"}, exact: true},
		{name: "the controlling tty", req: map[string]any{"op": "tty_inject", "path": "/dev/tty"}, errno: append([]string{"ENXIO"}, denied...)},
		{name: "raise RLIMIT_CORE", req: map[string]any{"op": "core_limit"}, errno: []string{"EPERM"}, exact: true},
		// Guards: the server's RLIMIT_RTPRIO and RLIMIT_NICE are 0 (hard
		// too), whatever the launcher's; no SCHED_FIFO.
		{name: "raise RLIMIT_RTPRIO, then SCHED_FIFO", req: map[string]any{"op": "raise_sched_limit", "name": "rtprio"}, errno: []string{"EPERM"}, exact: true},
		{name: "raise RLIMIT_NICE", req: map[string]any{"op": "raise_sched_limit", "name": "nice"}, errno: []string{"EPERM"}, exact: true},
		{name: "prlimit of another process", req: map[string]any{"op": "prlimit_other", "pid": pid}, errno: gone},
		{name: "setpriority of another process", req: map[string]any{"op": "setpriority_other", "pid": pid}, errno: gone},
		{name: "sched_setaffinity of another process", req: map[string]any{"op": "sched_setaffinity_other", "pid": pid}, errno: gone},
		{name: "sched_setscheduler of another process", req: map[string]any{"op": "sched_setscheduler_other", "pid": pid}, errno: gone},
		{name: "ioprio_set of another process", req: map[string]any{"op": "ioprio_set_other", "pid": pid}, errno: gone},
		{name: "SysV shared memory outside the run", req: map[string]any{"op": "shm_read", "n": key}, errno: gone},
		{name: "SysV message queue outside the run", req: map[string]any{"op": "msgget", "n": key}, errno: gone},
		// Landlock already refuses this one (mqueue files have a path).
		{name: "POSIX message queue outside the run", req: map[string]any{"op": "mq_open", "name": mq[1:]}, errno: gone},
		{name: "inotify on a directory outside the scope", req: map[string]any{"op": "inotify_watch", "path": w.outside}, errno: gone},
	})
	// SIGIO (here SIGTERM through F_SETSIG) to the owner set with
	// F_SETOWN: the write that raises it succeeds; the signal must not
	// arrive (Landlock's signal scope decides file_send_sigiotask too).
	for _, owner := range []int{pid, -pid} {
		if r := s.Do(map[string]any{"op": "sigio_other", "pid": owner, "sig": int(unix.SIGTERM)}); r.OK {
			t.Logf("F_SETOWN %d and a write: allowed; the signal must not arrive", owner)
		} else if !slices.Contains(gone, r.Errno) {
			t.Errorf("F_SETOWN %d: %+v", owner, r)
		}
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	if !alive(pid) {
		t.Fatalf("ESCAPE: the process outside the run was killed")
	}
	if afterLimits, afterNice := limitsOf(t, pid); afterLimits != beforeLimits || afterNice != beforeNice {
		t.Errorf("the process outside the run changed: limits %q → %q, nice %s → %s", beforeLimits, afterLimits, beforeNice, afterNice)
	}
}

// limitsOf returns pid's open-files limit line and nice value.
func limitsOf(t *testing.T, pid int) (string, string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	var files string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Max open files") {
			files = strings.Join(strings.Fields(l), " ")
		}
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
	return files, f[16] // field 19 (nice), counted after the command name
}

// requireUserXattr sets user.mcpwarden on path (the file system must take
// user xattrs for the xattr cases to mean anything).
func requireUserXattr(t *testing.T, path string) {
	t.Helper()
	if err := unix.Setxattr(path, "user.mcpwarden", []byte("XATTR-SECRET-42"), 0); err != nil {
		t.Fatalf("the test file system takes no user xattrs (%v): run the tests on ext4, xfs or tmpfs", err)
	}
}

// snapshot describes the metadata of paths: mode, owner, times, xattrs.
func snapshot(t *testing.T, paths ...string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s mode=%o uid=%d gid=%d mtime=%d.%d atime=%d.%d", filepath.Base(p), st.Mode, st.Uid, st.Gid, st.Mtim.Sec, st.Mtim.Nsec, st.Atim.Sec, st.Atim.Nsec)
		buf := make([]byte, 1024)
		if n, err := unix.Llistxattr(p, buf); err == nil {
			for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
				v := make([]byte, 256)
				m, _ := unix.Lgetxattr(p, name, v)
				if m < 0 {
					m = 0
				}
				fmt.Fprintf(&b, " %s=%q", name, v[:m])
			}
		}
		b.WriteString("; ")
	}
	return b.String()
}

// TestLaunchRecordsReportTheSeccompLayer: both launch records name the
// seccomp layer: on, or degraded when the scope lets io_uring through.
func TestLaunchRecordsReportTheSeccompLayer(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	for _, tt := range []struct {
		name   string
		scope  map[string]any
		extra  []string
		state  string
		reason string
	}{
		{"strict", map[string]any{"allowed_paths": []string{"allowed"}}, nil, "on", ""},
		{"io_uring granted", map[string]any{"allowed_paths": []string{"allowed"}, "allow_io_uring": true}, nil, "degraded", "io_uring_allowed"},
		{"audit mode", map[string]any{"allowed_paths": []string{"allowed"}}, []string{"--mode", "audit"}, "off", "audit_mode"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorkspace(t)
			log := filepath.Join(t.TempDir(), "audit.jsonl")
			scope := fencetest.WriteScope(t, t.TempDir(), tt.scope)
			s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log, ExtraArgs: tt.extra})
			if r := s.Do(map[string]any{"op": "ping"}); !r.OK {
				t.Fatalf("ping: %+v (stderr %s)", r, s.Stderr())
			}
			s.Close()
			recs := readRecords(t, log)
			if len(recs) != 2 {
				t.Fatalf("%d records", len(recs))
			}
			for _, rec := range recs {
				var ev struct {
					Launch struct {
						Layers []struct{ Name, State, Reason string } `json:"layers"`
					} `json:"launch"`
				}
				if err := json.Unmarshal([]byte(rec.raw), &ev); err != nil {
					t.Fatal(err)
				}
				found := false
				for _, l := range ev.Launch.Layers {
					if l.Name == "seccomp" {
						found = true
						if l.State != tt.state || l.Reason != tt.reason {
							t.Errorf("seccomp layer %+v, want %s/%q", l, tt.state, tt.reason)
						}
					}
				}
				if !found {
					t.Errorf("no seccomp layer in %s", rec.raw)
				}
			}
		})
	}
}

// TestSeccompOptionsFollowTheScope: the filter's options come from the
// scope's mode and grants only; the layer fields are left to the layers.
func TestSeccompOptionsFollowTheScope(t *testing.T) {
	read := &schema.CanonicalScope{AccessMode: schema.AccessRead}
	write := &schema.CanonicalScope{AccessMode: schema.AccessWrite}
	tests := []struct {
		name  string
		scope *schema.CanonicalScope
		rs    ruleset.Ruleset
		want  seccomp.Options
	}{
		{"read, nothing granted", read, ruleset.Ruleset{BlockIOUring: true}, seccomp.Options{}},
		{"write", write, ruleset.Ruleset{BlockIOUring: true}, seccomp.Options{WriteScope: true}},
		{"connect grant", read, ruleset.Ruleset{BlockIOUring: true, ConnectTCP: []uint16{443}}, seccomp.Options{AllowUDP: true}},
		{"bind grant", read, ruleset.Ruleset{BlockIOUring: true, BindTCP: []uint16{8080}}, seccomp.Options{AllowUDP: true, AllowListen: true}},
		{"io_uring", read, ruleset.Ruleset{}, seccomp.Options{AllowIOUring: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := launcher.SeccompOptions(tt.scope, &tt.rs); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		mode  schema.RunMode
		o     seccomp.Options
		state schema.LayerState
	}{
		{schema.ModeEnforce, seccomp.Options{}, schema.LayerOn},
		{schema.ModeEnforce, seccomp.Options{AllowUDP: true, WriteScope: true}, schema.LayerOn},
		{schema.ModeEnforce, seccomp.Options{AllowIOUring: true}, schema.LayerDegraded},
		{schema.ModeAudit, seccomp.Options{}, schema.LayerOff},
	} {
		if l := launcher.SeccompLayer(tt.mode, tt.o); l.Name != schema.LayerSeccomp || l.State != tt.state {
			t.Errorf("SeccompLayer(%s, %+v) = %+v, want %s", tt.mode, tt.o, l, tt.state)
		}
	}
}
