package query

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/schema"
	chschema "github.com/mcpwarden/mcpwarden/schema/clickhouse"
)

func TestEveryCannedQueryHasItsFile(t *testing.T) {
	names := chschema.QueryNames()
	if len(names) != len(List) {
		t.Fatalf("files %v, list %d", names, len(List))
	}
	for _, c := range List {
		if _, err := chschema.Query(c.Name); err != nil {
			t.Error(err)
		}
	}
}

// migratedStore opens a fresh test database with the schema applied.
func migratedStore(t *testing.T) *store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, chtest.Database(t), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

func setup(t *testing.T) (*store.Store, *eventgen.Gen, []schema.Event) {
	t.Helper()
	ctx := context.Background()
	st := migratedStore(t)
	g := eventgen.New("web-1")
	g.T0 = time.Now().Add(-time.Hour)
	evs := g.Mixed(500)
	evs[0].Launch.Mode = schema.ModeAudit
	// The daemon names who launched the run (its socket's peer uid).
	launcher := 1000
	evs[0].Launch.LauncherUID, evs[0].Launch.LauncherUIDBy = &launcher, schema.LauncherUIDByDaemon
	// What the proxy learned once the server answered initialize.
	id := g.Origin.NewEvent(schema.KindLaunch, g.RunID, g.ScopeID, g.ScopeHash, g.T0.Add(time.Millisecond))
	id.Launch = &schema.Launch{Phase: schema.PhaseIdentified, Mode: schema.ModeAudit, LandlockABI: 7, ServerExe: "node",
		ServerName: "secure-filesystem-server", ServerVersion: "0.2.0", ProtocolEra: "legacy"}
	// Another run, whose proxy never learned the server: its executable names it.
	other := eventgen.New("web-2")
	other.T0 = g.T0
	bare := other.Mixed(1)[0]
	// A Landlock denial the daemon could not tie to a run.
	stray := g.Origin.NewEvent(schema.KindLandlockDenial, "", "", "", g.T0.Add(2*time.Minute))
	stray.LandlockDenial = &schema.LandlockDenial{Domain: "2b", Blockers: []string{"fs.read_file"}, PathHash: g.Hasher.Hash("/home/u/notes"), PID: 0}
	evs = append(evs, id, bare, stray)
	esc := g.FileOp(1)
	esc.FileOp.PathClass, esc.FileOp.Verdict = schema.PathOutside, "escape"
	den := g.Decision(2)
	den.Decision.Decision, den.Decision.ErrorCode, den.Decision.Tool = "deny", string(schema.ErrPathOutsideScope), "read_text_file"
	ll := g.Origin.NewEvent(schema.KindLandlockDenial, g.RunID, g.ScopeID, g.ScopeHash, g.T0.Add(time.Minute))
	ll.LandlockDenial = &schema.LandlockDenial{Domain: "1a", Blockers: []string{"fs.read_file"}, PathHash: g.Hasher.Hash("/etc/shadow"), PathClass: schema.PathSecret, PID: 1}
	h := g.Origin.NewEvent(schema.KindHealth, "", "", "", g.T0)
	h.Health = &schema.Health{Component: "daemon", Hooks: []string{"tracepoint/syscalls/sys_enter_openat"}, LandlockABI: 7, AuditStream: "on", DropsQueueFull: 2, DropsKernelAudit: 1877}
	evs = append(evs, esc, den, ll, h)
	evs = append(evs, crosscheck.Check(evs, crosscheck.Config{}, time.Now())...)
	if err := st.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, evs); err != nil { // a full redelivery: queries must not double count
		t.Fatal(err)
	}
	return st, g, evs
}

func runJSON(t *testing.T, st *store.Store, name string, p Params) []map[string]any {
	t.Helper()
	if p.To.IsZero() {
		p.From, p.To = time.Now().Add(-24*time.Hour), time.Now()
	}
	res, err := Run(context.Background(), st, name, p)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), strings.ToUpper(strings.TrimSuffix(res.Columns[0], "_ns"))) {
		t.Fatalf("table has no header:\n%s", table.String())
	}
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	return rows
}

