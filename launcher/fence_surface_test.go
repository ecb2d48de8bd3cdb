package launcher_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/launcher/serverlog"
)

// The kernel's other doors, tried by a naive server in both layerings:
// other syscall ABIs, socket families the scope grants nothing for, kernel
// interfaces no server needs, and the host files a server running as uid 0
// could write by DAC alone (under --no-namespaces with a root launcher the
// server is uid 0 without capabilities: root owns every sysctl, sysrq and
// cgroup file, so only Landlock stands between it and them).

// TestFenceSyscallABIs: the x32 ABI (bit 30 of the number) and the i386
// ABI (int 0x80 from the 64-bit server) answer ENOSYS, as does a number past
// the newest syscall; only the native ABI is checked argument by argument.
func TestFenceSyscallABIs(t *testing.T) { fencetest.ForEachLayering(t, testFenceSyscallABIs) }

func testFenceSyscallABIs(t *testing.T, noNS bool) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the x32 and i386 ABIs are x86_64's") // arm64's AArch32 is not callable from a 64-bit process
	}
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	abi := func(name string, nr int, args ...string) map[string]any {
		return map[string]any{"op": "abi_syscall", "name": name, "n": nr, "args": args}
	}
	enosys := []string{"ENOSYS"}
	runCases(t, s, []fenceCase{
		{name: "native getpid (the op works)", req: map[string]any{"op": "raw_syscall", "n": unix.SYS_GETPID}, wantOK: true},
		{name: "x32 getpid", req: abi("x32", unix.SYS_GETPID), errno: enosys, exact: true},
		{name: "x32 socket(AF_UNIX)", req: abi("x32", unix.SYS_SOCKET, "1", "1", "0"), errno: enosys, exact: true},
		{name: "x32 socket(AF_INET, SOCK_DGRAM)", req: abi("x32", unix.SYS_SOCKET, "2", "2", "0"), errno: enosys, exact: true},
		{name: "i386 getpid (int 0x80)", req: abi("i386", 20), errno: enosys, exact: true},
		{name: "i386 kill(1, 0)", req: abi("i386", 37, "1", "0"), errno: enosys, exact: true},
		{name: "i386 socket(AF_UNIX)", req: abi("i386", 359, "1", "1", "0"), errno: enosys, exact: true},
		{name: "i386 unshare(CLONE_NEWUSER)", req: abi("i386", 310, strconv.Itoa(unix.CLONE_NEWUSER)), errno: enosys, exact: true},
		{name: "a number past the table", req: map[string]any{"op": "raw_syscall", "n": 1000}, errno: enosys, exact: true},
		{name: "the last number below x32", req: map[string]any{"op": "raw_syscall", "n": 0x3fffffff}, errno: enosys, exact: true},
	})
}

// TestFenceSocketFamilies: without a network grant, socket() makes only
// what Landlock's TCP rules cover (AF_INET/AF_INET6 stream, TCP) and
// NETLINK_ROUTE; every other family and protocol is refused by the filter
// before any namespace is asked: MPTCP and SCTP (Landlock's TCP rules do
// not apply), UDP and UDP-Lite, ICMP ping sockets, raw and packet sockets,
// vsock (the hypervisor's host), the netlink families that list the host's
// sockets (NETLINK_SOCK_DIAG), read its audit log (NETLINK_AUDIT) or its
// device events (NETLINK_KOBJECT_UEVENT), and pathname unix sockets.
func TestFenceSocketFamilies(t *testing.T) { fencetest.ForEachLayering(t, testFenceSocketFamilies) }

