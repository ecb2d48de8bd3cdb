package proxy

import (
	"os"

	"golang.org/x/sys/unix"
)

// PollableInput returns a reader on the same open file as f (the client's
// stdin) in non-blocking mode, so that Go's poller waits for the next
// message instead of a thread blocked in read(2). A blocked read keeps the
// runtime taking the thread's processor away and handing it back around
// every message; with the poller, the goroutine that reads also decides and
// forwards with no hand-off. Only pipes and sockets are converted: the
// non-blocking flag belongs to the open file, and a terminal's is shared
// with the shell. restore puts blocking mode back (call it when the run
// ends); for anything else f is returned as is and restore does nothing.
func PollableInput(f *os.File) (in *os.File, restore func()) {
	fd := int(f.Fd())
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return f, func() {}
	}
	if kind := st.Mode & unix.S_IFMT; kind != unix.S_IFIFO && kind != unix.S_IFSOCK {
		return f, func() {}
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return f, func() {}
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return f, func() {}
	}
	// os.NewFile registers a descriptor that is already non-blocking with
	// the poller.
	return os.NewFile(uintptr(dup), f.Name()), func() { _ = unix.SetNonblock(fd, false) }
}
