// Package procinfo reads what the daemon needs to know about a process, as
// the daemon's own pid namespace sees it: from a pidfd (the process itself,
// whatever pid it has elsewhere) and from /proc. Every answer about a pid is
// confirmed afterwards through a pidfd still referring to a live process,
// so a pid that was reused in between is never mistaken for the process.
package procinfo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// InitPidNS is the inode of the initial pid namespace (PROC_PID_INIT_INO):
// the kernel's probes see pids as this namespace does.
const InitPidNS = 0xEFFFFFFC

// ErrGone says the process has exited.
var ErrGone = errors.New("the process has exited")

// ErrInvisible says the process has no pid in the daemon's pid namespace.
var ErrInvisible = errors.New("the process is not visible in the daemon's pid namespace")

// ErrNotPidfd says a descriptor does not refer to a process.
var ErrNotPidfd = errors.New("the descriptor is not a pidfd")

// Process is what is known about one process.
type Process struct {
	PID      int    // in the daemon's pid namespace
	PPID     int    // its parent's, same namespace
	UID      uint32 // real uid
	Start    uint64 // start time, clock ticks since boot
	CgroupID uint64 // cgroup v2 id, 0 without a cgroup v2 mount
	// OwnPID is its pid in its own (innermost) pid namespace: the number
	// its /proc gives it (NSpid's last field; PID outside any namespace).
	OwnPID int
}

// InInitPidNS reports whether this process runs in the initial pid
// namespace, where its pids are the ones the eBPF probes see.
func InInitPidNS() (bool, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return false, fmt.Errorf("read own pid namespace: %w", err)
	}
	return st.Ino == InitPidNS, nil
}

// MonotonicOffset is how far this process's CLOCK_MONOTONIC is set from
// the host's (a time namespace's offset, /proc/self/timens_offsets): the
// probes stamp records with the host's. A kernel without time namespaces
// has no such file: every process shares the one clock.
func MonotonicOffset() (time.Duration, error) {
	b, err := os.ReadFile("/proc/self/timens_offsets")
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read own time namespace offsets: %w", err)
	}
	return parseTimensOffsets(string(b))
}

// parseTimensOffsets reads the monotonic line of timens_offsets
// ("monotonic <seconds> <nanoseconds>").
func parseTimensOffsets(s string) (time.Duration, error) {
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "monotonic" {
			continue
		}
		sec, err1 := strconv.ParseInt(f[1], 10, 64)
		nsec, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || sec > math.MaxInt64/int64(time.Second)-1 || sec < math.MinInt64/int64(time.Second)+1 {
			return 0, fmt.Errorf("time namespace offsets: malformed line %q", strings.TrimSpace(line))
		}
		return time.Duration(sec)*time.Second + time.Duration(nsec), nil
	}
	return 0, errors.New("time namespace offsets: no monotonic line")
}

// FromPidfd describes the process a pidfd refers to.
func FromPidfd(f *os.File) (Process, error) {
	pid, err := pidOfPidfd(f)
	if err != nil {
		return Process{}, err
	}
	p, err := read(pid)
	if err != nil {
		return Process{}, err
	}
	// The pid was read before /proc was: confirm it is still this process.
	if err := Alive(f); err != nil {
		return Process{}, err
	}
	return p, nil
}

// Of describes process pid; when pidfd is not nil it must refer to the
// same process and still be alive after /proc was read.
func Of(pid int, pidfd *os.File) (Process, error) {
	p, err := read(pid)
	if err != nil {
		return Process{}, err
	}
	if pidfd != nil {
		fp, err := pidOfPidfd(pidfd)
		if err != nil {
			return Process{}, err
		}
		if fp != pid {
			return Process{}, fmt.Errorf("pidfd refers to pid %d, not %d", fp, pid)
		}
		if err := Alive(pidfd); err != nil {
			return Process{}, err
		}
	}
	return p, nil
}

// StartOf is the start time of process pid, confirmed through pidfd (when
// not nil) to be the process it refers to: the cheap part of Of.
func StartOf(pid int, pidfd *os.File) (uint64, error) {
	start, err := startTime("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return 0, err
	}
	if pidfd != nil {
		fp, err := pidOfPidfd(pidfd)
		if err != nil {
			return 0, err
		}
		if fp != pid {
			return 0, fmt.Errorf("pidfd refers to pid %d, not %d", fp, pid)
		}
		if err := Alive(pidfd); err != nil {
			return 0, err
		}
	}
	return start, nil
}

// Alive reports ErrGone once the pidfd's process has exited.
func Alive(f *os.File) error {
	err := unix.PidfdSendSignal(int(f.Fd()), 0, nil, 0)
	switch {
	case err == nil, errors.Is(err, unix.EPERM):
		return nil // EPERM: alive, only not ours to signal
	case errors.Is(err, unix.ESRCH):
		return ErrGone
	case errors.Is(err, unix.EBADF), errors.Is(err, unix.EINVAL):
		return ErrNotPidfd
	}
	return fmt.Errorf("check process: %w", err)
}

// pidOfPidfd reads the "Pid:" line of the pidfd's fdinfo: the pid in this
// process's pid namespace, 0 when the process has none here, -1 once it
// has exited.
func pidOfPidfd(f *os.File) (int, error) {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return 0, fmt.Errorf("read pidfd info: %w", err)
	}
	return parsePidfdInfo(b)
}

