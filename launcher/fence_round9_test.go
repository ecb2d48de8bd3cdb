package launcher_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// Session 9's attacks on the fence: what leaked (each fails on the code
// before) and the guards that held.

// TestFenceHostDevices: the devices the runtime profile grants
// (/dev/null, /dev/zero) are the host's device nodes, bound into the
// minimal root. Their mounts were read-write, so a server with a
// dedicated uid set the host's /dev/null and /dev/zero times to now
// (utimensat with a NULL times pointer needs only the right to write the
// file, which a 0666 device gives everyone; the filter lets times through
// with the mount namespace). Now the binds are read-only (EROFS) and
// noexec; reading and writing the devices still works (the kernel does not
// ask a mount's permission to write a device). Under --no-namespaces the
// filter refuses times by path and, without a dedicated uid, by
// descriptor (EPERM).
func TestFenceHostDevices(t *testing.T) { fencetest.ForEachLayering(t, testFenceHostDevices) }

func testFenceHostDevices(t *testing.T, noNS bool) {
	s, _ := startWriteSession(t, noNS)
	refused := []string{"EROFS"}
	if noNS {
		refused = []string{"EPERM"}
	}
	var cases []fenceCase
	for _, dev := range []string{"/dev/null", "/dev/zero"} {
		cases = append(cases,
			fenceCase{name: "write " + dev, req: map[string]any{"op": "append", "path": dev, "data": "x"}, wantOK: true},
			fenceCase{name: "times of " + dev + " set to now by path", req: map[string]any{"op": "touch_now", "path": dev}, errno: refused, exact: true},
			fenceCase{name: "times of " + dev + " set to now through a descriptor open for writing", req: map[string]any{"op": "touch_now", "path": dev, "n": 1}, errno: refused, exact: true},
			fenceCase{name: "times of " + dev + " set by path", req: map[string]any{"op": "utimes_path", "path": dev}, errno: append([]string{"EPERM"}, refused...), exact: true},
			fenceCase{name: "chmod " + dev + " 0600", req: map[string]any{"op": "chmod_mode", "path": dev, "mode": 0o600}, errno: append([]string{"EPERM"}, refused...), exact: true},
		)
	}
	cases = append(cases, fenceCase{name: "read /dev/null", req: map[string]any{"op": "read", "path": "/dev/null"}, wantOK: true})
	runCases(t, s, cases)
	if !noNS {
		for _, dev := range []string{"/dev/null", "/dev/zero"} {
			r := s.Do(map[string]any{"op": "statfs", "path": dev})
			var typ, fl uint64
			if _, err := fmt.Sscanf(r.Data, "type=%x flags=%x", &typ, &fl); !r.OK || err != nil {
				t.Fatalf("statfs %s: %+v", dev, r)
			}
			if want := uint64(unix.ST_RDONLY | unix.ST_NOSUID | unix.ST_NOEXEC); fl&want != want || fl&unix.ST_NODEV != 0 {
				t.Errorf("statfs %s: flags %#x, want read-only, nosuid, noexec, not nodev", dev, fl)
			}
		}
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
}

// TestFenceEnvPasswordVariables: variables named *_PWD hold passwords
// (MYSQL_PWD is the mysql client's, read by every libmysqlclient tool;
// DB_PWD, REDIS_PWD ... by convention), and values carry them without a
// USER:PASSWORD@ (a JDBC URL's &password=, an ADO.NET or ODBC connection
// string's ;Password=) or are credentials themselves (a Slack or Discord
// webhook URL): they reached the server, which read them from its
// environment. Now they are held back; the working directory's PWD and
// OLDPWD and a plain URL still pass.
func TestFenceEnvPasswordVariables(t *testing.T) {
	s := startEnvSession(t, []string{"MYSQL_PWD=MYSQL-SECRET-42", "DB_PWD=DB-SECRET-42", "OLDPWD=/srv/previous",
		"JDBC_URL=jdbc:postgresql://db/x?user=app&password=JDBC-SECRET-42", "CONN_STRING=Server=db;User Id=app;Password=ADO-SECRET-42;",
		"NOTIFY_URL=https://hooks.slack.com/services/T0/B0/WEBHOOK-SECRET-42", "PUBLIC_URL=https://example.com/x"})
	env := s.Do(map[string]any{"op": "env"}).Data
	for _, leak := range []string{"MYSQL-SECRET-42", "DB-SECRET-42", "JDBC-SECRET-42", "ADO-SECRET-42", "WEBHOOK-SECRET-42"} {
		if strings.Contains(env, leak) {
			t.Errorf("ESCAPE: the server's environment holds %s", leak)
		}
	}
	for _, kept := range []string{"OLDPWD=/srv/previous", "PUBLIC_URL=https://example.com/x"} {
		if !strings.Contains(env, kept) {
			t.Errorf("%s was held back: %q", kept, env)
		}
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	if !strings.Contains(s.Stderr(), "MYSQL_PWD") || !strings.Contains(s.Stderr(), "DB_PWD") {
		t.Errorf("the names held back were not reported: %s", s.Stderr())
	}
}

// TestFenceSyscallVariants guards what held in session 9 (both
// layerings): every syscall whose arguments the filter checks, called
// through the i386 ABI (int 0x80: chmod, fchmodat2, mknod, the socketcall
// multiplexer a filter of socket() alone would miss, clone, unshare,
// ioctl, fcntl64, prlimit64, memfd_create, execveat, setxattr, utimensat,
// personality, umask, renameat2, landlock_restrict_self) or the x32 ABI
// (bit 30, and x32's own numbers 512-547: ioctl, sendmsg, execveat,
// ptrace), answers ENOSYS; a number with junk above its low 32 bits is
// decided as the syscall the kernel runs (unshare(CLONE_NEWUSER): EPERM);
// the syscalls newer than Docker's profile that no server needs
// (statmount and listmount: the host's mounts; open_tree_attr,
// file_setattr, listns, the lsm_* calls, set_mempolicy_home_node, mbind,
// set_mempolicy) are EPERM, the first number past the table ENOSYS.
func TestFenceSyscallVariants(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceSyscallVariants)
}

func testFenceSyscallVariants(t *testing.T, noNS bool) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the i386 and x32 ABIs are x86_64's")
	}
	s, _ := startWriteSession(t, noNS)
	enosys, eperm := []string{"ENOSYS"}, []string{"EPERM"}
	abi := func(name string, nr int, args ...string) map[string]any {
		return map[string]any{"op": "abi_syscall", "name": name, "n": nr, "args": args}
	}
	raw := func(nr int, args ...string) map[string]any {
		return map[string]any{"op": "raw_syscall", "n": nr, "args": args}
	}
	var cases []fenceCase
	for _, c := range []struct {
		name string
		nr   int
		args []string
	}{
		{"chmod", 15, []string{"0", "2559"}}, {"fchmodat2", 452, nil}, {"mknod", 14, nil},
		{"socketcall(SYS_SOCKET)", 102, []string{"1", "0"}}, {"socketcall(SYS_SENDMSG)", 102, []string{"16", "0"}},
		{"socketpair", 360, []string{"1", "2", "0"}}, {"bind", 361, nil}, {"listen", 363, nil}, {"sendto", 369, nil},
		{"clone(CLONE_NEWUSER)", 120, []string{strconv.Itoa(unix.CLONE_NEWUSER)}}, {"setns", 346, nil},
		{"ioctl(TIOCSTI)", 54, []string{"0", strconv.Itoa(unix.TIOCSTI)}}, {"fcntl64(F_SETLEASE)", 221, []string{"0", "1024", "1"}},
		{"prlimit64", 340, []string{"1"}}, {"memfd_create", 356, nil}, {"execveat", 358, nil}, {"setxattr", 226, nil},
		{"utimensat", 320, nil}, {"personality", 136, []string{"4194304"}}, {"umask(0)", 60, []string{"0"}},
		{"renameat2", 353, nil}, {"landlock_restrict_self", 446, nil}, {"ptrace", 26, nil}, {"io_uring_setup", 425, nil},
	} {
		cases = append(cases, fenceCase{name: "i386 " + c.name, req: abi("i386", c.nr, c.args...), errno: enosys, exact: true})
	}
	for _, c := range []struct {
		name string
		nr   int
	}{
		{"ioctl (x32's own number)", 514}, {"sendmsg (x32's own)", 518}, {"ptrace (x32's own)", 521},
		{"execveat (x32's own)", 545}, {"chmod", unix.SYS_CHMOD}, {"unshare", unix.SYS_UNSHARE},
		{"setxattr", unix.SYS_SETXATTR}, {"memfd_create", unix.SYS_MEMFD_CREATE},
	} {
		cases = append(cases, fenceCase{name: "x32 " + c.name, req: abi("x32", c.nr), errno: enosys, exact: true})
	}
	cases = append(cases,
		fenceCase{name: "unshare(CLONE_NEWUSER) with junk above the number's low 32 bits", req: raw(1<<32|unix.SYS_UNSHARE, strconv.Itoa(unix.CLONE_NEWUSER)), errno: eperm, exact: true},
		fenceCase{name: "getpid with junk above the number's low 32 bits (the op works)", req: raw(1<<32 | unix.SYS_GETPID), wantOK: true},
		fenceCase{name: "the first number past the table", req: raw(472), errno: enosys, exact: true},
	)
	for name, nr := range map[string]int{"statmount": 457, "listmount": 458, "open_tree_attr": 467, "file_setattr": 469,
		"listns": 470, "lsm_get_self_attr": 459, "lsm_set_self_attr": 460, "lsm_list_modules": 461,
		"set_mempolicy_home_node": 450, "mbind": unix.SYS_MBIND, "set_mempolicy": unix.SYS_SET_MEMPOLICY} {
		cases = append(cases, fenceCase{name: name, req: raw(nr), errno: eperm, exact: true})
	}
	runCases(t, s, cases)
}

