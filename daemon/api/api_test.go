package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/api"
	"github.com/mcpwarden/mcpwarden/daemon/client"
	"github.com/mcpwarden/mcpwarden/daemon/procinfo"
	"github.com/mcpwarden/mcpwarden/internal/localsock"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// recorder is a Handler that keeps what it was asked.
type recorder struct {
	mu      sync.Mutex
	regs    []api.Registration
	roots   []int // pid of each registration's pidfd
	records []schema.Event
	err     error
}

func (r *recorder) Register(_ context.Context, _ *localsock.Peer, reg *api.Registration, root *os.File) (api.Registered, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return api.Registered{}, r.err
	}
	p, err := procinfo.FromPidfd(root)
	if err != nil {
		return api.Registered{}, err
	}
	r.regs = append(r.regs, *reg)
	r.roots = append(r.roots, p.PID)
	return api.Registered{Slot: uint32(len(r.regs)), RootPID: p.PID}, nil
}
func (r *recorder) Unregister(context.Context, *localsock.Peer, string) error { return nil }
func (r *recorder) Records(_ context.Context, _ *localsock.Peer, events []schema.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, events...)
	return nil
}
func (r *recorder) Status(context.Context) schema.Health {
	return schema.Health{Component: "daemon", AuditStream: "on"}
}

