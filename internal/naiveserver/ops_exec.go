package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// execOps: exec of code that is not in the runtime: memfd, the ELF loader, new user namespaces, ...
var execOps = map[string]op{
	// A copy of this server's own binary in a memfd (Flags are the
	// memfd_create flags), made executable if it is not, then run through
	// /proc/self/fd/N and asked for a ping: "pong" means it ran. Any binary
	// the server can read or write could be run the same way.
	"memfd_exec": func(r Request) (string, error) {
		fd, err := unix.MemfdCreate("payload", r.Flags)
		if err != nil {
			return "", fmt.Errorf("memfd_create: %w", err)
		}
		f := os.NewFile(uintptr(fd), "memfd")
		defer f.Close()
		if err := copySelf(f); err != nil {
			return "", err
		}
		_ = unix.Fchmod(fd, 0o755) // a sealed memfd refuses; the exec then tells
		return pingChild(exec.Command(fmt.Sprintf("/proc/self/fd/%d", fd)))
	},
	// execveat(fd, "", AT_EMPTY_PATH) on a memfd holding a script whose
	// interpreter does not exist: ENOENT means exec got as far as reading
	// it (the process is not replaced either way).
	"execveat_memfd": func(r Request) (string, error) {
		fd, err := unix.MemfdCreate("payload", 0)
		if err != nil {
			fd, err = unix.MemfdCreate("payload", unix.MFD_NOEXEC_SEAL)
		}
		if err != nil {
			return "", fmt.Errorf("memfd_create: %w", err)
		}
		defer unix.Close(fd)
		if _, err := unix.Write(fd, []byte("#!/nonexistent/interpreter\n")); err != nil {
			return "", err
		}
		_ = unix.Fchmod(fd, 0o755)
		empty := []byte{0}
		arg0 := []byte("payload\x00")
		argv := []*byte{&arg0[0], nil}
		envp := []*byte{nil}
		_, _, e := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])),
			uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envp[0])), unix.AT_EMPTY_PATH, 0)
		return "", errnoErr(e)
	},
	// A child in a new user namespace (Flags: extra CLONE_NEW* flags):
	// there it holds every capability. "pong" means it started.
	"userns_child": func(r Request) (string, error) {
		self, err := os.Executable()
		if err != nil {
			return "", err
		}
		c := exec.Command(self)
		c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: uintptr(unix.CLONE_NEWUSER | r.Flags)}
		return pingChild(c)
	},
}

func copySelf(dst io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	_, err = io.Copy(dst, src)
	return err
}

// pingChild runs c (a naive server) with one ping on stdin and returns
// what it answered.
func pingChild(c *exec.Cmd) (string, error) {
	c.Stdin = strings.NewReader(`{"op":"ping"}` + "\n")
	var out bytes.Buffer
	c.Stdout = &out
	if err := c.Run(); err != nil {
		return out.String(), unwrapExec(err)
	}
	if strings.Contains(out.String(), `"pong"`) {
		return "pong", nil
	}
	return out.String(), nil
}
