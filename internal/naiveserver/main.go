// Command naiveserver is a deliberately naive test server: it does whatever
// a JSON line on stdin tells it (read, write, exec, connect, signal, ...)
// and reports the result as a JSON line on stdout. It checks no paths at
// all, so anything it is refused was refused by the kernel.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Request is one instruction.
type Request struct {
	Op   string   `json:"op"`
	Path string   `json:"path,omitempty"`
	To   string   `json:"to,omitempty"`
	Data string   `json:"data,omitempty"`
	Addr string   `json:"addr,omitempty"`
	Args []string `json:"args,omitempty"`
	PID  int      `json:"pid,omitempty"`
	FD   int      `json:"fd,omitempty"`
	Sig  int      `json:"sig,omitempty"`
	// Generic arguments for the attack ops (ops_*.go).
	N     int    `json:"n,omitempty"`
	Mode  uint32 `json:"mode,omitempty"`
	Flags int    `json:"flags,omitempty"`
	Name  string `json:"name,omitempty"`
	Value string `json:"value,omitempty"`
}

// Response is its outcome.
type Response struct {
	OK    bool   `json:"ok"`
	Errno string `json:"errno,omitempty"`
	Error string `json:"error,omitempty"`
	Data  string `json:"data,omitempty"`
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "sleep" {
		time.Sleep(5 * time.Minute) // a descendant that tries to outlive the run
		return
	}
	if lifeMode() {
		return
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req Request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			_ = out.Encode(Response{Error: "bad request: " + err.Error()})
			continue
		}
		data, err := do(req)
		resp := Response{OK: err == nil, Data: data}
		if err != nil {
			resp.Error = err.Error()
			var en syscall.Errno
			if errors.As(err, &en) {
				resp.Errno = unix.ErrnoName(en)
			}
		}
		_ = out.Encode(resp)
	}
}

// op is one instruction's implementation.
type op func(Request) (string, error)

// attackOps are the ops of the hostile-server tests, one map per attack
// class, each in its own file (ops_*.go), so that classes grow apart.
var attackOps = mergeOps(netOps, procOps, metaOps, execOps, lifeOps, nsOps, fileOps, fileMetaOps, pidfdOps, abstractOps, signalOps, surfaceOps, fsIoctlOps, modeOps, uringOps, maskOps)

func mergeOps(sets ...map[string]op) map[string]op {
	all := map[string]op{}
	for _, set := range sets {
		for name, f := range set {
			if _, dup := all[name]; dup {
				panic("naiveserver: op " + name + " defined twice")
			}
			all[name] = f
		}
	}
	return all
}

func do(r Request) (string, error) {
	if f, ok := attackOps[r.Op]; ok {
		return f(r)
	}
	switch r.Op {
	case "ping":
		return "pong", nil
	case "pid":
		return strings.Join([]string{itoa(os.Getpid()), itoa(os.Getppid())}, " "), nil
	case "env":
		return strings.Join(os.Environ(), "\n"), nil
	case "read":
		b, err := os.ReadFile(r.Path)
		return string(b), err
	case "readdir":
		ents, err := os.ReadDir(r.Path)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return strings.Join(names, ","), err
	case "write":
		return "", os.WriteFile(r.Path, []byte(r.Data), 0o644)
	case "append":
		f, err := os.OpenFile(r.Path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return "", err
		}
		defer f.Close()
		_, err = f.WriteString(r.Data)
		return "", err
	case "truncate":
		return "", os.Truncate(r.Path, 0)
	case "mkdir":
		return "", os.Mkdir(r.Path, 0o755)
	case "remove":
		return "", os.Remove(r.Path)
	case "rename":
		return "", os.Rename(r.Path, r.To)
	case "symlink":
		return "", os.Symlink(r.To, r.Path)
	case "link":
		return "", os.Link(r.Path, r.To)
	case "chmod":
		return "", os.Chmod(r.Path, 0o755)
	case "exec":
		out, err := exec.Command(r.Path, r.Args...).CombinedOutput()
		return string(out), unwrapExec(err)
	case "connect":
		c, err := net.Dial("tcp", r.Addr)
		if err == nil {
			c.Close()
		}
		return "", unwrapNet(err)
	case "connect_mptcp":
		return "", rawConnect(r.Addr, unix.IPPROTO_MPTCP)
	case "connect_sctp":
		return "", rawConnect(r.Addr, unix.IPPROTO_SCTP)
	case "bind":
		l, err := net.Listen("tcp", r.Addr)
		if err == nil {
			l.Close()
		}
		return "", unwrapNet(err)
	case "udp":
		c, err := net.Dial("udp", r.Addr)
		if err == nil {
			_, err = c.Write([]byte("x"))
			c.Close()
		}
		return "", unwrapNet(err)
	case "unix":
		c, err := net.Dial("unix", r.Path) // "@name" is an abstract socket
		if err == nil {
			c.Close()
		}
		return "", unwrapNet(err)
	case "kill":
		return "", syscall.Kill(r.PID, syscall.Signal(r.Sig))
	case "readfd":
		buf := make([]byte, 4096)
		n, err := syscall.Pread(r.FD, buf, 0)
		if n < 0 {
			n = 0
		}
		return string(buf[:n]), err
	case "fds":
		ents, err := os.ReadDir("/proc/self/fd")
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return strings.Join(names, ","), err
	case "spawn":
		// A child of this server (its own binary, which the fence lets it
		// exec) that stays behind.
		self, err := os.Executable()
		if err != nil {
			return "", err
		}
		c := exec.Command(self, "sleep")
		if err := c.Start(); err != nil {
			return "", unwrapExec(err)
		}
		return itoa(c.Process.Pid), nil
	case "setsid":
		_, err := unix.Setsid()
		return "", err
	case "openloop":
		// N open+close of Path, timed inside the server: the fence's cost
		// per open without any IPC in the measurement.
		n := r.FD
		start := time.Now()
		for i := 0; i < n; i++ {
			fd, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return "", err
			}
			unix.Close(fd)
		}
		return strconv.FormatInt(time.Since(start).Nanoseconds(), 10), nil
	case "denyloop":
		// N opens of Path, failures counted and not stopping the loop: a
		// burst of Landlock denials, as a hostile server floods the audit
		// log to have the kernel lose records.
		failed := 0
		for i := 0; i < r.N; i++ {
			fd, err := unix.Open(r.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				failed++
				continue
			}
			unix.Close(fd)
		}
		return strconv.Itoa(failed), nil
	case "io_uring":
		var params [120]byte
		fd, _, e := syscall.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
		if e != 0 {
			return "", e
		}
		syscall.Close(int(fd))
		return "", nil
	default:
		return "", errors.New("unknown op " + r.Op)
	}
}

func rawConnect(addr string, proto int) error {
	ta, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, proto)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	sa := &unix.SockaddrInet4{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To4())
	return unix.Connect(fd, sa)
}

func unwrapExec(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func unwrapNet(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}

func itoa(n int) string { return strconv.Itoa(n) }
