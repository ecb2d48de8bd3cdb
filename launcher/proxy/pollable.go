package proxy

import (
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// PollableStdio returns a reader on the client's stdin and a writer on its
// stdout that go through Go's poller with raw, non-blocking system calls
// (see rawFile), so that the goroutine that reads a message also decides
// and forwards it with no hand-off, and no thread is taken off its
// processor around every message.
//
// Each of stdin and stdout is converted only when it is a pipe or a socket
// (the non-blocking flag belongs to the open file, and a terminal's is
// shared with the shell) and is not the same pipe or socket as stderr
// (whose writes are not made through the poller: a full pipe would make
// them fail instead of wait). Where stdin and stdout are one socket, both
// are converted, so every use of it waits in the poller. Anything else is
// returned as it is. restore closes the converted readers and writers
// (a read or write still in progress finishes first; later ones fail as on
// a closed file, so none can block a thread on a descriptor that is
// blocking again) and then puts blocking mode back on the client's
// descriptors; call it when the proxy is done with them.
func PollableStdio(stdin, stdout, stderr *os.File) (in io.Reader, out io.Writer, restore func()) {
	errSt, errOK := fstat(stderr)
	var undo []int
	var dups []*os.File
	convert := func(f *os.File) io.ReadWriter {
		st, ok := fstat(f)
		if !ok {
			return f
		}
		if kind := st.Mode & unix.S_IFMT; kind != unix.S_IFIFO && kind != unix.S_IFSOCK {
			return f
		}
		if errOK && st.Dev == errSt.Dev && st.Ino == errSt.Ino {
			return f
		}
		fd := int(f.Fd())
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return f
		}
		if err := unix.SetNonblock(dup, true); err != nil {
			unix.Close(dup)
			return f
		}
		undo = append(undo, fd)
		// os.NewFile registers a descriptor that is already non-blocking
		// with the poller.
		nf := os.NewFile(uintptr(dup), f.Name())
		dups = append(dups, nf)
		if r := newRawFile(nf); r != nil {
			return r
		}
		return nf
	}
	return convert(stdin), convert(stdout), sync.OnceFunc(func() {
		for _, f := range dups {
			_ = f.Close()
		}
		for _, fd := range undo {
			_ = unix.SetNonblock(fd, false)
		}
	})
}

func fstat(f *os.File) (unix.Stat_t, bool) {
	var st unix.Stat_t
	if f == nil {
		return st, false
	}
	err := unix.Fstat(int(f.Fd()), &st)
	return st, err == nil
}