// TestFenceDeviceNodesAndHostFiles guards what held in session 9 (both
// layerings): a whiteout (a 0:0 character device, which mknod makes
// without CAP_MKNOD) or any device node made in the workspace or the
// private TMPDIR (Landlock: no make_char anywhere); the host's /sys and
// /proc files a server running as uid 0 without capabilities could write
// by DAC alone under --no-namespaces (suspend, KSM, kernel profiling, an
// interface's MTU, the next pid, ASLR) and the process's own files that
// change it beyond its fence (its uid map, setgroups, its autogroup's
// nice); and host facts no server needs (timers and their pids, the boot
// command line, the machine's serial and UUID, the interfaces).
func TestFenceDeviceNodesAndHostFiles(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceDeviceNodesAndHostFiles)
}

func testFenceDeviceNodesAndHostFiles(t *testing.T, noNS bool) {
	s, w := startWriteSession(t, noNS)
	tmp := envOf(t, s, "TMPDIR")
	cases := []fenceCase{
		{name: "a whiteout in the workspace", req: map[string]any{"op": "mknod_char", "path": filepath.Join(w.allowed, "wh"), "n": 0}, errno: []string{"EACCES"}, exact: true},
		{name: "a whiteout in TMPDIR", req: map[string]any{"op": "mknod_char", "path": filepath.Join(tmp, "wh"), "n": 0}, errno: []string{"EACCES"}, exact: true},
		{name: "/dev/null's twin (1:3) in TMPDIR", req: map[string]any{"op": "mknod_char", "path": filepath.Join(tmp, "null"), "n": int(unix.Mkdev(1, 3))}, errno: denied, exact: true},
	}
	write := func(p string) map[string]any { return map[string]any{"op": "open_write", "path": p} }
	read := func(p string) map[string]any { return map[string]any{"op": "read", "path": p} }
	for _, c := range []fenceCase{
		{name: "write /sys/power/state", req: write("/sys/power/state"), errno: denied},
		{name: "write /sys/kernel/mm/ksm/run", req: write("/sys/kernel/mm/ksm/run"), errno: denied},
		{name: "write /sys/kernel/profiling", req: write("/sys/kernel/profiling"), errno: denied},
		{name: "write /sys/class/net/lo/mtu", req: write("/sys/class/net/lo/mtu"), errno: denied},
		{name: "write kernel.ns_last_pid", req: write("/proc/sys/kernel/ns_last_pid"), errno: denied},
		{name: "write kernel.randomize_va_space", req: write("/proc/sys/kernel/randomize_va_space"), errno: denied},
		{name: "write /proc/self/uid_map", req: write("/proc/self/uid_map"), errno: denied},
		{name: "write /proc/self/setgroups", req: write("/proc/self/setgroups"), errno: denied},
		{name: "write /proc/self/autogroup", req: write("/proc/self/autogroup"), errno: denied},
		{name: "write /proc/self/coredump_filter", req: write("/proc/self/coredump_filter"), errno: denied},
		{name: "read /proc/timer_list", req: read("/proc/timer_list"), errno: denied},
		{name: "read /proc/cmdline", req: read("/proc/cmdline"), errno: denied},
		{name: "read the machine's UUID", req: read("/sys/class/dmi/id/product_uuid"), errno: denied},
		{name: "read the board's serial", req: read("/sys/class/dmi/id/board_serial"), errno: denied},
		{name: "list /sys/class/net", req: map[string]any{"op": "readdir", "path": "/sys/class/net"}, errno: denied},
		{name: "read /proc/self/stack", req: read("/proc/self/stack"), errno: denied},
	} {
		if exists(c.req["path"].(string)) {
			cases = append(cases, c)
		}
	}
	runCases(t, s, cases)
}