func testFenceSocketFamilies(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	// A netlink socket of the host's (a daemon's, say) that the server
	// tries to send to: the kernel refuses unicasts between user sockets
	// of NETLINK_ROUTE without CAP_NET_ADMIN.
	nl, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nl)
	if err := unix.Bind(nl, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		t.Fatal(err)
	}
	nlAddr, err := unix.Getsockname(nl)
	if err != nil {
		t.Fatal(err)
	}
	sock := func(family, typ, proto int) map[string]any {
		return map[string]any{"op": "socket", "flags": family, "mode": typ, "n": proto}
	}
	eacces := []string{"EACCES"}
	const (
		mptcp       = 262
		udplite     = 136
		dccp        = 33
		sockDCCP    = 6
		afVSOCK     = 40
		afALG       = 38
		afXDP       = 44
		afKEY       = 15
		afTIPC      = 30
		afCAN       = 29
		afPACKET    = 17
		nlSockDiag  = 4
		nlAudit     = 9
		nlUevent    = 15
		nlGeneric   = 16
		nlNetfilter = 12
		ipprotoSMC  = 256
		afSMC       = 43
		afRDS       = 21
		afQIPCRTR   = 42
		afBluetooth = 31
	)
	runCases(t, s, []fenceCase{
		{name: "TCP (Landlock decides its connect and bind)", req: sock(unix.AF_INET, unix.SOCK_STREAM, 0), wantOK: true},
		{name: "NETLINK_ROUTE (getifaddrs)", req: sock(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE), wantOK: true},
		{name: "NETLINK_ROUTE to a host process's netlink socket", req: map[string]any{"op": "netlink_sendto", "n": nlAddr.(*unix.SockaddrNetlink).Pid}, errno: []string{"EPERM"}, exact: true},
		{name: "MPTCP", req: sock(unix.AF_INET, unix.SOCK_STREAM, mptcp), errno: eacces, exact: true},
		{name: "MPTCP over IPv6", req: sock(unix.AF_INET6, unix.SOCK_STREAM, mptcp), errno: eacces, exact: true},
		{name: "SCTP stream", req: sock(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP), errno: eacces, exact: true},
		{name: "SCTP seqpacket", req: sock(unix.AF_INET, unix.SOCK_SEQPACKET, unix.IPPROTO_SCTP), errno: eacces, exact: true},
		{name: "DCCP", req: sock(unix.AF_INET, sockDCCP, dccp), errno: eacces, exact: true},
		{name: "UDP", req: sock(unix.AF_INET, unix.SOCK_DGRAM, 0), errno: eacces, exact: true},
		{name: "UDP-Lite", req: sock(unix.AF_INET, unix.SOCK_DGRAM, udplite), errno: eacces, exact: true},
		{name: "ICMP ping socket", req: sock(unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP), errno: eacces, exact: true},
		{name: "ICMPv6 ping socket", req: sock(unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_ICMPV6), errno: eacces, exact: true},
		{name: "raw IP", req: sock(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP), errno: eacces, exact: true},
		{name: "packet", req: sock(afPACKET, unix.SOCK_RAW, 0), errno: eacces, exact: true},
		{name: "vsock stream", req: sock(afVSOCK, unix.SOCK_STREAM, 0), errno: eacces, exact: true},
		{name: "vsock datagram", req: sock(afVSOCK, unix.SOCK_DGRAM, 0), errno: eacces, exact: true},
		{name: "NETLINK_SOCK_DIAG (every socket of the host)", req: sock(unix.AF_NETLINK, unix.SOCK_RAW, nlSockDiag), errno: eacces, exact: true},
		{name: "NETLINK_AUDIT", req: sock(unix.AF_NETLINK, unix.SOCK_RAW, nlAudit), errno: eacces, exact: true},
		{name: "NETLINK_KOBJECT_UEVENT", req: sock(unix.AF_NETLINK, unix.SOCK_DGRAM, nlUevent), errno: eacces, exact: true},
		{name: "NETLINK_GENERIC", req: sock(unix.AF_NETLINK, unix.SOCK_RAW, nlGeneric), errno: eacces, exact: true},
		{name: "NETLINK_NETFILTER", req: sock(unix.AF_NETLINK, unix.SOCK_RAW, nlNetfilter), errno: eacces, exact: true},
		{name: "AF_ALG", req: sock(afALG, unix.SOCK_SEQPACKET, 0), errno: eacces, exact: true},
		{name: "AF_XDP", req: sock(afXDP, unix.SOCK_RAW, 0), errno: eacces, exact: true},
		{name: "AF_KEY", req: sock(afKEY, unix.SOCK_RAW, 2), errno: eacces, exact: true},
		{name: "TIPC", req: sock(afTIPC, unix.SOCK_RDM, 0), errno: eacces, exact: true},
		{name: "CAN", req: sock(afCAN, unix.SOCK_RAW, 1), errno: eacces, exact: true},
		{name: "unix stream (a pathname socket of the host)", req: sock(unix.AF_UNIX, unix.SOCK_STREAM, 0), errno: []string{"EPERM"}, exact: true},
		{name: "unix datagram", req: sock(unix.AF_UNIX, unix.SOCK_DGRAM, 0), errno: []string{"EPERM"}, exact: true},
		// Session 8 guards: SMC (IPPROTO_SMC over AF_INET since Linux
		// 6.11, or AF_SMC: a TCP connection Landlock's TCP rules do not
		// see), RDS, Qualcomm IPC, Bluetooth; TCP with the type's flags
		// still made.
		{name: "TCP, SOCK_NONBLOCK|SOCK_CLOEXEC", req: sock(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP), wantOK: true},
		{name: "IPPROTO_SMC", req: sock(unix.AF_INET, unix.SOCK_STREAM, ipprotoSMC), errno: eacces, exact: true},
		{name: "IPPROTO_SMC over IPv6", req: sock(unix.AF_INET6, unix.SOCK_STREAM, ipprotoSMC), errno: eacces, exact: true},
		{name: "TCP with junk above the protocol's low 16 bits", req: sock(unix.AF_INET, unix.SOCK_STREAM, 0x10000|unix.IPPROTO_TCP), errno: eacces, exact: true},
		{name: "AF_SMC", req: sock(afSMC, unix.SOCK_STREAM, 0), errno: eacces, exact: true},
		{name: "RDS", req: sock(afRDS, unix.SOCK_SEQPACKET, 0), errno: eacces, exact: true},
		{name: "QIPCRTR", req: sock(afQIPCRTR, unix.SOCK_DGRAM, 0), errno: eacces, exact: true},
		{name: "Bluetooth", req: sock(afBluetooth, unix.SOCK_STREAM, 0), errno: eacces, exact: true},
	})
}

