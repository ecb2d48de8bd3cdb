package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// setLimits applies the run's resource limits to the helper, which the
// server and everything it starts inherit: RLIMIT_FSIZE (soft and hard,
// so that it cannot be raised again without CAP_SYS_RESOURCE, which the
// server does not have) with SIGXFSZ ignored, so that a write past the
// limit fails with EFBIG instead of killing the writer; and RLIMIT_CORE 0:
// a crashing server leaves no core file with its memory in it; and
// RLIMIT_RTPRIO and RLIMIT_NICE 0, whatever the launcher was given: no
// real-time scheduling, no nice below the default; and RLIMIT_NOFILE
// lowered to the run's share of the host's file table.
func setLimits(l Limits) error {
	for _, z := range []struct {
		name string
		res  int
	}{{"RLIMIT_CORE", unix.RLIMIT_CORE}, {"RLIMIT_RTPRIO", unix.RLIMIT_RTPRIO}, {"RLIMIT_NICE", unix.RLIMIT_NICE}} {
		if err := unix.Setrlimit(z.res, &unix.Rlimit{}); err != nil {
			return fmt.Errorf("set %s: %w", z.name, err)
		}
	}
	if l.FileSizeBytes > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: l.FileSizeBytes, Max: l.FileSizeBytes}); err != nil {
			return fmt.Errorf("set RLIMIT_FSIZE: %w", err)
		}
		// An ignored signal stays ignored across execve.
		signal.Ignore(syscall.SIGXFSZ)
	}
	if l.OpenFiles > 0 {
		var nf unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &nf); err != nil {
			return fmt.Errorf("read RLIMIT_NOFILE: %w", err)
		}
		nf.Max = min(nf.Max, l.OpenFiles)
		nf.Cur = min(nf.Cur, nf.Max)
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &nf); err != nil {
			return fmt.Errorf("set RLIMIT_NOFILE: %w", err)
		}
	}
	return nil
}

// errLauncherGone means the launcher died while the helper was fencing.
var errLauncherGone = errors.New("the launcher is gone")

// dieWithLauncher asks the kernel to SIGKILL this process (and so the
// server it becomes) when the launcher's thread that started it dies, then
// checks that the launcher is still there: if it died just before, no
// signal would come. A change of uid, gid or a widening of capabilities
// clears the parent-death signal: call it after the last one before
// execve, or set the signal again after each (as the run's init does,
// which calls it first). getppid cannot tell (in a new pid namespace the
// parent is outside and reads as 0); the status pipe can: the launcher
// holds its read end until exec, and a pipe without readers polls POLLERR.
func dieWithLauncher(status *os.File) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("set the parent-death signal: %w", err)
	}
	fds := []unix.PollFd{{Fd: int32(status.Fd()), Events: unix.POLLOUT}}
	for {
		_, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll the status pipe: %w", err)
		}
		break
	}
	if fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
		return errLauncherGone
	}
	return nil
}