func serve(t *testing.T, h api.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d", "daemon.sock")
	srv, err := api.Listen(api.Config{Path: sock}, h)
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
	return api.Registration{RunID: "run1", Mode: schema.ModeEnforce, Scope: cs, ScopeHash: cs.Hash}
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
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	reg, err := c.Register(context.Background(), registration(t), child.Process.Pid)
	rec.mu.Lock()
	roots := slices.Clone(rec.roots)
	rec.mu.Unlock()
	if err != nil || reg.Slot != 1 || reg.RootPID != child.Process.Pid || roots[0] != child.Process.Pid {
		t.Fatalf("register: %+v err %v", reg, err)
	}
	h, err := c.Status(context.Background())
	if err != nil || h.Component != "daemon" {
		t.Fatalf("status: %+v %v", h, err)
	}
	rec.mu.Lock()
	rec.err = errors.New("root pid 1 does not exist")
	rec.mu.Unlock()
	if _, err := c.Register(context.Background(), registration(t), child.Process.Pid); !errors.Is(err, client.ErrDaemon) || !strings.Contains(err.Error(), "does not exist") {
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
		"not json":          `{"version":2,"op":`,
		"unknown field":     `{"version":2,"op":"status","extra":1}`,
		"old version":       `{"version":1,"op":"status"}`,
		"unknown op":        `{"version":2,"op":"drop_all"}`,
		"register without":  `{"version":2,"op":"register"}`,
		"trailing data":     `{"version":2,"op":"status"} {}`,
		"case variant":      `{"version":2,"OP":"status"}`,
		"case-variant dup":  `{"version":2,"op":"status","Op":"unregister"}`,
		"duplicate":         `{"version":2,"op":"unregister","op":"status"}`,
		"nested case dup":   `{"version":2,"op":"register","register":{"run_id":"r","RUN_ID":"s","mode":"enforce","scope":{},"scope_hash":""}}`,
		"lone surrogate":    `{"version":2,"op":"stat\ud800us"}`,
		"a pid, no pidfd":   `{"version":2,"op":"register","register":{"run_id":"r","root_pid":1234,"mode":"enforce","scope":{"scope_id":"s","allowed_paths":[{"path":"/a","kind":"dir"}]},"scope_hash":"x"}}`,
		"no pidfd":          `{"version":2,"op":"register","register":{"run_id":"r","mode":"enforce","scope":{"scope_id":"s","allowed_paths":[{"path":"/a","kind":"dir"}]},"scope_hash":"x"}}`,
		"bad mode":          `{"version":2,"op":"register","register":{"run_id":"r","mode":"yolo","scope":{},"scope_hash":""}}`,
		"run id with path":  `{"version":2,"op":"register","register":{"run_id":"../x","mode":"enforce","scope":{},"scope_hash":""}}`,
		"no scope":          `{"version":2,"op":"register","register":{"run_id":"r","mode":"enforce","scope_hash":""}}`,
		"no records":        `{"version":2,"op":"records","records":[]}`,
		"a forged finding":  `{"version":2,"op":"records","records":[` + findingJSON + `]}`,
		"a forged file_op":  `{"version":2,"op":"records","records":[` + strings.Replace(findingJSON, `"kind":"finding"`, `"kind":"file_op"`, 1) + `]}`,
		"an unknown field":  `{"version":2,"op":"records","records":[` + strings.Replace(launchJSON, `"kind"`, `"extra":1,"kind"`, 1) + `]}`,
		"two runs":          `{"version":2,"op":"records","records":[` + launchJSON + `,` + strings.Replace(launchJSON, "run-a", "run-b", 1) + `]}`,
		"an invalid record": `{"version":2,"op":"records","records":[` + strings.Replace(launchJSON, `"phase":"start"`, `"phase":"sideways"`, 1) + `]}`,
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
		_, _ = c.Write([]byte(`{"version":2,"op":"` + big))
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
	if _, err := api.Listen(api.Config{Path: sock}, &recorder{}); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("second daemon on a live socket: %v", err)
	}
	notSock := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notSock, nil, 0o600)
	if _, err := api.Listen(api.Config{Path: notSock}, &recorder{}); err == nil {
		t.Error("listened over a regular file")
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"version":2,"op":"status"}`))
	f.Add([]byte(`{"version":2,"op":"register","register":{"run_id":"r","mode":"enforce","scope":{"scope_id":"s","allowed_paths":[{"path":"/a","kind":"dir"}]},"scope_hash":"x","runtime":[{"path":"/usr/lib"}]}}`))
	f.Add([]byte(`{"version":2,"op":"records","records":[` + launchJSON + `]}`))
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
		if len(req.Records) > 0 && api.CheckRecords(req.Records) == nil {
			for _, e := range req.Records {
				if e.Kind != schema.KindLaunch && e.Kind != schema.KindDecision {
					t.Fatalf("a %s record passed the check", e.Kind)
				}
			}
		}
	})
}

func launchEvent(run string) schema.Event {
	e := schema.LocalOrigin().NewEvent(schema.KindLaunch, run, "s", "sha256:"+strings.Repeat("0", 64), time.Now())
	e.Launch = &schema.Launch{Phase: schema.PhaseStart, Mode: schema.ModeEnforce, LandlockABI: 7, ServerExe: "node"}
	return e
}

func eventJSON(e schema.Event) string {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	return string(b)
}

var (
	launchJSON  = eventJSON(launchEvent("run-a"))
	findingJSON = func() string {
		e := schema.LocalOrigin().NewEvent(schema.KindFinding, "run-a", "s", "sha256:"+strings.Repeat("0", 64), time.Now())
		e.Finding = &schema.Finding{Type: schema.FindingEscape, Severity: schema.SeverityCritical, EvidenceIDs: []string{}}
		return eventJSON(e)
	}()
)

func TestRecordsThroughTheSink(t *testing.T) {
	rec := &recorder{}
	sock := serve(t, rec)
	sink := client.New(sock).NewSink()
	defer sink.Close()
	var events []schema.Event
	for range 3000 {
		events = append(events, launchEvent("run-a"))
	}
	if err := sink.Publish(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	taken := len(rec.records)
	rec.mu.Unlock()
	if taken != len(events) {
		t.Fatalf("%d records taken of %d", taken, len(events))
	}
	if err := sink.Publish(context.Background(), []schema.Event{launchEvent("run-a"), launchEvent("run-b")}); err == nil {
		t.Error("records of two runs in one batch accepted")
	}
}

func TestCheckRecords(t *testing.T) {
	good := launchEvent("run-a")
	if err := api.CheckRecords([]schema.Event{good}); err != nil {
		t.Fatalf("a launch record refused: %v", err)
	}
	var finding schema.Event
	if err := json.Unmarshal([]byte(findingJSON), &finding); err != nil {
		t.Fatal(err)
	}
	for name, batch := range map[string][]schema.Event{
		"empty":   nil,
		"finding": {finding},
		"health":  {{Kind: schema.KindHealth, RunID: "run-a"}},
		"no run":  {launchEvent("")},
	} {
		if err := api.CheckRecords(batch); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// TestStatusNamesPathKey: the status answer carries the key id the server
// was given, which launchers compare with their own.
func TestStatusNamesPathKey(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d", "daemon.sock")
	srv, err := api.Listen(api.Config{Path: sock}, &recorder{})
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
	srv, err := api.Listen(api.Config{Path: sock}, rec)
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
	for _, line := range []string{`{"version":2,"op":`, `{"version":2,"op":"drop_all"}`, `{"version":2,"op":"register"}`,
		`{"version":2,"op":"register","register":{"run_id":"r","root_pid":1,"mode":"enforce","scope":{},"scope_hash":""}}`} {
		send(line)
	}
	send(`{"version":2,"op":"status"}`)
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	c := client.New(sock)
	if _, err := c.Register(ctx, registration(t), child.Process.Pid); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	rec.err = errors.New("root pid does not exist")
	rec.mu.Unlock()
	if _, err := c.Register(ctx, registration(t), child.Process.Pid); err == nil {
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