// TestFenceKernelInterfaces: the kernel interfaces a server never needs
// (keyrings, userfaultfd, perf, bpf, the old and new mount API, new time
// and cgroup namespaces, setns through a pidfd, port I/O, clocks, modules,
// the kernel log) are refused by the filter before the kernel's own checks:
// EPERM, or ENOSYS for clone3 (whose flags the filter cannot read: glibc
// and Go fall back to clone, which it checks).
func TestFenceKernelInterfaces(t *testing.T) { fencetest.ForEachLayering(t, testFenceKernelInterfaces) }

func testFenceKernelInterfaces(t *testing.T, noNS bool) {
	s, _ := startWriteSession(t, noNS)
	var cases []fenceCase
	for _, name := range []string{"add_key", "keyctl", "request_key", "userfaultfd", "perf_event_open", "bpf",
		"fsopen", "fspick", "open_tree", "move_mount", "mount_setattr", "mount", "umount", "pivot_root", "chroot",
		"unshare_time", "unshare_cgroup", "unshare_user", "setns_pidfd", "iopl", "ioperm", "clock_settime",
		"settimeofday", "acct", "swapoff", "syslog", "kexec_load", "init_module", "delete_module", "reboot",
		"quotactl", "fanotify_init", "memfd_secret", "kcmp", "pidfd_getfd"} {
		cases = append(cases, fenceCase{name: name, req: map[string]any{"op": "kernel_call", "name": name}, errno: []string{"EPERM"}, exact: true})
	}
	cases = append(cases, fenceCase{name: "clone3", req: map[string]any{"op": "kernel_call", "name": "clone3"}, errno: []string{"ENOSYS"}, exact: true})
	runCases(t, s, cases)
}