// TestLifeStoppedDescendantEndsWithTheRun guards what held in session 9:
// a daemonised descendant the server stopped with SIGSTOP (a stopped
// process takes no signal but SIGKILL and SIGCONT) is gone when the run
// ends, with the namespaces, without them, and without the cgroup either
// (the session kill).
func TestLifeStoppedDescendantEndsWithTheRun(t *testing.T) {
	for _, c := range []struct {
		name  string
		extra []string
		noNS  bool
	}{{"namespaces", nil, false}, {"landlock-seccomp", nil, true}, {"no-cgroup", []string{"--cgroup=false"}, true}} {
		t.Run(c.name, func(t *testing.T) {
			fencetest.RequireFence(t)
			b := fencetest.Build(t)
			w := newWorkspace(t)
			scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
			s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: c.noNS, ExtraArgs: c.extra})
			r := s.Do(map[string]any{"op": "daemon", "name": "sleep"})
			inRun := pidOf(t, r)
			host := s.HostPID(inRun)
			if r := s.Do(map[string]any{"op": "kill", "pid": inRun, "sig": int(unix.SIGSTOP)}); !r.OK {
				t.Fatalf("the server could not stop its own descendant: %+v", r)
			}
			deadline := time.Now().Add(2 * time.Minute)
			for !stopped(host) {
				if time.Now().After(deadline) {
					t.Fatalf("descendant %d never stopped", host)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if code := s.Close(); code != 0 {
				t.Errorf("exit %d: %s", code, s.Stderr())
			}
			waitGone(t, "a stopped descendant after the run ended", host)
		})
	}
}

