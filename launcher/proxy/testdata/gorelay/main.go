// Command gorelay is the floor of a Go process in the proxy's place: the
// proxy's I/O structure with none of its work. It starts argv[1:] with two
// pipes and copies bytes both ways, one goroutine per direction, each
// reading with a blocking read(2) through the runtime's system-call path
// (os.File's Read on a blocking descriptor, as the proxy's readers) and
// writing with a raw write(2) (as the proxy's writers), GOMAXPROCS at the
// machine's processors + 2 and a yield every 9 ms (as `mcpwarden run`). No
// parsing, no decision, no record. The proxy benchmarks build it with
// `go build`; the C relay (../relay.c) is the same shape without Go's
// runtime.
package main

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	if len(os.Args) < 2 {
		os.Stderr.WriteString("usage: gorelay SERVER [ARGS...]\n")
		os.Exit(64)
	}
	runtime.GOMAXPROCS(runtime.NumCPU() + 2)
	inR, inW, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	if err := cmd.Start(); err != nil {
		os.Stderr.WriteString("gorelay: " + err.Error() + "\n")
		os.Exit(127)
	}
	inR.Close()
	outW.Close()
	go copyTo(blocking(os.Stdin), descriptor(inW))
	copyTo(blocking(outR), 1) // the server's stdout ended
	_ = cmd.Wait()
}

// blocking returns a blocking descriptor of f's open file, outside Go's
// poller.
func blocking(f *os.File) *os.File {
	fd := descriptor(f)
	if err := syscall.SetNonblock(fd, false); err != nil {
		panic(err)
	}
	return os.NewFile(uintptr(fd), "in")
}

// descriptor returns a duplicate descriptor of f's open file (for raw
// reads and writes) and closes f.
func descriptor(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		panic(err)
	}
	fd := -1
	if cerr := rc.Control(func(d uintptr) { fd, err = syscall.Dup(int(d)) }); cerr != nil || err != nil {
		panic("dup")
	}
	f.Close()
	return fd
}

// copyTo copies from to fd until from ends, then closes fd: EOF on one
// side becomes EOF on the other.
func copyTo(from *os.File, fd int) {
	defer syscall.Close(fd)
	buf := make([]byte, 65536)
	yielded := time.Now()
	for {
		if now := time.Now(); now.Sub(yielded) >= 9*time.Millisecond {
			yielded = now
			runtime.Gosched()
		}
		n, err := from.Read(buf)
		for off := 0; off < n; {
			w, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&buf[off])), uintptr(n-off))
			switch {
			case e == syscall.EAGAIN:
				waitWritable(fd)
			case e != 0:
				return
			default:
				off += int(w)
			}
		}
		if err != nil {
			return
		}
	}
}

// waitWritable waits for a full pipe (the write end Go made non-blocking)
// to take more.
func waitWritable(fd int) {
	type pollFd struct {
		fd            int32
		events, revts int16
	}
	p := pollFd{fd: int32(fd), events: 0x4} // POLLOUT
	syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&p)), 1, 0, 0, 0, 0)
}
