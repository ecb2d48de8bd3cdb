package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/collector/natsserver"
	"github.com/mcpwarden/mcpwarden/collector/stream"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..")
}

func goBuild(t *testing.T, out, pkg string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// TestRunWithDaemonEndToEnd drives the real binaries: `mcpwarden daemon`
// publishing to a real NATS JetStream, `mcpwarden run --daemon-socket`
// fencing the naive test server, and `mcpwarden events --json` reading the
// result back.
func TestRunWithDaemonEndToEnd(t *testing.T) {
	testenv.RequireRoot(t)
	bin := os.Getenv("MCPWARDEN_BIN")
	dir := t.TempDir()
	if bin == "" {
		bin = filepath.Join(dir, "mcpwarden")
		goBuild(t, bin, "./cmd/mcpwarden")
	}
	naive := filepath.Join(dir, "naiveserver")
	goBuild(t, naive, "./internal/naiveserver")

	ns, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(dir, "nats"), Port: -1})
	if err != nil {
		t.Fatalf("embedded NATS: %v", err)
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := stream.Ensure(context.Background(), js, stream.Config{}); err != nil {
		t.Fatal(err)
	}

	root, _ := filepath.EvalSymlinks(dir)
	state := filepath.Join(root, "state")
	socket := filepath.Join(root, "run", "daemon.sock")
	base := filepath.Join(root, "base")
	ws := filepath.Join(base, "ws")
	secret := filepath.Join(root, "outside", "secret.txt")
	for _, d := range []string{ws, filepath.Dir(secret)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	inside := filepath.Join(ws, "a.txt")
	for p, c := range map[string]string{inside: "inside", secret: "OUTSIDE-SECRET"} {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	scope := filepath.Join(root, "scope.json")
	if err := os.WriteFile(scope, []byte(`{"scope_id":"e2e","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["read_text_file"],"approval":"none","expires_after_minutes":30}`), 0o644); err != nil {
		t.Fatal(err)
	}

	// A run configured with a daemon that is not there must not start.
	refused := exec.Command(bin, "run", "--proxy=false", "--daemon-socket", socket, "--scope", scope, "--base", base, "--state-dir", state, "--", naive)
	refused.Stdin = strings.NewReader(`{"op":"read","path":"` + inside + `"}` + "\n")
	out, err := refused.CombinedOutput()
	if err == nil || strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("run started without its daemon: err=%v output=%s", err, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	daemonCmd := exec.CommandContext(ctx, bin, "daemon", "--socket", socket, "--nats", ns.ClientURL(), "--state-dir", state, "--enable-audit", "--crosscheck-window", "1s")
	dlog := &syncBuffer{}
	daemonCmd.Stderr = dlog
	daemonCmd.Cancel = func() error { return daemonCmd.Process.Signal(os.Interrupt) }
	if err := daemonCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = daemonCmd.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", dlog.String())
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(dlog.String(), "daemon started") {
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not start:\n%s", dlog.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	run := exec.Command(bin, "run", "--proxy=false", "--daemon-socket", socket, "--scope", scope, "--base", base, "--state-dir", state, "--", naive)
	run.Dir = base
	stdin, _ := run.StdinPipe()
	stdout, _ := run.StdoutPipe()
	rlog := &syncBuffer{}
	run.Stderr = rlog
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	do := func(req string) string {
		if _, err := io.WriteString(stdin, req+"\n"); err != nil {
			t.Fatalf("send %s: %v (run log: %s)", req, err, rlog.String())
		}
		if !lines.Scan() {
			t.Fatalf("no answer to %s (run log: %s)", req, rlog.String())
		}
		return lines.Text()
	}
	if got := do(`{"op":"read","path":"` + inside + `"}`); !strings.Contains(got, `"ok":true`) {
		t.Fatalf("inside read: %s", got)
	}
	if got := do(`{"op":"read","path":"` + secret + `"}`); !strings.Contains(got, "EACCES") {
		t.Fatalf("outside read not denied: %s", got)
	}
	stdin.Close()
	if err := run.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, rlog.String())
	}

	key, err := os.ReadFile(filepath.Join(state, "path.key"))
	if err != nil {
		t.Fatal(err)
	}
	hasher, _ := schema.NewPathHasher(key)
	insideHash, secretHash := hasher.Hash(inside), hasher.Hash(secret)

	var allowed, blocked, denial *schema.Event
	var findings []schema.Event
	hasAttempt := func() bool {
		for _, f := range findings {
			if f.Finding.Type == schema.FindingBlockedAttempt && blocked != nil && denial != nil &&
				slicesContains(f.Finding.EvidenceIDs, blocked.EventID) && slicesContains(f.Finding.EvidenceIDs, denial.EventID) {
				return true
			}
		}
		return false
	}
	deadline = time.Now().Add(30 * time.Second)
	for allowed == nil || blocked == nil || denial == nil || !hasAttempt() {
		if time.Now().After(deadline) {
			t.Fatalf("events missing: allowed=%v blocked=%v denial=%v blocked-attempt finding=%v (findings %d)", allowed != nil, blocked != nil, denial != nil, hasAttempt(), len(findings))
		}
		findings = findings[:0]
		ev := exec.Command(bin, "events", "--json", "--nats", ns.ClientURL())
		out, err := ev.Output()
		if err != nil {
			t.Fatalf("mcpwarden events: %v", err)
		}
		for _, line := range bytes.Split(out, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var e schema.Event
			if err := json.Unmarshal(line, &e); err != nil {
				t.Fatalf("events --json printed %q: %v", line, err)
			}
			switch {
			case e.FileOp != nil && e.FileOp.PathHash == insideHash && e.FileOp.Verdict == "allowed":
				allowed = &e
			case e.FileOp != nil && e.FileOp.PathHash == secretHash && e.FileOp.Verdict == "blocked_by_kernel":
				blocked = &e
			case e.LandlockDenial != nil && e.LandlockDenial.PathHash == secretHash:
				denial = &e
			case e.Finding != nil:
				findings = append(findings, e)
			}
		}
	}
	if blocked.FileOp.Result != -13 || blocked.FileOp.PathClass != schema.PathOutside {
		t.Errorf("blocked file_op %+v", *blocked.FileOp)
	}
	if allowed.RunID == "" || allowed.RunID != blocked.RunID || denial.RunID != blocked.RunID {
		t.Errorf("run ids differ: allowed %s blocked %s denial %s", allowed.RunID, blocked.RunID, denial.RunID)
	}
	if allowed.ScopeID != "e2e" {
		t.Errorf("scope id %q", allowed.ScopeID)
	}
	if strings.Contains(fmt.Sprint(dlog.String()), secret) {
		t.Errorf("daemon log names a full path")
	}
}

func slicesContains(s []string, v string) bool { return slices.Contains(s, v) }

// syncBuffer is a bytes.Buffer that a child's output copier and the test
// may use at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