// stopped reports whether pid is in the stopped state (T).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(string(b), ')')
	return err == nil && i > 0 && i+2 < len(b) && b[i+2] == 'T'
}

// TestLifePrivateTmpCountsInTheMemoryLimit guards what held in session 9:
// the private TMPDIR of the mount namespace layer is a tmpfs, memory no
// disk backs; what the server writes there is charged to the run's memory
// limit. 96 MiB written under --max-memory-mb 32 (the tmpfs may hold 128)
// gets the server OOM-killed, and the run says it hit its memory limit.
func TestLifePrivateTmpCountsInTheMemoryLimit(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, ExtraArgs: []string{"--max-memory-mb", "32", "--max-file-size-mb", "128"}})
	tmp := envOf(t, s, "TMPDIR")
	if err := s.Send([]byte(fmt.Sprintf(`{"op":"writebig","path":%q,"n":96}`+"\n", filepath.Join(tmp, "big")))); err != nil {
		t.Fatal(err)
	}
	if line, ok := s.ReadLine(2 * time.Minute); ok && strings.Contains(line, `"ok":true`) {
		t.Fatalf("ESCAPE: 96 MiB written to the private tmpfs under a 32 MiB memory limit: %s", line)
	}
	s.Close()
	if !strings.Contains(s.Stderr(), "mcpwarden: WARNING: the run hit its memory limit (32 MiB)") {
		t.Errorf("the limit hit was not reported: %s", s.Stderr())
	}
}

