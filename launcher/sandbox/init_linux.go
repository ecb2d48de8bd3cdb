package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/mcpwarden/mcpwarden/launcher/sandbox/seccomp"
	"golang.org/x/sys/unix"
)

// forwarded are the signals the run's init passes on to the server (the
// C init's list, execstage/init.c). The launcher sends them to the
// helper's pid, which is the init: without a handler, pid 1 of a pid
// namespace would drop them (a node server that installs no SIGTERM
// handler could then not be stopped but by SIGKILL). The Go init, before
// the server exists, only catches (and drops) them: the Go runtime's
// default for SIGTERM, SIGINT or SIGHUP would end the init.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// runInit is the helper started as pid 1 of the run's new pid namespace:
//
//  1. read the spec; create the Landlock ruleset and start the exec stage
//     (mcpwarden-exec, as pid 2, in the server's own user namespace when
//     the spec says so) holding it, while another goroutine builds the
//     seccomp program, sets the host name, brings up loopback and makes
//     the root's mounts up to the first idmapped one (setupNamespaces);
//  2. finish the minimal root with the server's user namespace as the
//     idmap (finishNamespaces), and add the ruleset's rules;
//  3. hand the exec stage its fence (handover.go) and relay its
//     readiness, then the launcher's go, to it;
//  4. give up every privilege of its own, report the server's start, and
//     be the run's init: reap every process, forward signals to the
//     server, and exit with its status when it exits — which ends every
//     other process of the run with it (the kernel kills a pid namespace
//     whose init exits).
func runInit(in *bufio.Reader, status *os.File) int {
	// No watcher guards a run with a pid namespace: its init must die with
	// the launcher from its first step, not only once the C init has
	// dropped its privileges (a set-up step that hung — once seen: this Go
	// init spinning for an hour in a stop-the-world privilege drop — left
	// the init, the exec stage and the run's cgroup behind a SIGKILLed
	// launcher). ownNextUserNS sets it again after its change of uid; the
	// C init after its own drop.
	if err := dieWithLauncher(status); err != nil {
		return report(status, &Status{Stage: StageNamespaces, Errno: errnoOf(err), Message: err.Error()})
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	spec, err := readSpec(in)
	if err != nil {
		return report(status, &Status{Stage: StageSpec, Message: err.Error()})
	}
	if spec.NS == nil || !spec.NS.PID {
		return report(status, &Status{Stage: StageNamespaces, Message: "started as pid 1 of a pid namespace, but the spec does not say so"})
	}
	// The run's /proc first: the pids this process sees (and forks) are the
	// run's, and the exec stage's uid_map is written through /proc/PID.
	if err := mountRunProc(); err != nil {
		return report(status, &Status{Stage: StageRoot, Errno: errnoOf(err), Path: "/proc", Message: "mount the run's /proc: " + err.Error()})
	}
	// The host name, loopback and the root's mounts up to the first
	// idmapped one are made while this (locked) thread starts the exec
	// stage: they need nothing of it, and its start is mostly waiting.
	type setup struct {
		root   *rootBuild
		filter *seccomp.Filter
		st     *Status
	}
	early := make(chan setup, 1)
	go func() {
		var set setup
		if spec.Enforce && spec.Seccomp {
			if set.filter, set.st = buildFilter(spec); set.st != nil {
				early <- set
				return
			}
		}
		set.root, set.st = setupNamespaces(spec)
		early <- set
	}()
	// The Landlock ruleset is made before the exec stage, which inherits
	// it; its rules are added once the root is done (a ruleset's rules
	// may be added by any holder until it is enforced).
	ruleset := -1
	if spec.Enforce && spec.ABI > 0 {
		var st *Status
		if ruleset, st = createRuleset(spec); st != nil {
			<-early
			return report(status, st)
		}
	}
	stage, err := startExecStage(spec.NS.Server, ruleset)
	set := <-early
	if err != nil {
		return report(status, &Status{Stage: StageNamespaces, Errno: errnoOf(err), Message: "start the exec stage: " + err.Error()})
	}
	fail := func(st *Status) int {
		stage.kill()
		return report(status, st)
	}
	if set.st != nil {
		return fail(set.st)
	}
	idmap := -1
	if spec.NS.Server != nil {
		// The exec stage's user namespace maps the file owner to the
		// dedicated uid: the idmap of the scope's mounts.
		if idmap, err = unix.Open("/proc/"+strconv.Itoa(stage.pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			return fail(&Status{Stage: StageNamespaces, Errno: errnoOf(err), Message: "open the server's user namespace: " + err.Error()})
		}
	}
	st := finishNamespaces(set.root, idmap)
	if idmap >= 0 {
		unix.Close(idmap)
	}
	if st != nil {
		return fail(st)
	}
	// Hold, for the run, the exec stage's entry in the run's /proc and
	// every other /proc path a rule names: a Landlock rule binds to an
	// inode, and procfs makes a new inode when an entry whose dentry was
	// dropped (memory pressure, drop_caches) is looked up again.
	// (Not close-on-exec: the C init, which this process becomes, holds them.)
	if err := pin("/proc/"+strconv.Itoa(stage.pid), unix.O_PATH|unix.O_DIRECTORY); err != nil {
		return fail(&Status{Stage: StageNamespaces, Errno: errnoOf(err), Message: "open the server's entry in the run's /proc: " + err.Error()})
	}
	for _, r := range spec.Paths {
		if strings.HasPrefix(r.Path, "/proc/") && !strings.HasPrefix(r.Path+"/", procSelf+"/") {
			_ = pin(r.Path, unix.O_PATH) // a path the kernel lacks fails the exec stage's rule
		}
	}
	if ruleset >= 0 {
		st := addLandlockRules(ruleset, spec, stage.pid)
		unix.Close(ruleset)
		if st != nil {
			return fail(st)
		}
	}
	ho := &handover{
		enforce:       spec.Enforce,
		dropCaps:      spec.DropCaps,
		identity:      spec.Identity,
		fileSize:      spec.Limits.FileSizeBytes,
		landlock:      ruleset >= 0,
		restrictFlags: spec.RestrictFlag,
		dir:           spec.Dir,
		exe:           spec.Exe,
		argv:          spec.Argv,
		env:           spec.Env,
	}
	if spec.NS.Server != nil {
		ho.identity = nil // the exec stage already runs as the server's identity
	}
	if set.filter != nil {
		ho.filter = set.filter.Program
	}
	if err := stage.hand(ho); err != nil {
		return fail(&Status{Stage: StageNamespaces, Errno: errnoOf(err), Message: "hand the exec stage its fence: " + err.Error()})
	}
	// The rest of the init's life is C (execstage/init.c, the same program
	// as the exec stage): it gives up the init's privileges with one system
	// call each, where this Go process would stop every thread for each;
	// relays the stage's readiness and the launcher's go-ahead; reports the
	// server's start and exit; reaps and forwards signals.
	id := spec.Identity
	if spec.NS.Server != nil {
		id = &spec.NS.Server.Host
	}
	if st := passBufferedGo(in, SpecFD); st != nil {
		return fail(st)
	}
	if err := execInit(stage, id); err != nil {
		return fail(&Status{Stage: StageNamespaces, Errno: errnoOf(err), Message: "become the run's init (" + InitName + "): " + err.Error()})
	}
	return 127 // not reached
}

// pin opens path for the rest of the run, not close-on-exec and above the
// descriptors execInit places.
func pin(path string, flags int) error {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD, 200)
	return err
}

// passBufferedGo hands the C init a go-ahead that came in with the spec.
// The launcher sends its go-ahead without waiting for "ready", so the byte
// may already sit in in's buffer, read from fd (the spec pipe) with the
// end of the spec, where the C init, which reads fd, would never see it:
// fd then becomes a pipe holding GoByte alone (and its EOF). Nothing
// buffered: fd stays the launcher's pipe. Anything else after the spec
// refuses the run.
func passBufferedGo(in *bufio.Reader, fd int) *Status {
	n := in.Buffered()
	if n == 0 {
		return nil
	}
	if b, _ := in.Peek(n); n != 1 || b[0] != GoByte {
		return &Status{Stage: StageSpec, Message: fmt.Sprintf("%d unexpected bytes after the spec", n)}
	}
	fail := func(err error) *Status {
		return &Status{Stage: StageNamespaces, Errno: errnoOf(err), Message: "pass the go-ahead to " + InitName + ": " + err.Error()}
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return fail(err)
	}
	defer unix.Close(p[0])
	_, err := unix.Write(p[1], []byte{GoByte})
	unix.Close(p[1])
	if err != nil {
		return fail(err)
	}
	if err := unix.Dup3(p[0], fd, 0); err != nil {
		return fail(err)
	}
	_, _ = in.Discard(n)
	return nil
}

// InitName is argv[0] of the exec stage's program started as the run's
// init (execstage/init.c).
const InitName = "mcpwarden-init"

// execInit replaces this process (pid 1 of the run) with the C init: the
// exec stage's program, still open on ExecStageFD, started as InitName
// with the stage's pid and the identity to become (nil: keep the ids and
// drop every capability). The launcher's pipes stay on fds 3 and 4; the
// stage's handover and status pipes go to fds 5 and 6 (blocking); the
// /proc pins stay open, anywhere above.
func execInit(stage *execStage, id *Identity) error {
	high := func(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 100) }
	bin, err := high(ExecStageFD)
	if err != nil {
		return err
	}
	goFD, err := high(int(stage.spec.Fd()))
	if err != nil {
		return err
	}
	stFD, err := high(int(stage.statF.Fd()))
	if err != nil {
		return err
	}
	for from, to := range map[int]int{goFD: 5, stFD: 6, bin: 7} {
		if err := unix.Dup3(from, to, 0); err != nil {
			return err
		}
	}
	for _, fd := range []int{5, 6} {
		if err := unix.SetNonblock(fd, false); err != nil {
			return err
		}
	}
	args := []string{InitName, strconv.Itoa(stage.pid), "caps"}
	if id != nil {
		args = []string{InitName, strconv.Itoa(stage.pid), "id", strconv.Itoa(id.UID), strconv.Itoa(id.GID)}
	}
	return syscall.Exec("/proc/self/fd/7", args, []string{})
}

