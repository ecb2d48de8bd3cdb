package collector

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/explain"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestWhyFromClickHouse: `mcpwarden why RUN_ID --clickhouse` reads a run
// from the store (twice inserted: duplicates count once), tells its denied
// path with the deployment's key, and says what grants it.
func TestWhyFromClickHouse(t *testing.T) {
	dsn := chtest.Database(t)
	st := openStore(t, dsn)
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	bin := testenv.Mcpwarden(t)
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	base := filepath.Join(dir, "base")
	denied := filepath.Join(base, "private", "plan.txt")
	scopeFile := filepath.Join(dir, "scope.json")
	testenv.WriteFiles(t, map[string]string{
		filepath.Join(base, "ws", "a.txt"): "x",
		denied:                             "x",
		scopeFile:                          `{"scope_id":"why-ch","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["read_text_file"],"approval":"none","expires_after_minutes":30}`,
	})
	rec, err := schema.ReadScopeFile(scopeFile)
	if err != nil {
		t.Fatal(err)
	}
	scope, err := schema.Canonicalize(rec, base, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, schema.PathKeySize)
	copy(key, "a deployment's own path key....")
	keyFile := filepath.Join(dir, "path.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	hasher, _ := schema.NewPathHasher(key)
	o := schema.Origin{Host: "web-3", BootID: "b"}
	run := schema.NewID()
	t0 := time.Now().Add(-time.Hour)
	start := o.NewEvent(schema.KindLaunch, run, scope.ScopeID, scope.Hash, t0)
	start.Launch = &schema.Launch{Phase: schema.PhaseStart, Mode: schema.ModeEnforce, LandlockABI: 7, ServerExe: "node"}
	op := o.NewEvent(schema.KindFileOp, run, scope.ScopeID, scope.Hash, t0.Add(time.Second))
	op.FileOp = &schema.FileOp{Syscall: "openat", FlagsClass: schema.OpRead, Result: -13, PathHash: hasher.Hash(denied), PathClass: schema.PathOutside,
		Verdict: schema.VerdictBlockedByKernel, PID: 77, Comm: "node"}
	evs := []schema.Event{start, op}
	for range 2 {
		if err := st.Insert(context.Background(), evs); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(bin, "why", run, "--clickhouse", dsn, "--path-key", keyFile, "--scope", scopeFile, "--base", base, "--json").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("why: %v: %s", err, stderr)
	}
	var rep explain.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Events != 2 || rep.Host != "web-3" || len(rep.Items) != 1 {
		t.Fatalf("report: %s", out)
	}
	it := rep.Items[0]
	if it.Path != denied || !strings.Contains(it.Grant, `add "private/plan.txt"`) || it.Count != 1 {
		t.Fatalf("item: %+v", it)
	}
	// With another deployment's key nothing is told.
	other := filepath.Join(dir, "other.key")
	if err := os.WriteFile(other, make([]byte, schema.PathKeySize), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "why", run, "--clickhouse", dsn, "--path-key", other, "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var blind explain.Report
	if err := json.Unmarshal(out, &blind); err != nil || blind.Resolved != 0 || len(blind.Items) != 1 || blind.Items[0].Path != "" {
		t.Fatalf("another key told a path: %s", out)
	}
}

// TestWhyRefusesARunOfTwoHosts: another host may publish events under any
// run id in its own name. `why` reading the store refuses a run id that two
// hosts' events carry (merged, the other host's would read as the run's
// own), names both, and with --host reads that host's events only.
func TestWhyRefusesARunOfTwoHosts(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, chtest.Database(t))
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	run := schema.NewID()
	t0 := time.Now().Add(-time.Hour)
	hasher, _ := schema.NewPathHasher(make([]byte, schema.PathKeySize))
	var evs []schema.Event
	for i, host := range []string{"web-3", "web-9"} {
		o := schema.Origin{Host: host, BootID: "b"}
		e := o.NewEvent(schema.KindLandlockDenial, run, "s", "", t0.Add(time.Duration(i)*time.Second))
		e.LandlockDenial = &schema.LandlockDenial{Domain: "1a", Blockers: []string{"fs.read_file"}, PathHash: hasher.Hash("/etc/shadow"), PathClass: schema.PathSecret, PID: 7}
		evs = append(evs, e)
	}
	if err := st.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	_, err := (&explain.StoreSource{Store: st}).RunEvents(ctx, run)
	if err == nil || !strings.Contains(err.Error(), "web-3") || !strings.Contains(err.Error(), "web-9") || !strings.Contains(err.Error(), "--host") {
		t.Fatalf("a run id of two hosts: err %v, want one naming both hosts and --host", err)
	}
	got, err := (&explain.StoreSource{Store: st, Host: "web-3"}).RunEvents(ctx, run)
	if err != nil || len(got) != 1 || got[0].Host != "web-3" {
		t.Fatalf("--host web-3: %d events (%v), want web-3's one", len(got), err)
	}
}
