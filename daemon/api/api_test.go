package api_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/api"
	"github.com/mcpwarden/mcpwarden/daemon/client"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// recorder is a Handler that keeps what it was asked.
type recorder struct {
	mu   sync.Mutex
	regs []api.Registration
	err  error
}

func (r *recorder) Register(_ context.Context, reg *api.Registration) (uint32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return 0, r.err
	}
	r.regs = append(r.regs, *reg)
	return uint32(len(r.regs)), nil
}
func (r *recorder) Unregister(context.Context, string) error { return nil }
func (r *recorder) Status(context.Context) schema.Health {
	return schema.Health{Component: "daemon", AuditStream: "on"}
}

func serve(t *testing.T, h api.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d", "daemon.sock")
	srv, err := api.Listen(sock, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sock
}

func registration(t *testing.T) api.Registration {
	t.Helper()
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &schema.Scope{ScopeID: "s", AllowedPaths: []string{"ws"}, AccessMode: schema.AccessRead,
		ToolAllowlist: []string{"t"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5}
	cs, err := schema.Canonicalize(s, base, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return api.Registration{RunID: "run1", RootPID: os.Getpid(), Mode: schema.ModeEnforce, Scope: cs, ScopeHash: cs.Hash}
}

func TestRegisterRoundTrip(t *testing.T) {
	rec := &recorder{}
	sock := serve(t, rec)
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", st.Mode().Perm())
	}
	if dst, _ := os.Stat(filepath.Dir(sock)); dst.Mode().Perm() != 0o700 {
		t.Errorf("socket dir mode %v, want 0700", dst.Mode().Perm())
	}
	c := client.New(sock)
	slot, err := c.Register(context.Background(), registration(t))
	if err != nil || slot != 1 {
		t.Fatalf("register: slot %d err %v", slot, err)
	}
	h, err := c.Status(context.Background())
	if err != nil || h.Component != "daemon" {
		t.Fatalf("status: %+v %v", h, err)
	}
	rec.err = errors.New("root pid 1 does not exist")
	if _, err := c.Register(context.Background(), registration(t)); !errors.Is(err, client.ErrDaemon) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("refusal not passed on: %v", err)
	}
}

func TestRefusedRequests(t *testing.T) {
	sock := serve(t, &recorder{})
	good := registration(t)
	badPath := registration(t)
	badPath.Runtime = append(badPath.Runtime, struct {
		Path  string `json:"path"`
		Write bool   `json:"write,omitempty"`
	}{Path: "/usr/../etc"})
	tests := map[string]string{
		"not json":         `{"version":1,"op":`,
		"unknown field":    `{"version":1,"op":"status","extra":1}`,
		"wrong version":    `{"version":2,"op":"status"}`,
		"unknown op":       `{"version":1,"op":"drop_all"}`,
		"register without": `{"version":1,"op":"register"}`,
		"trailing data":    `{"version":1,"op":"status"} {}`,
		"case variant":     `{"version":1,"OP":"status"}`,
		"case-variant dup": `{"version":1,"op":"status","Op":"unregister"}`,
		"duplicate":        `{"version":1,"op":"unregister","op":"status"}`,
		"nested case dup":  `{"version":1,"op":"register","register":{"run_id":"r","RUN_ID":"s","root_pid":99,"mode":"enforce","scope":{},"scope_hash":""}}`,
		"lone surrogate":   `{"version":1,"op":"stat\ud800us"}`,
		"pid 1":            `{"version":1,"op":"register","register":{"run_id":"r","root_pid":1,"mode":"enforce","scope":{},"scope_hash":""}}`,
		"bad mode":         `{"version":1,"op":"register","register":{"run_id":"r","root_pid":99,"mode":"yolo","scope":{},"scope_hash":""}}`,
		"run id with path": `{"version":1,"op":"register","register":{"run_id":"../x","root_pid":99,"mode":"enforce","scope":{},"scope_hash":""}}`,
		"no scope":         `{"version":1,"op":"register","register":{"run_id":"r","root_pid":99,"mode":"enforce","scope_hash":""}}`,
	}
	_ = good
	for name, line := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(line + "\n")); err != nil {
				t.Fatal(err)
			}
			resp, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(resp, `"ok":false`) || !strings.Contains(resp, `"error"`) {
				t.Errorf("accepted: %s", resp)
			}
		})
	}
	t.Run("unclean runtime path", func(t *testing.T) {
		if err := badPath.Validate(); err == nil {
			t.Error("runtime path with .. accepted")
		}
	})
}