func num(v any) float64 { f, _ := v.(float64); return f }

func TestCannedQueries(t *testing.T) {
	st, g, evs := setup(t)
	var findings, runFindings int
	for _, e := range evs {
		if e.Kind == schema.KindFinding {
			findings++
			if e.RunID == g.RunID {
				runFindings++
			}
		}
	}
	t.Run("runs", func(t *testing.T) {
		rows := runJSON(t, st, "runs", Params{})
		if len(rows) != 2 {
			t.Fatalf("%d runs, want 2: %v", len(rows), rows)
		}
		if rows[1]["run_id"] == g.RunID {
			rows[0], rows[1] = rows[1], rows[0]
		}
		if rows[0]["run_id"] != g.RunID || rows[0]["verdict"] != "ESCAPE" || rows[0]["mode"] != "audit" || rows[0]["server"] != "secure-filesystem-server" ||
			rows[0]["server_version"] != "0.2.0" || rows[0]["protocol_era"] != "legacy" || rows[0]["server_exe"] != "node" || num(rows[0]["identified"]) != 1 {
			t.Fatalf("%v", rows[0])
		}
		// A server that never identified itself says so, and its
		// executable names it.
		if rows[1]["host"] != "web-2" || rows[1]["verdict"] != "CLEAN" || rows[1]["server"] != "" || rows[1]["server_version"] != "" ||
			rows[1]["protocol_era"] != "" || rows[1]["server_exe"] != "node" || num(rows[1]["identified"]) != 0 {
			t.Fatalf("%v", rows[1])
		}
		// Who launched each run: the daemon's word, or -1 when no launch
		// record says (the other run did not come through a daemon).
		if num(rows[0]["launcher_uid"]) != 1000 || num(rows[1]["launcher_uid"]) != -1 || rows[0]["launcher_uid_by"] != "daemon" || rows[1]["launcher_uid_by"] != "" {
			t.Fatalf("launcher_uid %v (by %v) and %v (by %v), want 1000 (daemon) and -1", rows[0]["launcher_uid"], rows[0]["launcher_uid_by"], rows[1]["launcher_uid"], rows[1]["launcher_uid_by"])
		}
		if num(rows[0]["calls_denied"]) != 1 || num(rows[0]["findings"]) != float64(runFindings) || num(rows[0]["kernel_denials"]) != 1 {
			t.Fatalf("counts: %v (want %d findings)", rows[0], runFindings)
		}
		table := runsTable(t, st, Params{})
		if !strings.Contains(table, "secure-filesystem-server 0.2.0, legacy era") || !strings.Contains(table, "not identified (executable node)") {
			t.Fatalf("the SERVER column does not say which server ran:\n%s", table)
		}
		for _, c := range []string{"SERVER_VERSION", "PROTOCOL_ERA", "SERVER_EXE", "IDENTIFIED"} {
			if strings.Contains(table, c) {
				t.Fatalf("the table has a %s column besides SERVER:\n%s", c, table)
			}
		}
	})
	t.Run("findings", func(t *testing.T) {
		rows := runJSON(t, st, "findings", Params{})
		var total float64
		for _, r := range rows {
			total += num(r["findings"])
		}
		if total != float64(findings) || rows[0]["severity"] != "high" {
			t.Fatalf("%v", rows)
		}
		for _, r := range rows {
			if r["run_id"] != g.RunID && r["run_id"] != "" {
				t.Fatalf("a finding of run %v, want %s or none (the host's own)", r["run_id"], g.RunID)
			}
		}
		of := runJSON(t, st, "findings", Params{Run: g.RunID, From: time.Now().Add(-24 * time.Hour), To: time.Now()})
		var ofRun float64
		for _, r := range of {
			if r["run_id"] != g.RunID {
				t.Fatalf("--run leaked %v", r)
			}
			ofRun += num(r["findings"])
		}
		if ofRun != float64(runFindings) {
			t.Fatalf("--run: %v findings, want %d", ofRun, runFindings)
		}
		only := runJSON(t, st, "findings", Params{Severity: "low", From: time.Now().Add(-24 * time.Hour), To: time.Now()})
		for _, r := range only {
			if r["severity"] != "low" {
				t.Fatalf("severity filter leaked %v", r)
			}
		}
		none := runJSON(t, st, "findings", Params{Host: "other' OR '1'='1", From: time.Now().Add(-24 * time.Hour), To: time.Now()})
		if len(none) != 0 {
			t.Fatalf("host filter with quotes matched %v", none)
		}
	})
	t.Run("denials", func(t *testing.T) {
		rows := runJSON(t, st, "denials", Params{Scope: g.ScopeID, From: time.Now().Add(-24 * time.Hour), To: time.Now()})
		layers := map[string]float64{}
		for _, r := range rows {
			layers[r["layer"].(string)+":"+r["reason"].(string)] += num(r["denials"])
		}
		if layers["proxy:PATH_OUTSIDE_SCOPE"] != 1 || layers["kernel:secret"] != 1 {
			t.Fatalf("%v", rows)
		}
		// Without filters (the rollup), the denial outside any run is not
		// listed as a scope of its own.
		for _, r := range runJSON(t, st, "denials", Params{}) {
			if r["scope_id"] == "" {
				t.Fatalf("a denial outside any run listed as a scope: %v", r)
			}
		}
		for _, r := range runJSON(t, st, "denials", Params{Host: "web-1", From: time.Now().Add(-24 * time.Hour), To: time.Now()}) {
			if r["scope_id"] == "" {
				t.Fatalf("--host: a denial outside any run listed as a scope: %v", r)
			}
		}
	})
	t.Run("timeline", func(t *testing.T) {
		rows := runJSON(t, st, "timeline", Params{Run: g.RunID, From: time.Now().Add(-24 * time.Hour), To: time.Now()})
		want := 0
		for _, e := range evs {
			if e.RunID == g.RunID {
				want++
			}
		}
		if len(rows) != want {
			t.Fatalf("%d rows, want %d (one per distinct event)", len(rows), want)
		}
		for i := 1; i < len(rows); i++ {
			if num(rows[i]["time_ns"]) < num(rows[i-1]["time_ns"]) {
				t.Fatal("timeline out of order")
			}
		}
		if _, err := Run(context.Background(), st, "timeline", Params{}); err == nil {
			t.Fatal("timeline without --run accepted")
		}
	})
	t.Run("health", func(t *testing.T) {
		rows := runJSON(t, st, "health", Params{})
		if len(rows) != 1 || rows[0]["host"] != "web-1" || num(rows[0]["drops_queue"]) != 2 || num(rows[0]["gap_findings"]) < 1 || rows[0]["audit_stream"] != "on" ||
			num(rows[0]["unattributed_denials"]) != 1 || num(rows[0]["drops_kernel_audit"]) != 1877 {
			t.Fatalf("%v", rows)
		}
	})
	t.Run("inventory", func(t *testing.T) {
		rows := runJSON(t, st, "inventory", Params{})
		if len(rows) != 2 {
			t.Fatalf("%v", rows)
		}
		named, bare := rows[0], rows[1]
		if named["host"] != "web-1" {
			named, bare = bare, named
		}
		if named["server"] != "secure-filesystem-server" || named["server_version"] != "0.2.0" || named["protocol_era"] != "legacy" || num(named["runs"]) != 1 || num(named["audit_mode_seen"]) != 1 {
			t.Fatalf("one run, three launch records, one row: %v", named)
		}
		if bare["server"] != "node" || num(bare["runs"]) != 1 {
			t.Fatalf("a run without serverInfo is named by its executable: %v", bare)
		}
	})
	if _, err := Run(context.Background(), st, "nope", Params{}); err == nil || !strings.Contains(err.Error(), "runs") {
		t.Fatalf("unknown query: %v", err)
	}
}

