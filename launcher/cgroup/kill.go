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
// still fork in between.
func (g *Group) killV2(deadline time.Time) error {
	kill := filepath.Join(g.v2, "cgroup.kill")
	hasKill := true
	for d := 50 * time.Microsecond; ; d = min(2*d, 10*time.Millisecond) {
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
		if !g.populated() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (%d left)", ErrStillPopulated, len(pids))
		}
		time.Sleep(d)
	}
}

// populated reads "populated" from cgroup.events (cgroup2), which counts
// this group and its descendants and ignores zombies.
func (g *Group) populated() bool {
	b, err := os.ReadFile(filepath.Join(g.v2, "cgroup.events"))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
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