func parsePidfdInfo(b []byte) (int, error) {
	v, ok := field(b, "Pid:")
	if !ok {
		return 0, ErrNotPidfd
	}
	pid, err := strconv.Atoi(v)
	switch {
	case err != nil:
		return 0, fmt.Errorf("pidfd info: Pid %q", v)
	case pid == -1:
		return 0, ErrGone
	case pid == 0:
		return 0, ErrInvisible
	}
	return pid, nil
}

func read(pid int) (Process, error) {
	p := Process{PID: pid}
	dir := "/proc/" + strconv.Itoa(pid)
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return p, ErrGone
		}
		return p, fmt.Errorf("read process status: %w", err)
	}
	ppid, ok := field(status, "PPid:")
	if !ok {
		return p, errors.New("process status has no PPid")
	}
	if p.PPID, err = strconv.Atoi(ppid); err != nil {
		return p, fmt.Errorf("process status: PPid %q", ppid)
	}
	uids, ok := field(status, "Uid:")
	if !ok {
		return p, errors.New("process status has no Uid")
	}
	uid, err := strconv.ParseUint(strings.Fields(uids)[0], 10, 32)
	if err != nil {
		return p, fmt.Errorf("process status: Uid %q", uids)
	}
	p.UID = uint32(uid)
	if p.OwnPID, err = ownPID(status, pid); err != nil {
		return p, err
	}
	if p.Start, err = startTime(dir); err != nil {
		return p, err
	}
	p.CgroupID, err = cgroupID(dir)
	return p, err
}

// ownPID is the last NSpid field of a process status (the pid in the
// process's innermost pid namespace); a kernel without NSpid has no pid
// namespaces to show, so the pid is the process's own.
func ownPID(status []byte, pid int) (int, error) {
	ns, ok := field(status, "NSpid:")
	if !ok {
		return pid, nil
	}
	f := strings.Fields(ns)
	if len(f) == 0 {
		return 0, errors.New("process status: empty NSpid")
	}
	own, err := strconv.Atoi(f[len(f)-1])
	if err != nil || own <= 0 {
		return 0, fmt.Errorf("process status: NSpid %q", ns)
	}
	return own, nil
}

// startTime is field 22 of /proc/PID/stat, after the parenthesised comm
// (which may itself contain spaces and parentheses).
func startTime(dir string) (uint64, error) {
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, ErrGone
		}
		return 0, fmt.Errorf("read process stat: %w", err)
	}
	return parseStartTime(b)
}

// parseStartTime reads starttime out of a /proc/PID/stat line; the comm the
// process chose for itself is skipped up to its last ')'.
func parseStartTime(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("process stat without comm")
	}
	f := strings.Fields(string(b[i+1:]))
	// After comm: state(3) ppid(4) ... starttime(22) is f[19].
	if len(f) < 20 {
		return 0, errors.New("process stat too short")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// cgroupID is the inode of the process's cgroup v2 directory (the id the
// kernel gives the cgroup), 0 when no cgroup v2 hierarchy is mounted.
func cgroupID(dir string) (uint64, error) {
	mnt, err := cgroup2Mount()
	if err != nil || mnt == "" {
		return 0, err
	}
	b, err := os.ReadFile(dir + "/cgroup")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, ErrGone
		}
		return 0, fmt.Errorf("read process cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(mnt, filepath.Clean("/"+rest)), &st); err != nil {
				return 0, fmt.Errorf("stat the process's cgroup: %w", err)
			}
			return st.Ino, nil
		}
	}
	return 0, nil
}

// cgroup2Mount finds where this mount namespace has cgroup v2 (the hybrid
// layout's /sys/fs/cgroup/unified, or /sys/fs/cgroup).
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, v := range fields {
			if v == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	return "", sc.Err()
}

func field(b []byte, name string) (string, bool) {
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte(name)); ok {
			return strings.TrimSpace(string(v)), true
		}
	}
	return "", false
}

// Open opens a pidfd of process pid.
func Open(pid int) (*os.File, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, ErrGone
		}
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	return os.NewFile(uintptr(fd), "pidfd"), nil
}

// Children lists the children of process pid: those of each of its
// threads (/proc/PID/task/TID/children), or, on a kernel without that file
// (CONFIG_PROC_CHILDREN), the processes whose parent is pid.
func Children(pid int) ([]int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, ErrGone
		}
		return nil, fmt.Errorf("list the threads of %d: %w", pid, err)
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "children"))
		switch {
		case errors.Is(err, os.ErrNotExist):
			if _, serr := os.Stat(filepath.Join(dir, t.Name())); serr == nil {
				return childrenByScan(pid) // the thread is there, the file is not
			}
			continue // the thread has exited
		case err != nil:
			return nil, fmt.Errorf("read the children of %d: %w", pid, err)
		}
		for _, f := range strings.Fields(string(b)) {
			c, err := strconv.Atoi(f)
			if err != nil || c <= 0 {
				return nil, fmt.Errorf("children of %d: %q", pid, f)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// childrenByScan finds pid's children by the parent every process names.
func childrenByScan(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		if _, ppid, err := parseStateParent(b); err == nil && ppid == pid {
			out = append(out, c)
		}
	}
	return out, nil
}

// Exiting reports whether process pid has exited or is exiting: gone from
// /proc, or a zombie (state Z) or dead (X) there.
func Exiting(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	state, _, err := parseStateParent(b)
	return err != nil || state == 'Z' || state == 'X'
}

// parseStateParent reads the state and the parent's pid out of a
// /proc/PID/stat line, after the comm the process chose for itself.
func parseStateParent(b []byte) (byte, int, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("process stat without comm")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, errors.New("process stat too short")
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, fmt.Errorf("process stat: ppid %q", f[1])
	}
	return f[0][0], ppid, nil
}