// TestFenceHostFilesAsRoot: the host's sysctls, sysrq, kernel symbols and
// log, and the cgroup files of the run and of the launcher (its limits, its
// membership: a pid written to the launcher's cgroup.procs would leave the
// run's cgroup and its kill) cannot be opened for writing. Under
// --no-namespaces a root launcher's server is uid 0 without capabilities,
// which DAC lets write all of them: Landlock refuses (EACCES); with the
// namespaces they are not in the minimal root (ENOENT).
func TestFenceHostFilesAsRoot(t *testing.T) { fencetest.ForEachLayering(t, testFenceHostFilesAsRoot) }

func testFenceHostFilesAsRoot(t *testing.T, noNS bool) {
	s, _ := startWriteSession(t, noNS)
	write := func(p string) map[string]any { return map[string]any{"op": "open_write", "path": p} }
	read := func(p string) map[string]any { return map[string]any{"op": "read", "path": p} }
	var cases []fenceCase
	for _, c := range []fenceCase{
		{name: "write /proc/sysrq-trigger", req: write("/proc/sysrq-trigger"), errno: denied},
		{name: "write vm.drop_caches", req: write("/proc/sys/vm/drop_caches"), errno: denied},
		{name: "write kernel.core_pattern", req: write("/proc/sys/kernel/core_pattern"), errno: denied},
		{name: "write vm.overcommit_memory (granted for reading)", req: write("/proc/sys/vm/overcommit_memory"), errno: denied},
		{name: "write net.core.somaxconn (granted for reading)", req: write("/proc/sys/net/core/somaxconn"), errno: denied},
		{name: "write transparent huge pages (granted for reading)", req: write("/sys/kernel/mm/transparent_hugepage/enabled"), errno: denied},
		{name: "write /proc/self/oom_score_adj", req: write("/proc/self/oom_score_adj"), errno: denied},
		{name: "write /proc/self/mem", req: write("/proc/self/mem"), errno: denied},
		{name: "write /dev/kmsg", req: write("/dev/kmsg"), errno: denied},
		{name: "write the cgroup2 root's cgroup.procs", req: write("/sys/fs/cgroup/unified/cgroup.procs"), errno: denied},
		{name: "read /proc/kallsyms", req: read("/proc/kallsyms"), errno: denied},
		{name: "read /dev/kmsg", req: read("/dev/kmsg"), errno: denied},
		{name: "read /proc/1/environ", req: read("/proc/1/environ"), errno: denied},
	} {
		if exists(c.req["path"].(string)) { // a kernel without sysrq, say
			cases = append(cases, c)
		}
	}
	// Shared memory of the host: a file in /dev/shm is memory no limit of
	// the run bounds, and other processes' segments are there.
	if exists("/dev/shm") {
		cases = append(cases, fenceCase{name: "create a file in /dev/shm", req: map[string]any{"op": "write", "path": "/dev/shm/mcpwarden-fence-test", "data": "x"}, errno: denied})
	}
	r := s.Do(map[string]any{"op": "cgroup_dirs"})
	if !r.OK {
		t.Fatalf("the server cannot read its /proc/self/cgroup: %s %s", r.Errno, r.Error)
	}
	dirs := strings.Fields(r.Data)
	if noNS && len(dirs) == 0 {
		t.Fatalf("the server is in no cgroup of its own: /proc/self/cgroup gave %q", r.Data)
	}
	for _, d := range dirs {
		for _, f := range []string{"cgroup.procs", "cgroup.threads", "cgroup.kill", "cgroup.subtree_control", "pids.max", "memory.max", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "notify_on_release"} {
			if !exists(filepath.Join(d, f)) {
				continue // not a file of this hierarchy
			}
			cases = append(cases, fenceCase{name: "write the run's " + f + " in " + filepath.Base(filepath.Dir(d)), req: write(filepath.Join(d, f)), errno: denied})
		}
		cases = append(cases,
			fenceCase{name: "write the launcher's cgroup.procs in " + filepath.Base(filepath.Dir(d)), req: write(filepath.Join(filepath.Dir(d), "cgroup.procs")), errno: denied},
			fenceCase{name: "make a cgroup below the run's in " + filepath.Base(filepath.Dir(d)), req: map[string]any{"op": "mkdir", "path": filepath.Join(d, "escape")}, errno: denied},
		)
	}
	runCases(t, s, cases)
}