// execStage is the exec stage (mcpwarden-exec, execstage/stage.c): a
// small static C program that applies the fence the init prepared and
// execs the server, with its handover pipe and status pipe.
type execStage struct {
	pid   int
	spec  *os.File
	statF *os.File
}

// startExecStage starts the exec stage, which the launcher passed opened
// on ExecStageFD, with the ruleset (or -1) on its fd 5. srv, when set, puts
// it in a new user namespace mapping its ids to the dedicated host ids
// (written by this process, root) and makes it switch to them before
// exec: it starts without a capability and as the server's identity.
func startExecStage(srv *ServerUserNS, ruleset int) (*execStage, error) {
	var st unix.Stat_t
	if err := unix.Fstat(ExecStageFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("the launcher passed no %s on fd %d", ExecStageName, ExecStageFD)
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		specR.Close()
		specW.Close()
		return nil, err
	}
	sys := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if srv != nil {
		sys.Cloneflags = syscall.CLONE_NEWUSER
		sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: srv.Inside.UID, HostID: srv.Host.UID, Size: 1}}
		sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: srv.Inside.GID, HostID: srv.Host.GID, Size: 1}}
		sys.GidMappingsEnableSetgroups = true
		sys.Credential = &syscall.Credential{Uid: uint32(srv.Inside.UID), Gid: uint32(srv.Inside.GID), Groups: []uint32{}}
	}
	var restore func() error
	if srv != nil {
		if restore, err = ownNextUserNS(srv.Host.UID); err != nil {
			specR.Close()
			specW.Close()
			statusR.Close()
			statusW.Close()
			return nil, err
		}
	}
	// Exec'd through /proc/self/fd, the stage's file needs no search
	// permission on its directories for the new uid; it is fd 6 of the
	// stage until the server's exec closes it.
	files := []uintptr{0, 1, 2, specR.Fd(), statusW.Fd(), ^uintptr(0), ExecStageFD}
	if ruleset >= 0 {
		files[stageRulesetFD] = uintptr(ruleset)
	}
	pid, err := syscall.ForkExec("/proc/self/fd/6", []string{ExecStageName}, &syscall.ProcAttr{
		Env:   []string{},
		Files: files,
		Sys:   sys,
	})
	if restore != nil {
		if rerr := restore(); rerr != nil {
			if err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, 0, nil)
			}
			err = rerr
		}
	}
	specR.Close()
	statusW.Close()
	if err != nil {
		specW.Close()
		statusR.Close()
		return nil, err
	}
	return &execStage{pid: pid, spec: specW, statF: statusR}, nil
}