func runsTable(t *testing.T, st *store.Store, p Params) string {
	t.Helper()
	if p.To.IsZero() {
		p.From, p.To = time.Now().Add(-24*time.Hour), time.Now()
	}
	res, err := Run(context.Background(), st, "runs", p)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := res.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestServerStringsAreUntrusted: a server's name and version are its own
// strings. Rows holding hostile ones (written around the collector, which
// only stores tokens) reach the table escaped, both outputs bounded, and
// the values never change the SQL (they are values in the rollup states,
// never parameters or text of a query).
func TestServerStringsAreUntrusted(t *testing.T) {
	ctx := context.Background()
	st := migratedStore(t)
	hostile := []struct{ name, version, era string }{
		{"evil\x1b[2J\x1b]0;owned\x07", "1.0\ttab\nnewline", "modern"},
		{"safe\u202egnp.exe", "\u2066v2\u2069\u200d", "legacy"},
		{"x' OR 1=1 --", "'); DROP TABLE events; --", "unknown"},
		{strings.Repeat("long-", 100) + "\xff\xfe", "\u00a0\u3000", "legacy"},
		{"back\\slash", "\x00nul", "modern"},
	}
	t0 := time.Now().Add(-time.Hour)
	var evs []schema.Event
	for i, h := range hostile {
		g := eventgen.New("web-1")
		g.T0 = t0.Add(time.Duration(i) * time.Second)
		evs = append(evs, g.Mixed(5)...)
		id := g.Origin.NewEvent(schema.KindLaunch, g.RunID, g.ScopeID, g.ScopeHash, g.T0.Add(time.Millisecond))
		id.Launch = &schema.Launch{Phase: schema.PhaseIdentified, Mode: schema.ModeEnforce, LandlockABI: 7, ServerExe: "node",
			ServerName: h.name, ServerVersion: h.version, ProtocolEra: h.era}
		evs = append(evs, id)
	}
	if err := st.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	p := Params{From: t0.Add(-time.Minute), To: time.Now()}
	compareWithScan(t, st, "runs", runsScanSQL, p)
	var n uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count() FROM events").Scan(&n); err != nil || n != uint64(len(evs)) {
		t.Fatalf("events: %d, %v (want %d)", n, err, len(evs))
	}
	table := runsTable(t, st, p)
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if len(lines) != 1+len(hostile) {
		t.Fatalf("%d lines, want a header and %d rows (a newline got through?):\n%s", len(lines), len(hostile), table)
	}
	for _, r := range table {
		if r != '\n' && !unicode.IsPrint(r) {
			t.Fatalf("the table carries %U:\n%q", r, table)
		}
	}
	for _, want := range []string{`evil\u001B[2J\u001B]0;owned\u0007`, `1.0\u0009tab\u000Anewline`, `safe\u202Egnp.exe`, `\u2066v2\u2069\u200D`,
		"x' OR 1=1 --", `back\\slash`, `\u0000nul`, `\u00A0\u3000`, "…"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	rows := runJSON(t, st, "runs", p)
	names := map[string]bool{}
	for _, r := range rows {
		name, _ := r["server"].(string)
		if len(name) > MaxString+len("…") {
			t.Errorf("a %d-byte name in the JSON", len(name))
		}
		names[name] = true
	}
	if !names[hostile[0].name] || !names[hostile[2].name] || !names[strings.Repeat("long-", 52)[:MaxString]+"…"] {
		t.Errorf("the JSON does not carry the names as they are (bounded): %v", names)
	}
}

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain-token_1.0", "plain-token_1.0"},
		{"with space", "with space"},
		{"ünïcödé ✓", "ünïcödé ✓"},
		{"a\tb\nc\r", `a\u0009b\u000Ac\u000D`},
		{"\x1b[31mred", `\u001B[31mred`},
		{"\u202eabc\u202c", `\u202Eabc\u202C`},
		{"\u2066\u2067\u2068\u2069\u200b\u200d\ufeff", `\u2066\u2067\u2068\u2069\u200B\u200D\uFEFF`},
		{"nb\u00a0sp", `nb\u00A0sp`},
		{"\U000E0041tag", `\U000E0041tag`},
		{"bad\xffbyte", `bad\xffbyte`},
		{`\u0041`, `\\u0041`},
		{"\u0085", `\u0085`},
	} {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := bounded(strings.Repeat("é", 200)); got != strings.Repeat("é", MaxString/2)+"…" {
		t.Errorf("bounded cut a rune: %q", got)
	}
	if got := bounded("ok"); got != "ok" {
		t.Errorf("bounded(ok) = %v", got)
	}
}