// TestServerStderrFlood: a server writing to stderr as fast as it can gets
// serverlog.Burst bytes onto the launcher's stderr and then
// serverlog.Rate a second; the rest is read and dropped (the server is
// never blocked), and mcpwarden says so and how much. On the code before,
// every byte reached the operator's log: a read-only server could fill the
// disk under the client's log file and spend the launcher's CPU, which is
// outside the run's cgroup.
func TestServerStderrFlood(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	start := time.Now()
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base})
	const flood = 16 << 20
	if r := s.Do(map[string]any{"op": "stderr_flood", "n": flood}); !r.OK {
		t.Fatalf("the flood did not finish: %s %s", r.Errno, r.Error)
	}
	if r := s.Do(map[string]any{"op": "ping"}); !r.OK {
		t.Fatal("the server stopped answering after its flood")
	}
	s.Close()
	elapsed := time.Since(start)
	shown, dropped, drops, conts := 0, 0, 0, 0
	for _, line := range strings.SplitAfter(s.Stderr(), "\n") {
		switch {
		case strings.HasPrefix(line, "[server naiveserver pid "):
			mark := strings.Index(line, "] ")
			if c := strings.Index(line, "]+ "); c >= 0 && (mark < 0 || c < mark) {
				mark = c + 1
				conts++
			}
			shown += len(line) - mark - 2
		case strings.Contains(line, "dropping it until it slows down"):
			drops++
		case strings.Contains(line, "bytes of the server's stderr were dropped"):
			var n int
			if _, err := fmt.Sscanf(line, "mcpwarden: WARNING: %d bytes", &n); err != nil {
				t.Fatalf("unreadable count in %q", line)
			}
			dropped += n
		}
	}
	// The most the bucket can have given in the time the whole test took.
	most := serverlog.Burst + int(elapsed.Seconds()+1)*serverlog.Rate
	if drops > int(elapsed.Seconds())/4+1 {
		t.Errorf("%d warnings that the stderr is dropped in %v: the warnings flood too", drops, elapsed.Round(time.Millisecond))
	}
	if shown > most {
		t.Errorf("%d of the %d bytes the server wrote reached the launcher's stderr in %v; at most %d may", shown, flood, elapsed.Round(time.Millisecond), most)
	}
	if drops == 0 || dropped == 0 {
		t.Errorf("no warning that the server's stderr is dropped (%d warnings, %d bytes counted)", drops, dropped)
	}
	// Each start of dropping ends the line it cut with a newline of its
	// own, and so does a partial line shown after IdleFlush (a writer
	// descheduled mid-line under load): each is followed by a continuation.
	if shown+dropped < flood || shown+dropped > flood+drops+conts {
		t.Errorf("%d bytes shown + %d dropped, the server wrote %d", shown, dropped, flood)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestFenceFilesystemIoctls: ioctls that change a file system through a
// directory the server may only read. Landlock checks mkdir, not
// BTRFS_IOC_SUBVOL_CREATE (a subvolume is a directory) nor
// FS_IOC_SET_ENCRYPTION_POLICY (an fscrypt policy on an empty directory,
// after which the host cannot make a file there: "Required key not
// available"). On main before, under --no-namespaces a read scope's server
// (uid 0, the owner) made subvolumes and snapshots in its read-only
// workspace on btrfs and encrypted an empty directory of it on ext4; with
// the namespaces the read-only mount said EROFS and the dedicated uid
// EACCES. Now the filter refuses them in both: ENOTTY (as on a file system
// that is not btrfs), EOPNOTSUPP (as without fscrypt).
func TestFenceFilesystemIoctls(t *testing.T) { fencetest.ForEachLayering(t, testFenceFilesystemIoctls) }

func testFenceFilesystemIoctls(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})

	bt := loopFS(t, "btrfs", testenv.RequireCommand(t, "mkfs.btrfs"), "-q", "-f")
	allowed := filepath.Join(bt, "base", "allowed")
	if err := os.MkdirAll(filepath.Dir(allowed), 0o755); err != nil {
		t.Fatal(err)
	}
	// The scope is a subvolume of its own, as home directories often are.
	if out, err := exec.Command(testenv.RequireCommand(t, "btrfs"), "subvolume", "create", allowed).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create: %v: %s", err, out)
	}
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: filepath.Join(bt, "base"), NoNamespaces: noNS})
	subvol := func(name string, how int) map[string]any {
		return map[string]any{"op": "btrfs_subvol", "path": allowed, "name": name, "flags": how}
	}
	enotty := []string{"ENOTTY"}
	runCases(t, s, []fenceCase{
		{name: "BTRFS_IOC_SUBVOL_CREATE in the read scope", req: subvol("planted", 0), errno: enotty, exact: true},
		{name: "BTRFS_IOC_SUBVOL_CREATE_V2 in the read scope", req: subvol("planted2", 1), errno: enotty, exact: true},
		{name: "BTRFS_IOC_SNAP_CREATE_V2 of the read scope into itself", req: subvol("snap", 2), errno: enotty, exact: true},
	})
	s.Close()
	if ents, _ := os.ReadDir(allowed); len(ents) != 0 {
		t.Errorf("the read scope gained %d entries: %v", len(ents), ents)
	}

	ext := loopFS(t, "ext4", testenv.RequireCommand(t, "mkfs.ext4"), "-q", "-F", "-O", "encrypt")
	empty := filepath.Join(ext, "base", "allowed", "empty")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	s = fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: filepath.Join(ext, "base"), NoNamespaces: noNS})
	runCases(t, s, []fenceCase{
		{name: "FS_IOC_SET_ENCRYPTION_POLICY on an empty directory of the read scope", req: map[string]any{"op": "fscrypt_policy", "path": empty}, errno: []string{"ENOTSUP"}, exact: true}, // EOPNOTSUPP
	})
	s.Close()
	if err := os.WriteFile(filepath.Join(empty, "host-file"), []byte("x"), 0o644); err != nil {
		t.Errorf("the host cannot write in the read scope's directory after the run: %v", err)
	}
}

