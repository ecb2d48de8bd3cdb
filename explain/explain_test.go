package explain

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// fixture is a scope on disk and a run's events over it.
type fixture struct {
	base, outside string
	scope         *schema.CanonicalScope
	hasher        *schema.PathHasher
	origin        schema.Origin
	runID         string
	evs           []schema.Event
	t0            time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	f := &fixture{base: filepath.Join(root, "base"), outside: filepath.Join(root, "outside"),
		origin: schema.Origin{Host: "web-1", BootID: "b"}, runID: schema.NewID(), t0: time.Now().Add(-time.Minute)}
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(f.base, "ws", "notes.txt"):        "x",
		filepath.Join(f.base, "private", "plan.txt"):    "x",
		filepath.Join(f.outside, "report.txt"):          "x",
		filepath.Join(f.base, "ws", "deploy", "id_rsa"): "x",
	})
	s, err := schema.ParseScope([]byte(`{"scope_id":"why-test","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["read_text_file"],"approval":"none","expires_after_minutes":30}`))
	if err != nil {
		t.Fatal(err)
	}
	if f.scope, err = schema.Canonicalize(s, f.base, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.hasher, _ = schema.NewPathHasher(make([]byte, schema.PathKeySize))
	return f
}

func (f *fixture) ev(kind schema.Kind, at time.Duration) *schema.Event {
	e := f.origin.NewEvent(kind, f.runID, f.scope.ScopeID, f.scope.Hash, f.t0.Add(at))
	f.evs = append(f.evs, e)
	return &f.evs[len(f.evs)-1]
}

func (f *fixture) op(at time.Duration, path string, class schema.PathClass, access schema.OpAccess, result int, verdict schema.FileVerdict, pid int) {
	e := f.ev(schema.KindFileOp, at)
	e.FileOp = &schema.FileOp{Syscall: "openat", FlagsClass: access, Result: result, PathHash: f.hasher.Hash(path), PathClass: class, Verdict: verdict, PID: pid, Comm: "node"}
}

// run builds a run of a relayed enforce-mode server: denied reads of a
// path in the base but not the scope, of one outside the base, of its own
// child's /proc entry and of another process's; a write into the read-only
// workspace; a read of a credential; and a call the proxy refused.
func (f *fixture) run() {
	e := f.ev(schema.KindLaunch, 0)
	e.Launch = &schema.Launch{Phase: schema.PhaseStart, Mode: schema.ModeEnforce, LandlockABI: 7, ServerExe: "node"}
	e = f.ev(schema.KindLaunch, time.Millisecond)
	e.Launch = &schema.Launch{Phase: schema.PhaseIdentified, Mode: schema.ModeEnforce, LandlockABI: 7, ServerExe: "node", ServerName: "naive", ServerVersion: "1.0", ProtocolEra: "legacy"}
	f.op(10*time.Millisecond, "/proc/4243/statm", schema.PathOutside, schema.OpRead, -13, schema.VerdictBlockedByKernel, 4243) // a child's own
	f.op(11*time.Millisecond, "/proc/4242/maps", schema.PathRuntime, schema.OpRead, 0, schema.VerdictAllowed, 4242)
	c := f.ev(schema.KindDecision, time.Second)
	c.Decision = &schema.Decision{OpID: "op-1", Method: "tools/call", Tool: "read_text_file", ActionClass: schema.ActionRead, Decision: schema.OutcomeAllow,
		Approval: schema.ApprovalNotRequired, StartNS: c.TimeNS, EndNS: c.TimeNS + int64(500*time.Millisecond)}
	f.op(time.Second+10*time.Millisecond, filepath.Join(f.base, "private", "plan.txt"), schema.PathOutside, schema.OpRead, -13, schema.VerdictBlockedByKernel, 4242)
	f.op(time.Second+20*time.Millisecond, filepath.Join(f.outside, "report.txt"), schema.PathOutside, schema.OpRead, -13, schema.VerdictBlockedByKernel, 4242)
	f.op(time.Second+30*time.Millisecond, "/proc/1/environ", schema.PathOutside, schema.OpRead, -13, schema.VerdictBlockedByKernel, 4242)
	f.op(time.Second+40*time.Millisecond, filepath.Join(f.base, "ws", "notes.txt"), schema.PathWorkspace, schema.OpWrite, -13, schema.VerdictBlockedByKernel, 4242)
	f.op(time.Second+50*time.Millisecond, filepath.Join(f.base, "ws", "deploy", "id_rsa"), schema.PathSecret, schema.OpRead, 0, schema.VerdictAllowed, 4242)
	d := f.ev(schema.KindDecision, 2*time.Second)
	d.Decision = &schema.Decision{OpID: "op-2", Method: "tools/call", Tool: "write_file", ActionClass: schema.ActionWrite, Decision: schema.OutcomeDeny,
		Approval: schema.ApprovalNotRequired, ErrorCode: string(schema.ErrToolNotAllowed), StartNS: d.TimeNS, EndNS: d.TimeNS}
	p := f.ev(schema.KindDecision, 3*time.Second)
	p.Decision = &schema.Decision{OpID: "op-3", Method: "tools/call", Tool: "read_text_file", ActionClass: schema.ActionRead, Decision: schema.OutcomeDeny,
		Approval: schema.ApprovalNotRequired, ErrorCode: string(schema.ErrPathOutsideScope), PathHashes: []schema.PathHash{f.hasher.Hash(filepath.Join(f.outside, "report.txt"))},
		StartNS: p.TimeNS, EndNS: p.TimeNS}
}