// FuzzEscape: whatever the bytes, the escaped cell is printable, one line,
// without a tab, and distinct inputs stay distinct.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a\tb", "\u202e", "\xff", `\\`, "\x1b]0;x\x07"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := Escape(s)
		for _, r := range e {
			if !unicode.IsPrint(r) {
				t.Fatalf("Escape(%q) = %q carries %U", s, e, r)
			}
		}
		if Escape(s+"\x00") == e {
			t.Fatalf("Escape(%q) loses a NUL", s)
		}
	})
}

// TestTimelineRefusesARunOfTwoHosts: a compromised host may publish events
// under any run id in its own name; a Landlock denial it files under
// another host's run id would, merged into that run's timeline (which has
// no host column), make a clean run look attacked. Without --host the
// timeline refuses a run id two hosts carry and names both; with --host it
// shows that host's events only.
func TestTimelineRefusesARunOfTwoHosts(t *testing.T) {
	ctx := context.Background()
	st := migratedStore(t)
	g := eventgen.New("web-1")
	evs := g.Mixed(20)
	forger := eventgen.New("web-9")
	forger.RunID = g.RunID
	forged := forger.Origin.NewEvent(schema.KindLandlockDenial, g.RunID, g.ScopeID, g.ScopeHash, g.T0.Add(time.Second))
	forged.LandlockDenial = &schema.LandlockDenial{Domain: "1a", Blockers: []string{"fs.read_file"}, PathHash: g.Hasher.Hash("/etc/shadow"), PathClass: schema.PathSecret, PID: 1}
	if err := st.Insert(ctx, append(evs, forged)); err != nil {
		t.Fatal(err)
	}
	window := Params{Run: g.RunID, From: time.Now().Add(-24 * time.Hour), To: time.Now()}
	_, err := Run(ctx, st, "timeline", window)
	var amb *AmbiguousRunError
	if !errors.As(err, &amb) || !strings.Contains(err.Error(), "web-1") || !strings.Contains(err.Error(), "web-9") || !strings.Contains(err.Error(), "--host") {
		t.Fatalf("a run id of two hosts: err %v, want one naming both hosts and --host", err)
	}
	window.Host = "web-1"
	rows := runJSON(t, st, "timeline", window)
	if len(rows) != len(evs) {
		t.Fatalf("timeline --host web-1: %d rows, want the host's %d events", len(rows), len(evs))
	}
	for _, r := range rows {
		if r["kind"] == string(schema.KindLandlockDenial) {
			t.Fatalf("the other host's forged denial is in web-1's timeline: %v", r)
		}
	}
}

// TestLettersAreDistinctPlaceholderNames: the launcher_uid lookup names its
// parameters host_<letters>, run_<letters>; Bind takes only [a-z_] names.
func TestLettersAreDistinctPlaceholderNames(t *testing.T) {
	seen := map[string]bool{}
	for n := range 2 * launcherUIDChunk {
		l := letters(n)
		if seen[l] || strings.Trim(l, "abcdefghijklmnopqrstuvwxyz") != "" {
			t.Fatalf("letters(%d) = %q (seen before: %v)", n, l, seen[l])
		}
		seen[l] = true
	}
	if letters(0) != "a" || letters(25) != "z" || letters(26) != "ba" {
		t.Errorf("letters(0, 25, 26) = %s %s %s", letters(0), letters(25), letters(26))
	}
}
