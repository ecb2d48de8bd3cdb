package launcher_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// TestFenceIOUringHostUnixSocket: a scope with "allow_io_uring": true lets
// the server make a unix socket with IORING_OP_SOCKET (the filter, which
// refuses socket(AF_UNIX), never sees it) and connect it with
// IORING_OP_CONNECT to a pathname socket of the host outside the scope
// (Landlock ABI 7 does not decide connects to pathname sockets): on main
// before, under --no-namespaces the host's service answered (Docker's,
// systemd's private socket, D-Bus would have, for a uid they accept). With
// the mount namespace the path is not there; without it the run is now
// refused (TestFenceAllowIOUring).
func TestFenceIOUringHostUnixSocket(t *testing.T) {
	testFenceIOUringHostUnixSocket(t, false)
}

func testFenceIOUringHostUnixSocket(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "host-service.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 64)
			n, _ := c.Read(buf)
			_, _ = c.Write([]byte("HOST-SERVICE-SECRET-42 got " + string(buf[:n])))
			c.Close()
		}
	}()
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "allow_io_uring": true})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	runCases(t, s, []fenceCase{
		{name: "a host unix socket through io_uring", req: map[string]any{"op": "uring_unix_connect", "path": sock, "data": "hello"}, errno: []string{"ENOENT"}, exact: true},
	})
	s.Close()
}