// publishAll publishes evs as the daemon role of srv.
func publishAll(t *testing.T, srv *natsserver.Server, evs []schema.Event) {
	t.Helper()
	nc, err := stream.Connect(srv.Client(stream.RoleDaemon, "test-daemon"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := publish.New(ctx, publish.Config{Conn: nc, SpoolDir: t.TempDir(), EnsureStream: &stream.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWhyFromTheStream publishes a run (and another run, and nothing of
// another host: the daemon role may not) to the embedded server, reads it
// back as the reader role and checks each item's path and grant.
func TestWhyFromTheStream(t *testing.T) {
	f := newFixture(t)
	f.run()
	other := *f
	other.runID, other.evs = schema.NewID(), nil
	other.op(0, filepath.Join(f.outside, "report.txt"), schema.PathOutside, schema.OpRead, -13, schema.VerdictBlockedByKernel, 9)

	root := t.TempDir()
	creds, err := natsserver.LoadOrCreateCredentials(stream.CredentialsDir(root))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(root, "nats"), MaxStoreBytes: natstest.StoreBytes, Port: -1, Auth: creds, EventHost: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	publishAll(t, srv, append(f.evs, other.evs...))

	nc, err := stream.Connect(srv.Client(stream.RoleReader, "test-why"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	rep, err := Run(context.Background(), Config{RunID: f.runID, Source: &StreamSource{JS: js, Host: "web-1"}, Hasher: f.hasher, Scope: f.scope,
		Profile: &runtimeprofile.Profile{Exe: "/usr/bin/node", Entries: []runtimeprofile.Entry{{Path: "/usr/lib/node_modules", Class: runtimeprofile.ClassReadTree, Reason: "node's own modules"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Events != len(f.evs) || rep.Server != "naive" || rep.ServerVersion != "1.0" || rep.Mode != "enforce" || rep.ScopeHash != f.scope.Hash {
		t.Fatalf("report header: %+v (want %d events)", rep, len(f.evs))
	}
	want := []struct{ what, path, grant string }{
		{"BLOCKED_ATTEMPT medium kernel_denied_at_startup", "/proc/4243/statm", "the run's own process 4243's /proc entry"},
		{"BLOCKED_ATTEMPT medium kernel_denied", filepath.Join(f.base, "private", "plan.txt"), `add "private/plan.txt" (or its directory) to allowed_paths`},
		{"PROXY_GAP high kernel_denied_during_allowed_call", filepath.Join(f.outside, "report.txt"), "--allow-runtime " + filepath.Join(f.outside, "report.txt")},
		{"BLOCKED_ATTEMPT medium kernel_denied", "/proc/1/environ", "another process's /proc entry (pid 1)"},
		{"BLOCKED_ATTEMPT medium kernel_denied", filepath.Join(f.base, "ws", "notes.txt"), `"access_mode": "write" grants writes there`},
		{"ESCAPE critical succeeded_outside_scope", filepath.Join(f.base, "ws", "deploy", "id_rsa"), "looks like a credential"},
		{"proxy denial TOOL_NOT_ALLOWED", "", `tool_allowlist does not name "write_file"`},
		{"proxy denial PATH_OUTSIDE_SCOPE", filepath.Join(f.outside, "report.txt"), "outside the approved base"},
	}
	for _, w := range want {
		found := false
		for _, it := range rep.Items {
			if it.What == w.what && it.Path == w.path && strings.Contains(it.Grant, w.grant) {
				found = true
			}
		}
		if !found {
			var b bytes.Buffer
			_ = rep.WriteText(&b)
			t.Errorf("no item %q on %q saying %q in:\n%s", w.what, w.path, w.grant, b.String())
		}
	}
	for _, it := range rep.Items {
		if it.PathHash != "" && it.Path == "" {
			t.Errorf("unresolved: %+v", it)
		}
		if it.Path == filepath.Join(f.outside, "report.txt") && it.Process == "node, pid 9" {
			t.Errorf("an item of the other run: %+v", it)
		}
	}
	var text, js2 bytes.Buffer
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "run "+f.runID+" on web-1: server naive 1.0 (legacy), enforce mode") {
		t.Fatalf("text report: %v\n%s", err, text.String())
	}
	if err := rep.WriteJSON(&js2); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js2.Bytes(), &back); err != nil || len(back.Items) != len(rep.Items) {
		t.Fatalf("JSON report: %v", err)
	}

	// Without the scope it still tells the paths it can, and says that the
	// scope would tell more; with another scope it refuses.
	rep2, err := Run(context.Background(), Config{RunID: f.runID, Source: &StreamSource{JS: js, Host: "web-1"}, Hasher: f.hasher,
		Paths: []string{filepath.Join(f.outside, "report.txt")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range rep2.Items {
		if it.Path == filepath.Join(f.base, "private", "plan.txt") {
			t.Errorf("a path only the scope's tree holds was told without the scope: %+v", it)
		}
		if it.Path == filepath.Join(f.outside, "report.txt") && !strings.Contains(it.Grant, "--scope FILE --base DIR") && it.Kind == "finding" {
			t.Errorf("without the scope, the grant should point to --scope: %+v", it)
		}
	}
	wrong := *f.scope
	wrong.Hash = "sha256:" + strings.Repeat("0", 64)
	if _, err := Run(context.Background(), Config{RunID: f.runID, Source: &StreamSource{JS: js, Host: "web-1"}, Hasher: f.hasher, Scope: &wrong}); err == nil || !strings.Contains(err.Error(), "not the run's") {
		t.Fatalf("another run's scope: %v", err)
	}
	if _, err := Run(context.Background(), Config{RunID: schema.NewID(), Source: &StreamSource{JS: js, Host: "web-1"}, Hasher: f.hasher}); err == nil {
		t.Fatal("an unknown run explained")
	}
	if _, err := Run(context.Background(), Config{RunID: "../etc", Source: &StreamSource{JS: js, Host: "web-1"}, Hasher: f.hasher}); err == nil {
		t.Fatal("a run id that is no token accepted")
	}
}

// TestWalkIsBounded: the candidate walk stays within its depth and budget
// and never follows a symlink out.
func TestWalkIsBounded(t *testing.T) {
	root := t.TempDir()
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(root, "a", "b", "c", "d.txt"): "x",
		filepath.Join(root, "a", "e.txt"):           "x",
	})
	if err := os.Symlink("/etc", filepath.Join(root, "a", "etc")); err != nil {
		t.Fatal(err)
	}
	var got []string
	walk(root, 2, 100, nil, func(p string) bool { got = append(got, p); return true })
	for _, p := range got {
		rel, _ := filepath.Rel(root, p)
		if strings.Count(rel, "/") > 1 || strings.HasPrefix(rel, "a/etc/") {
			t.Fatalf("walked %s", rel)
		}
	}
	if len(got) != 5 { // root, a, a/b, a/e.txt, a/etc
		t.Fatalf("walked %v", got)
	}
	n := 0
	walk(root, 32, 2, nil, func(string) bool { n++; return true })
	if n != 3 { // the root and two more
		t.Fatalf("budget 2 walked %d", n)
	}
}