func TestOversizeRequest(t *testing.T) {
	sock := serve(t, &recorder{})
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		big := strings.Repeat("x", api.MaxMessageSize+10)
		_, _ = c.Write([]byte(`{"version":1,"op":"` + big))
	}()
	resp, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(resp, "larger than") {
		t.Errorf("oversize request: %s", resp)
	}
}

func TestSocketTakeover(t *testing.T) {
	sock := serve(t, &recorder{})
	if _, err := api.Listen(sock, &recorder{}, nil); err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Errorf("second daemon on a live socket: %v", err)
	}
	notSock := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notSock, nil, 0o600)
	if _, err := api.Listen(notSock, &recorder{}, nil); err == nil {
		t.Error("listened over a regular file")
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"version":1,"op":"status"}`))
	f.Add([]byte(`{"version":1,"op":"register","register":{"run_id":"r","root_pid":99,"mode":"enforce","scope":{"scope_id":"s","allowed_paths":[{"path":"/a","kind":"dir"}]},"scope_hash":"x","runtime":[{"path":"/usr/lib"}]}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := api.DecodeRequest(line)
		if err != nil {
			return
		}
		if req.Version != api.Version {
			t.Fatal("wrong version accepted")
		}
		if req.Register != nil && req.Register.Validate() == nil {
			for _, p := range req.Register.Scope.AllowedPaths {
				if !filepath.IsAbs(p.Path) || filepath.Clean(p.Path) != p.Path {
					t.Fatalf("unclean path %q validated", p.Path)
				}
			}
			for _, p := range req.Register.Runtime {
				if !filepath.IsAbs(p.Path) || filepath.Clean(p.Path) != p.Path {
					t.Fatalf("unclean runtime path %q validated", p.Path)
				}
			}
		}
	})
}

// TestStatusNamesPathKey: the status answer carries the key id the server
// was given, which launchers compare with their own.
func TestStatusNamesPathKey(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d", "daemon.sock")
	srv, err := api.Listen(sock, &recorder{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := schema.NewPathHasher(make([]byte, schema.PathKeySize))
	srv.PathKeyID = h.KeyID()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	info, err := client.New(sock).Info(context.Background())
	if err != nil || info.PathKeyID != h.KeyID() || info.Health.Component != "daemon" {
		t.Fatalf("info %+v, %v; want key id %s", info, err, h.KeyID())
	}
}

// TestRefusalsAreCounted: what the server refuses before the handler sees
// it is counted (metrics read it), what the handler answers is not, and a
// peer that is neither root nor the daemon's user is counted apart.
func TestRefusalsAreCounted(t *testing.T) {
	// Not under t.TempDir(), whose parent only this uid may enter: the
	// peer case below connects as nobody.
	top, err := os.MkdirTemp("", "mcpwarden-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(top, "d", "daemon.sock")
	rec := &recorder{}
	srv, err := api.Listen(sock, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	send := func(line string) string {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, line := range []string{`{"version":1,"op":`, `{"version":1,"op":"drop_all"}`, `{"version":1,"op":"register"}`,
		`{"version":1,"op":"register","register":{"run_id":"r","root_pid":1,"mode":"enforce","scope":{},"scope_hash":""}}`} {
		send(line)
	}
	send(`{"version":1,"op":"status"}`)
	c := client.New(sock)
	if _, err := c.Register(ctx, registration(t)); err != nil {
		t.Fatal(err)
	}
	rec.err = errors.New("root pid does not exist")
	if _, err := c.Register(ctx, registration(t)); err == nil {
		t.Fatal("the handler's refusal was not passed on")
	}
	if peer, request := srv.Refused(); peer != 0 || request != 4 {
		t.Fatalf("Refused() = peer %d, request %d; want 0 and 4 (the handler's own refusal is the handler's to count)", peer, request)
	}

	if os.Geteuid() != 0 {
		t.Log("not root: the peer refusal is not tried (it needs another uid)")
		return
	}
	// Open the directory and socket to everyone, so only the peer check
	// stands between nobody and the daemon.
	if err := os.Chmod(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	// A connection from nobody (Python's socket module is a client
	// that is neither root nor this test's uid).
	// Debian's, not a shim under root's home that nobody cannot reach.
	py := "/usr/bin/python3"
	testenv.RequireFile(t, py, "scripts/test-env.sh install installs python3")
	cmd := exec.Command(py, "-c", `import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
# The server answers a refused peer at once and closes: read, do not send.
print(s.makefile().readline())`, sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "permission denied") {
		t.Fatalf("status as nobody: %v: %s (want permission denied)", err, out)
	}
	if peer, _ := srv.Refused(); peer != 1 {
		t.Fatalf("a connection from nobody: Refused() peer = %d, want 1", peer)
	}
}