// loopFS makes a 300 MiB file system of type fs with mkfs (and args) on a
// loop device and mounts it; it is unmounted when the test ends.
func loopFS(t *testing.T, fs, mkfs string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, fs+".img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(300 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command(mkfs, append(args, img)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", mkfs, err, out)
	}
	if out, err := exec.Command("mount", "-t", fs, "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		testenv.Missing(t, fmt.Sprintf("a loop-mounted %s file system (mount: %v: %s)", fs, err, out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", fs, err, out)
		}
	})
	return mnt
}

// TestFenceLandlockRecordsStay: a server may nest a Landlock domain of its
// own, but not one whose denials go unrecorded. With
// LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF its domain is the youngest to
// deny what the run's domain denies too, and the kernel writes no denial
// record for it: measured on main before, a server that opened a file
// outside its scope after making such a domain left no Landlock record in
// the audit log (one without it, flags 0, did). Now the filter refuses
// that flag and LOG_SUBDOMAINS_OFF (EPERM), in both layerings; flags 0
// and LOG_NEW_EXEC_ON still work.
func TestFenceLandlockRecordsStay(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceLandlockRecordsStay)
}

func testFenceLandlockRecordsStay(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	nested := func(flags int) map[string]any {
		return map[string]any{"op": "landlock_nested", "flags": flags, "path": w.deep1}
	}
	const (
		logSameExecOff   = 1 << 0
		logNewExecOn     = 1 << 1
		logSubdomainsOff = 1 << 2
	)
	runCases(t, s, []fenceCase{
		// The nested domain denies the read the run's domain allows.
		{name: "a nested domain that keeps its records", req: nested(0), wantOK: true, data: "EACCES"},
		{name: "a nested domain with LOG_NEW_EXEC_ON", req: nested(logNewExecOn), wantOK: true, data: "EACCES"},
		{name: "a nested domain with LOG_SAME_EXEC_OFF", req: nested(logSameExecOff), errno: []string{"EPERM"}, exact: true},
		{name: "a nested domain with LOG_SUBDOMAINS_OFF", req: nested(logSubdomainsOff), errno: []string{"EPERM"}, exact: true},
		{name: "the server's own reads still work", req: map[string]any{"op": "read", "path": w.deep1}, wantOK: true, data: "inside"},
	})
}

