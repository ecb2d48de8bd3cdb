package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Start starts cmd inside the group, without moving a running process:
// moving one (writing it to cgroup.procs) takes the kernel's global
// threadgroup lock for writing, which waits for an RCU grace period — about
// 9 ms here when no other move happened just before (measured), on every
// launch. Instead:
//
//   - cgroup2: clone3 with CLONE_INTO_CGROUP (SysProcAttr.UseCgroupFD), so
//     the child is born in the group;
//   - v1: the forking thread itself moves into the group's v1 cgroups for
//     the fork (a thread moving itself, "0" written to tasks, takes no
//     global lock) and back right after; the child inherits the thread's
//     cgroups.
//
// Where that cannot be used it falls back to starting cmd outside the group
// and moving it in (Join), which is as safe for a cmd that runs nothing
// before it is told to (the fence helper waits for its spec), only slower.
//
// CLONE_INTO_CGROUP is not used once the group was killed: on Linux 6.18 a
// child cloned into a cgroup that cgroup.kill was ever written to is
// SIGKILLed at once (measured; the kernel compares the target's kill
// sequence with that of the parent's own cgroup). For the same reason a
// clone that comes back already dead is retried the slow way, once.
//
// cmd must not have been started; Start sets cmd.SysProcAttr's cgroup
// fields. When Start returns nil, cmd runs and is in every hierarchy of
// the group.
func (g *Group) Start(cmd *exec.Cmd) (err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	g.mu.Lock()
	clone := g.v2 != "" && !g.noClone
	g.mu.Unlock()
	var fd int = -1
	if clone {
		if fd, err = unix.Open(g.v2, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			clone = false
		} else {
			defer unix.Close(fd)
		}
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = clone, fd
	// The thread that forks must stay the same from entering to leaving.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	entered, enterErr := g.enterThread()
	startErr := cmd.Start()
	if entered {
		if err := g.leaveThread(); err != nil {
			// A launcher thread would stay in the run's cgroups: never let
			// this thread go back to the scheduler.
			runtime.LockOSThread()
			if startErr == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			return err
		}
	}
	if startErr != nil {
		if clone {
			// clone3 into the cgroup refused (an old kernel, a cgroup that
			// cannot take processes): once more the slow way.
			g.mu.Lock()
			g.noClone = true
			g.mu.Unlock()
			return g.Start(restart(cmd))
		}
		return startErr
	}
	if clone {
		if dead, err := bornDead(cmd); err != nil {
			return err
		} else if dead {
			g.mu.Lock()
			g.noClone = true
			g.mu.Unlock()
			return g.Start(restart(cmd))
		}
	}
	// What the fork did not place, move now.
	if !clone && g.v2 != "" {
		if err := writeFile(filepath.Join(g.v2, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid)); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("place process %d in the run's cgroup2 group: %w", cmd.Process.Pid, err)
		}
	}
	if !entered {
		for _, c := range v1Controllers {
			if d := g.v1[c]; d != "" {
				if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid)); err != nil {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					return errors.Join(enterErr, fmt.Errorf("place process %d in the run's v1 %s group: %w", cmd.Process.Pid, c, err))
				}
			}
		}
	}
	return nil
}

// restart is a fresh, unstarted copy of cmd (an exec.Cmd cannot be started
// twice), without the cgroup fields.
func restart(cmd *exec.Cmd) *exec.Cmd {
	attr := *cmd.SysProcAttr
	attr.UseCgroupFD, attr.CgroupFD = false, 0
	c := &exec.Cmd{
		Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir,
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr,
		ExtraFiles: cmd.ExtraFiles, SysProcAttr: &attr,
	}
	*cmd = *c // the caller holds cmd: it must see the process that runs
	return cmd
}

// bornDead reports whether the started cmd was killed before it could
// exec (the clone into the cgroup was SIGKILLed by the kernel; then it has
// been reaped). A child that exec'd shows cmd's program as /proc/PID/exe;
// one that did not is dying or dead, and is waited for.
func bornDead(cmd *exec.Cmd) (bool, error) {
	path := cmd.Path
	// A program exec'd from one of its descriptors (the run's C init) is
	// the file passed there.
	if n, ok := strings.CutPrefix(path, "/proc/self/fd/"); ok {
		if fd, err := strconv.Atoi(n); err == nil && fd >= 3 && fd-3 < len(cmd.ExtraFiles) && cmd.ExtraFiles[fd-3] != nil {
			path = cmd.ExtraFiles[fd-3].Name()
		}
	}
	want, err := filepath.EvalSymlinks(path)
	if err != nil {
		want = path
	}
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe"); err == nil && exe == want {
		return false, nil
	}
	_ = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		return true, nil
	}
	return false, fmt.Errorf("cgroup: %s exited at once: %v", cmd.Path, cmd.ProcessState)
}

// enterThread moves the calling (locked) thread into the group's v1
// cgroups. It reports whether it did; on an error the thread is back where
// it was.
func (g *Group) enterThread() (bool, error) {
	if len(g.v1) == 0 {
		return false, nil
	}
	for _, c := range v1Controllers {
		d := g.v1[c]
		if d == "" {
			continue
		}
		if g.home[c] == "" {
			_ = g.leaveThread()
			return false, fmt.Errorf("cgroup: no way back from the v1 %s group", c)
		}
		if err := writeFile(filepath.Join(d, "tasks"), "0"); err != nil {
			_ = g.leaveThread()
			return false, fmt.Errorf("cgroup: move the forking thread into the v1 %s group: %w", c, err)
		}
	}
	return true, nil
}

// leaveThread moves the calling thread back to the launcher's own v1
// cgroups, and with it any launcher thread the runtime created from it in
// the meantime (a new thread starts in its creator's cgroups).
func (g *Group) leaveThread() error {
	var errs []error
	self := strconv.Itoa(os.Getpid())
	for _, c := range v1Controllers {
		d := g.v1[c]
		if d == "" || g.home[c] == "" {
			continue
		}
		if err := writeFile(filepath.Join(g.home[c], "tasks"), "0"); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: move the forking thread back from the v1 %s group: %w", c, err))
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "tasks"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, tid := range strings.Fields(string(b)) {
			if _, err := os.Stat("/proc/" + self + "/task/" + tid); err == nil {
				if err := writeFile(filepath.Join(g.home[c], "tasks"), tid); err != nil {
					errs = append(errs, fmt.Errorf("cgroup: move launcher thread %s back from the v1 %s group: %w", tid, c, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}
