package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrStillPopulated means processes of the group were still alive when
// Kill gave up (a task stuck in uninterruptible sleep, typically).
var ErrStillPopulated = errors.New("cgroup: processes of the run are still alive")

// Kill kills every process in the group — threads, forks in flight,
// processes whose main thread has exited, daemonised grandchildren, new
// process groups: membership is what counts, not ancestry or session — and
// waits until none is left or timeout has passed.
func (g *Group) Kill(timeout time.Duration) error {
	if !g.Exists() {
		return nil
	}
	deadline := time.Now().Add(timeout)
	if g.v2 != "" {
		g.mu.Lock()
		g.noClone = true // see Start
		g.mu.Unlock()
		return g.killV2(deadline)
	}
	freezer := g.v1["freezer"]
	for {
		if freezer != "" {
			// Frozen members cannot fork between the listing and the signal.
			_ = writeFile(filepath.Join(freezer, "freezer.state"), "FROZEN")
			g.waitFrozen(freezer, deadline)
		}
		pids, err := g.Procs()
		if err != nil {
			return fmt.Errorf("cgroup: list the run's processes: %w", err)
		}
		g.killListed(pids)
		if freezer != "" {
			// SIGKILL is delivered once the members thaw.
			_ = writeFile(filepath.Join(freezer, "freezer.state"), "THAWED")
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (%d left)", ErrStillPopulated, len(pids))
		}
		time.Sleep(time.Millisecond)
	}
}

// killV2 writes cgroup.kill, which kills every member and every fork in
// flight, and then signals each listed member as well: on Linux 6.18
// cgroup.kill passes over a process whose main thread has exited while its
// other threads run (measured), and kill(2) on its thread-group id does
// not. It repeats both until the group is empty, since such a process may
// still fork in between. Between rounds it waits on cgroup.events, which
// the kernel marks changed when "populated" changes: the group's end is
// seen when it happens, not at the next step of a back-off (which found
// it up to 5 ms late at the end of a run, measured).
func (g *Group) killV2(deadline time.Time) error {
	kill := filepath.Join(g.v2, "cgroup.kill")
	events := newEventsFile(filepath.Join(g.v2, "cgroup.events"))
	defer events.close()
	hasKill := true
	for d := time.Millisecond; ; d = min(2*d, 10*time.Millisecond) {
		if hasKill {
			if err := writeFile(kill, "1"); errors.Is(err, os.ErrNotExist) {
				hasKill = false // before Linux 5.14: signals alone
			} else if err != nil {
				return fmt.Errorf("cgroup: kill the run: %w", err)
			}
		}
		pids, err := g.Procs()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cgroup: list the run's processes: %w", err)
		}
		g.killListed(pids)
		if !events.populated() {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w (%d left)", ErrStillPopulated, len(pids))
		}
		events.wait(min(d, left))
	}
}

// eventsFile is a group's cgroup.events, held open: reading it and then
// polling it for POLLPRI waits until a value in it changes (kernfs notifies
// every change of "populated" and "frozen").
type eventsFile struct {
	path string
	fd   int // -1: not open (reads fall back to opening it each time)
}

func newEventsFile(path string) *eventsFile {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		fd = -1
	}
	return &eventsFile{path: path, fd: fd}
}

// populated reads "populated" (this group and its descendants; zombies
// do not count). A group that is gone is not populated; one that cannot be
// read is.
func (e *eventsFile) populated() bool {
	if e.fd < 0 {
		b, err := os.ReadFile(e.path)
		if err != nil {
			return !errors.Is(err, os.ErrNotExist)
		}
		return populatedIn(b)
	}
	var buf [256]byte
	n, err := unix.Pread(e.fd, buf[:], 0)
	if err != nil {
		return !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.ENOENT)
	}
	return populatedIn(buf[:n])
}

// wait waits up to d for a change of the file since its last read. It
// reports whether the kernel said the file changed (false: d passed, or
// the file could not be polled and wait slept for d).
func (e *eventsFile) wait(d time.Duration) bool {
	if e.fd < 0 {
		time.Sleep(d)
		return false
	}
	ms := max(1, int((d+time.Millisecond-1)/time.Millisecond))
	fds := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLPRI}}
	n, err := unix.Poll(fds, ms)
	if err != nil && !errors.Is(err, unix.EINTR) {
		time.Sleep(d)
		return false
	}
	return n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0
}

func (e *eventsFile) close() {
	if e.fd >= 0 {
		_ = unix.Close(e.fd)
		e.fd = -1
	}
}

func populatedIn(b []byte) bool {
	for _, line := range strings.Split(string(b), "\n") {
		if line == "populated 0" {
			return false
		}
	}
	return true
}

func (g *Group) waitFrozen(freezer string, deadline time.Time) {
	for d := 50 * time.Microsecond; time.Now().Before(deadline); d = min(2*d, 10*time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(freezer, "freezer.state"))
		if err != nil || strings.TrimSpace(string(b)) == "FROZEN" {
			return
		}
		time.Sleep(d)
	}
}

// Remove kills what is left and removes the group's directories. Call it
// once, when the run is over.
func (g *Group) Remove(timeout time.Duration) error {
	if g == nil {
		return nil
	}
	err := g.Kill(timeout)
	dirs := g.dirs()
	deadline := time.Now().Add(timeout)
	for _, d := range dirs {
		for {
			rerr := syscall.Rmdir(d)
			if rerr == nil || errors.Is(rerr, syscall.ENOENT) {
				break
			}
			// The kernel may take a moment to let go of a group just emptied.
			if !errors.Is(rerr, syscall.EBUSY) || time.Now().After(deadline) {
				err = errors.Join(err, fmt.Errorf("cgroup: remove the run's group: %w", rerr))
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	if g.lockFD >= 0 {
		syscall.Close(g.lockFD)
		g.lockFD = -1
	}
	return err
}

func (g *Group) dirs() []string {
	var out []string
	if g.v2 != "" {
		out = append(out, g.v2)
	}
	for _, c := range v1Controllers {
		if d := g.v1[c]; d != "" {
			out = append(out, d)
		}
	}
	return out
}

// killListed sends SIGKILL to each listed member. A listed process may
// have exited and its pid been reused by a process outside the run before
// the signal: each pid is pinned with a pidfd first and signalled only if
// the group still lists it after that (without pidfds, kill(2) as is).
func (g *Group) killListed(pids []int) {
	if len(pids) == 0 {
		return
	}
	type pinned struct{ pid, fd int }
	var fds []pinned
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ENOSYS) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			continue
		}
		if err == nil {
			fds = append(fds, pinned{pid, fd})
		}
	}
	if len(fds) == 0 {
		return
	}
	still, _ := g.Procs()
	for _, p := range fds {
		if slices.Contains(still, p.pid) {
			_ = unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
		}
		unix.Close(p.fd)
	}
}