// TestFenceIoctlAllowlist: the filter lets through the ioctl requests the
// runtimes use and answers ENOTTY to the rest. On main before, these
// requests reached the file system, which alone decided: as the owner of
// a write scope's file on ext4, EXT4_IOC_MIGRATE got ext4's EINVAL (the
// file already has extents; a block-mapped file on an ext4 with extents
// would have been rewritten, a Known limit), EXT4_IOC_SWAP_BOOT and
// FIFREEZE got EPERM (a capability check). Now the filter refuses them in
// both layerings before the file system sees them. What the runtimes were measured using still
// works.
func TestFenceIoctlAllowlist(t *testing.T) { fencetest.ForEachLayering(t, testFenceIoctlAllowlist) }

func testFenceIoctlAllowlist(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	ext := loopFS(t, "ext4", testenv.RequireCommand(t, "mkfs.ext4"), "-q", "-F")
	allowed := filepath.Join(ext, "base", "allowed")
	file := filepath.Join(allowed, "data.bin")
	testenv.WriteFiles(t, map[string]string{file: strings.Repeat("x", 8192)})
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: filepath.Join(ext, "base"), NoNamespaces: noNS})
	io := func(path string, req uint32, write bool) map[string]any {
		m := map[string]any{"op": "ioctl", "path": path, "n": int(req)}
		if write {
			m["flags"] = 1
		}
		return m
	}
	enotty := []string{"ENOTTY"}
	runCases(t, s, []fenceCase{
		{name: "EXT4_IOC_MIGRATE on the server's own file", req: io(file, 0x6609, true), errno: enotty, exact: true},
		{name: "EXT4_IOC_SWAP_BOOT", req: io(file, 0x6611, true), errno: enotty, exact: true},
		{name: "FS_IOC_SETFSLABEL", req: io(allowed, 0x41009432, false), errno: enotty, exact: true},
		{name: "FIFREEZE", req: io(allowed, 0xc0045877, false), errno: enotty, exact: true},
		{name: "FS_IOC_GETFLAGS still works", req: io(file, unix.FS_IOC_GETFLAGS, false), wantOK: true},
		{name: "FIOCLEX still works", req: io(file, 0x5451, false), wantOK: true},
		{name: "FIONREAD on a file still works", req: io(file, 0x541b, false), wantOK: true},
		{name: "TCGETS on a file: the kernel's own ENOTTY", req: io(file, unix.TCGETS, false), errno: enotty, exact: true},
	})
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	if data, err := os.ReadFile(file); err != nil || len(data) != 8192 {
		t.Errorf("the file after the run: %d bytes, %v", len(data), err)
	}
}