// ownNextUserNS makes uid the owner of the next user namespace this
// (locked) thread creates, by making it this thread's effective uid until
// the returned restore runs; the thread keeps its capabilities meanwhile
// (SECBIT_NO_SETUID_FIXUP), which writing the new namespace's gid map
// needs.
//
// Why: the kernel charges a per-user counter of a process in a user
// namespace (inotify instances and watches, pending signals, message-queue
// bytes) to its uid there and, up the chain, to each namespace's owner in
// the parent. A server namespace owned by root would spend host root's:
// fs.inotify.max_user_instances (128) is shared by every root process, so
// a server holding them all left the host's root daemons without inotify.
// Owned by the dedicated uid, the run spends only the dedicated uid's,
// which no other process has. (The init, which takes the dedicated uid
// later, then holds every capability in the server's namespace; it owns
// nothing there and the server cannot reach it: not dumpable, no ptrace.)
// secbitNoSetuidFixup is SECBIT_NO_SETUID_FIXUP (linux/securebits.h): a
// change of uid leaves the capability sets as they are.
const secbitNoSetuidFixup = 1 << 2

func ownNextUserNS(uid int) (restore func() error, err error) {
	euid := os.Geteuid()
	bits, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_GET_SECUREBITS, 0, 0)
	if e != 0 {
		return nil, fmt.Errorf("read the securebits: %w", e)
	}
	sig := pdeathsig()
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits|secbitNoSetuidFixup, 0); e != 0 {
		return nil, fmt.Errorf("keep the capabilities across a change of uid: %w", e)
	}
	// Raw: only this thread, the one that clones; the rest of the init
	// keeps its identity.
	if _, _, e := syscall.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0)
		return nil, fmt.Errorf("take uid %d to own the server's user namespace: %w", uid, e)
	}
	return func() error {
		if _, _, e := syscall.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(euid), ^uintptr(0)); e != 0 {
			return fmt.Errorf("take back uid %d after making the server's user namespace: %w", euid, e)
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_SECUREBITS, bits, 0); e != 0 {
			return fmt.Errorf("restore the securebits: %w", e)
		}
		// A change of effective uid clears the parent-death signal.
		if sig != 0 {
			if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(sig), 0); e != 0 {
				return fmt.Errorf("set the parent-death signal again: %w", e)
			}
		}
		return nil
	}, nil
}

// hand writes the exec stage its handover.
func (e *execStage) hand(h *handover) error {
	b, err := encodeHandover(h)
	if err != nil {
		return err
	}
	_, err = e.spec.Write(b)
	return err
}

// kill ends the exec stage and reaps it.
func (e *execStage) kill() {
	_ = syscall.Kill(e.pid, syscall.SIGKILL)
	e.spec.Close()
	e.statF.Close()
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(e.pid, &ws, 0, nil); !errors.Is(err, syscall.EINTR) {
			return
		}
	}
}