// TestLifeOpenFilesBounded: the host's file table (fs.file-max) is one
// budget for every process of the host. A run's processes inherited the
// launcher's hard RLIMIT_NOFILE (20,000 here: 512 processes could hold
// 10 million files, four times this host's table, and leave every
// unprivileged process of the host with ENFILE). Now their hard limit is
// the run's share (openFilesCeiling), which the server cannot raise.
// Fails before: the server's hard limit is the launcher's.
func TestLifeOpenFilesBounded(t *testing.T) { fencetest.ForEachLayering(t, testLifeOpenFilesBounded) }

func testLifeOpenFilesBounded(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &own); err != nil {
		t.Fatal(err)
	}
	want := min(own.Max, launcher.OpenFilesCeiling(launcher.DefaultLimits.MaxProcesses))
	if own.Max <= want {
		t.Fatalf("this process's hard RLIMIT_NOFILE (%d) is not above the run's ceiling (%d): the test cannot show the bound; raise it (ulimit -Hn)", own.Max, want)
	}
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	r := s.Do(map[string]any{"op": "nofile_limit"})
	if !r.OK {
		t.Fatalf("nofile_limit: %+v", r)
	}
	var cur, hard uint64
	if _, err := fmt.Sscanf(r.Data, "%d %d", &cur, &hard); err != nil {
		t.Fatalf("nofile_limit answered %q: %v", r.Data, err)
	}
	if hard != want || cur > hard {
		t.Fatalf("ESCAPE: the server's RLIMIT_NOFILE is %d (hard %d), want a hard limit of %d (the launcher's is %d)", cur, hard, want, own.Max)
	}
	if r := s.Do(map[string]any{"op": "nofile_limit", "n": int(own.Max)}); r.OK || r.Errno != "EPERM" {
		t.Fatalf("ESCAPE: the server raised its RLIMIT_NOFILE back to %d: %+v", own.Max, r)
	}
}

// TestLifeOpenFilesKeepsALowerLimit: the exec stage and the Go helper only
// lower RLIMIT_NOFILE: a launcher started under a hard limit below the
// run's ceiling (prlimit --nofile=512) gives the server that limit, not
// the ceiling.
func TestLifeOpenFilesKeepsALowerLimit(t *testing.T) {
	fencetest.ForEachLayering(t, testLifeOpenFilesKeepsALowerLimit)
}

func testLifeOpenFilesKeepsALowerLimit(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	prlimit := testenv.RequireCommand(t, "prlimit")
	const lower = 512
	if c := launcher.OpenFilesCeiling(launcher.DefaultLimits.MaxProcesses); c <= lower {
		t.Fatalf("the run's ceiling (%d) is not above %d: the test cannot tell a kept limit from the ceiling", c, lower)
	}
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS,
		Wrapper: []string{prlimit, fmt.Sprintf("--nofile=%d:%d", lower, lower), "--"}})
	r := s.Do(map[string]any{"op": "nofile_limit"})
	var cur, hard uint64
	if _, err := fmt.Sscanf(r.Data, "%d %d", &cur, &hard); !r.OK || err != nil {
		t.Fatalf("nofile_limit: %+v %v", r, err)
	}
	if hard != lower || cur != lower {
		t.Fatalf("the server's RLIMIT_NOFILE is %d (hard %d) under a launcher limited to %d: a lower limit must be kept", cur, hard, lower)
	}
}
