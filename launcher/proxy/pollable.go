package proxy

import (
	"io"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// PollableStdio returns a reader on the client's stdin and a writer on its
// stdout for the proxy. The goroutine that reads a message also decides and
// forwards it, with no hand-off.
//
// stdin, when it is a pipe or a socket whose open file is blocking, is read
// through a descriptor of its own with blocking read(2) (see blockingFile):
// one system call per message. Its blocking mode is left alone while
// messages come close together; a reader idle between them waits in the
// poller with the open file made non-blocking for the wait, and restore
// puts blocking mode back (see blockingFile). A stdin
// that is the same socket as stdout, or that is non-blocking already, is
// read through Go's poller instead (rawFile).
//
// stdout is written with raw, non-blocking write(2) through the poller
// (rawFile): a write that fits is one system call with none of the
// runtime's bookkeeping. It is converted only when it is a pipe or a socket
// (the non-blocking flag belongs to the open file, and a terminal's is
// shared with the shell) and is not the same pipe or socket as stderr
// (whose writes are not made through the poller: a full pipe would make
// them fail instead of wait). Where stdin and stdout are one socket, both
// are converted, so every use of it waits in the poller. Anything else is
// returned as it is.
//
// restore closes the proxy's own descriptors and then puts blocking mode
// back on the client's descriptors it made non-blocking; call it when the
// proxy is done with them. Later reads and writes fail as on a closed file.
// A read waiting in the poller at restore fails so too; one blocked in
// read(2) holds its thread (not a processor: the runtime knows it is in a
// system call) until the client writes or closes, which a process that
// exits after the proxy never waits for.
func PollableStdio(stdin, stdout, stderr *os.File) (in io.Reader, out io.Writer, restore func()) {
	errSt, errOK := fstat(stderr)
	var undo []int
	var dups []io.Closer
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
	out = convert(stdout)
	if _, ok := out.(*rawFile); ok && sameFile(stdin, stdout) {
		in = convert(stdin)
	} else {
		in = blockingStdin(stdin, &dups, convert)
	}
	return in, out, sync.OnceFunc(func() {
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

// blockingStdin returns a blockingFile on a descriptor of its own for a
// stdin that is a blocking pipe or socket; convert (the poller's way) for
// one that is non-blocking already; anything else as it is.
func blockingStdin(f *os.File, dups *[]io.Closer, convert func(*os.File) io.ReadWriter) io.Reader {
	st, ok := fstat(f)
	if !ok {
		return f
	}
	if kind := st.Mode & unix.S_IFMT; kind != unix.S_IFIFO && kind != unix.S_IFSOCK {
		return f
	}
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return f
	}
	if fl&unix.O_NONBLOCK != 0 {
		return convert(f)
	}
	dup, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return f
	}
	// A blocking descriptor: os.NewFile leaves it out of the poller, and
	// its Read is a blocking read(2) through the runtime's system-call path.
	// (Closed at restore as a blockingFile: that also ends a wait in the
	// poller and puts back the blocking mode an idle wait took off.)
	nf := os.NewFile(uintptr(dup), f.Name())
	bf := &blockingFile{f: nf}
	*dups = append(*dups, bf)
	return bf
}

// sameFile reports whether a and b are the same pipe or socket.
func sameFile(a, b *os.File) bool {
	sa, okA := fstat(a)
	sb, okB := fstat(b)
	return okA && okB && sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// ReaderProcs is the GOMAXPROCS a process running the proxy on its own
// stdio should use: the machine's processors and two more. The proxy's two
// readers (client and server) each hold a processor while blocked in
// read(2); the scheduler's monitor leaves a processor with a thread in a
// system call for up to 10 ms only while another processor is idle
// (runtime/proc.go, retake). With GOMAXPROCS at the number of processors
// (two on a small machine), both readers blocked would leave none idle,
// and the monitor would hand their processors off, and a thread would have
// to take one back, on every message.
func ReaderProcs() int {
	return max(runtime.GOMAXPROCS(0), runtime.NumCPU()) + 2
}
