// Package unixsock binds and connects Unix sockets at any path, however
// long. A socket's address holds at most 107 bytes of path (sun_path is
// 108 with its NUL), so a socket in a deep state directory (a test's
// temporary directory under a long TMPDIR, an operator's --state-dir)
// could not be made at all. A longer path is reached through its
// directory: the directory is opened (O_PATH) and the socket named as
// /proc/self/fd/N/NAME, which the kernel resolves to that very directory.
// Only the socket's own name must then be short (about 85 bytes).
package unixsock

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// MaxPath is the longest path a Unix socket address holds on Linux.
const MaxPath = 107

// procPrefix is the longest /proc/self/fd/N/ (N of up to 10 digits).
const procPrefix = len("/proc/self/fd/") + 10 + 1

// MaxName is the longest last element a socket path may have.
const MaxName = MaxPath - procPrefix

// CheckPath says whether a socket can be made at path: its last element
// must be at most MaxName bytes.
func CheckPath(path string) error {
	if len(path) <= MaxPath {
		return nil
	}
	if name := filepath.Base(path); len(name) > MaxName {
		return fmt.Errorf("socket name %q is %d bytes long, over the %d a socket in a long directory may have", name, len(name), MaxName)
	}
	return nil
}

// through calls f with an address for path that fits a socket address:
// path itself when it fits, else /proc/self/fd/N/NAME with N the open
// directory of path (open until f returns).
func through(path string, f func(addr string) error) error {
	if len(path) <= MaxPath {
		return f(path)
	}
	if err := CheckPath(path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the socket's directory: %w", &pathError{op: "open", path: dir, err: err})
	}
	defer unix.Close(fd)
	return f("/proc/self/fd/" + strconv.Itoa(fd) + "/" + filepath.Base(path))
}

type pathError struct {
	op, path string
	err      error
}

func (e *pathError) Error() string { return e.op + " " + e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

// Listen listens on a Unix stream socket at path. Closing the listener
// does not remove the socket file: the caller removes it by its path
// (the address the listener was bound to may have been a descriptor's).
func Listen(path string) (*net.UnixListener, error) {
	var ln *net.UnixListener
	err := through(path, func(addr string) error {
		var err error
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
		return err
	})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// Dial connects to the Unix stream socket at path.
func Dial(ctx context.Context, path string) (*net.UnixConn, error) {
	var c net.Conn
	err := through(path, func(addr string) error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "unix", addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}
