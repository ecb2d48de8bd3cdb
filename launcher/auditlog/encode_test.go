package auditlog

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// encodingJSON is what the log wrote before appendEvent, and the reference.
func encodingJSON(ev *schema.Event) ([]byte, error) {
	var buf bytes.Buffer
	err := json.NewEncoder(&buf).Encode(ev)
	return buf.Bytes(), err
}

func decisionEvent(d schema.Decision) schema.Event {
	ev := schema.Origin{Host: "host-1", BootID: "boot-1"}.NewEvent(schema.KindDecision, "run-1", "scope-1", "sha256:abc", time.Unix(1700000000, 5))
	ev.Decision = &d
	return ev
}

func fullDecision() schema.Decision {
	return schema.Decision{
		OpID: "op-1", Method: "tools/call", ProtocolEra: "legacy", ProtocolVersion: "2025-06-18",
		ServerOrigin: "server-filesystem", Tool: "read_text_file", ActionClass: schema.ActionRead,
		Decision: schema.OutcomeAllow, Approval: schema.ApprovalNotRequired, ErrorCode: "PATH_OUTSIDE_SCOPE",
		RetryCount: 2, LatencyMS: 0.1234, PathHashes: []schema.PathHash{"aa", "bb"}, CorrelationID: "corr-1",
		StartNS: 1700000000000000001, EndNS: -7,
	}
}

func launchEvent(l schema.Launch) schema.Event {
	ev := schema.Origin{Host: "host-1", BootID: "boot-1"}.NewEvent(schema.KindLaunch, "run-1", "scope-1", "sha256:abc", time.Unix(1700000000, 5))
	ev.Launch = &l
	return ev
}

func fullLaunch() schema.Launch {
	uid := 1000
	return schema.Launch{
		Phase: schema.PhaseExit, Mode: schema.ModeEnforce, LandlockABI: 7, Degraded: true, DegradedReason: "scopes",
		ServerExe: "node", ServerName: "server-filesystem", ServerVersion: "1.2.3", ProtocolEra: "legacy", RootPID: 42,
		ExitStatus: 143, ExitReason: schema.ExitReason("signal"), DurationMS: 1234,
		Layers:    []schema.Layer{{Name: "landlock", State: "on"}, {Name: "seccomp", State: "off", Reason: "kernel"}},
		ServerUID: 65534, FileOwner: "1000:1000", LauncherUID: &uid, LauncherUIDBy: schema.LauncherUIDByDaemon,
	}
}

// TestLaunchRecordsAreHandEncoded: the start, identified and exit records
// no longer build encoding/json's encoder of Event (a quarter of a
// millisecond of CPU in every launch). Fails before appendLaunch.
func TestLaunchRecordsAreHandEncoded(t *testing.T) {
	for _, phase := range []schema.LaunchPhase{schema.PhaseStart, schema.PhaseExit, "identified"} {
		l := fullLaunch()
		l.Phase = phase
		if ev := launchEvent(l); !handEncoded(&ev) {
			t.Errorf("a %s record goes through encoding/json", phase)
		}
	}
}

func TestAppendEventMatchesEncodingJSON(t *testing.T) {
	with := func(f func(*schema.Decision)) schema.Event {
		d := fullDecision()
		f(&d)
		return decisionEvent(d)
	}
	launch := schema.Origin{Host: "h", BootID: "b"}.NewEvent(schema.KindLaunch, "run", "", "", time.Unix(1, 0))
	launch.Launch = &schema.Launch{Phase: "exit", Mode: schema.ModeEnforce, ExitStatus: 3, Layers: []schema.Layer{{}}}
	withLaunch := func(f func(*schema.Launch)) schema.Event {
		ev := launchEvent(fullLaunch())
		f(ev.Launch)
		return ev
	}
	cases := map[string]schema.Event{
		"full decision":         decisionEvent(fullDecision()),
		"empty decision":        decisionEvent(schema.Decision{}),
		"zero event":            {},
		"no decision":           {EventID: "e", Kind: schema.KindDecision},
		"omitted envelope":      {EventID: "e", SchemaVersion: -1, Host: "h", Kind: "k", TimeNS: math.MinInt64},
		"no path hashes":        with(func(d *schema.Decision) { d.PathHashes = nil }),
		"empty path hashes":     with(func(d *schema.Decision) { d.PathHashes = []schema.PathHash{} }),
		"one empty path hash":   with(func(d *schema.Decision) { d.PathHashes = []schema.PathHash{""} }),
		"html characters":       with(func(d *schema.Decision) { d.Tool = `<script>&"quoted"\back` }),
		"control characters":    with(func(d *schema.Decision) { d.Method = "a\x00b\x01\x1f\b\f\n\r\t\x7f" }),
		"line separators":       with(func(d *schema.Decision) { d.OpID = "a\u2028b\u2029c\u2027" }),
		"invalid utf-8":         with(func(d *schema.Decision) { d.ServerOrigin = "a\xffb\xc3(\xed\xa0\x80z\xf4\x90\x80\x80" }),
		"non-ascii":             with(func(d *schema.Decision) { d.Tool = "héllo 世界 🙂" }),
		"truncated rune at end": with(func(d *schema.Decision) { d.Tool = "ab\xe4\xb8" }),
		"launch":                launch,
		"full launch":           launchEvent(fullLaunch()),
		"empty launch":          launchEvent(schema.Launch{}),
		"launch, no layers":     withLaunch(func(l *schema.Launch) { l.Layers = nil }),
		"launch, empty layers":  withLaunch(func(l *schema.Launch) { l.Layers = []schema.Layer{} }),
		"launch, no uid":        withLaunch(func(l *schema.Launch) { l.LauncherUID = nil }),
		"launch, uid 0":         withLaunch(func(l *schema.Launch) { zero := 0; l.LauncherUID = &zero }),
		"launch, negative":      withLaunch(func(l *schema.Launch) { l.RootPID, l.ExitStatus, l.ServerUID, l.DurationMS = -1, -2, -1, math.MinInt64 }),
		"launch, escapes":       withLaunch(func(l *schema.Launch) { l.ServerName, l.Layers[0].Reason = "a<\u2028>\xff\"", "\x00&\t" }),
		"launch and decision":   withLaunch(func(l *schema.Launch) {}),
		"max ints":              with(func(d *schema.Decision) { d.RetryCount, d.StartNS, d.EndNS = math.MaxInt, math.MaxInt64, math.MinInt64 }),
	}
	both := cases["launch and decision"]
	d := fullDecision()
	both.Decision = &d
	cases["launch and decision"] = both
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-6, 9.99e-7, 1e-7, 1.5e-9, 1e-10, 5e-324, 1e20, 1e21, 1.5e22, 1e100, -1e-7, math.MaxFloat64, 123456.789, 0.1 + 0.2, 1.0 / 3} {
		cases["latency "+strconv.FormatFloat(f, 'g', -1, 64)] = with(func(d *schema.Decision) { d.LatencyMS = f })
	}
	for name, ev := range cases {
		t.Run(name, func(t *testing.T) {
			want, werr := encodingJSON(&ev)
			got, gerr := appendEvent([]byte("prefix"), &ev)
			if werr != nil || gerr != nil {
				t.Fatalf("errors: encoding/json %v, appendEvent %v", werr, gerr)
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Errorf("appendEvent:\n%s\nencoding/json:\n%s", got[len("prefix"):], want)
			}
		})
	}
}

func TestAppendEventRefusesWhatEncodingJSONRefuses(t *testing.T) {
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		d := fullDecision()
		d.LatencyMS = f
		ev := decisionEvent(d)
		if _, err := encodingJSON(&ev); err == nil {
			t.Fatalf("encoding/json accepted latency %v", f)
		}
		if b, err := appendEvent(nil, &ev); err == nil {
			t.Errorf("latency %v: appendEvent wrote %s", f, b)
		}
	}
}

// TestAppendEventKnowsEveryField fails when Event or Decision gains a
// field: appendEvent must then write it too (and this list be updated).
func TestAppendEventKnowsEveryField(t *testing.T) {
	tags := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			out = append(out, rt.Field(i).Name+":"+rt.Field(i).Type.String()+":"+rt.Field(i).Tag.Get("json"))
		}
		return out
	}
	wantEvent := []string{
		"EventID:string:event_id", "SchemaVersion:int:schema_version", "Host:string:host", "BootID:string:boot_id",
		"RunID:string:run_id,omitempty", "ScopeID:string:scope_id,omitempty", "ScopeHash:string:scope_hash,omitempty",
		"Kind:schema.Kind:kind", "TimeNS:int64:time_ns",
		"Launch:*schema.Launch:launch,omitempty", "Decision:*schema.Decision:decision,omitempty",
		"FileOp:*schema.FileOp:file_op,omitempty", "LandlockDenial:*schema.LandlockDenial:landlock_denial,omitempty",
		"Finding:*schema.Finding:finding,omitempty", "Health:*schema.Health:health,omitempty",
	}
	wantDecision := []string{
		"OpID:string:op_id", "Method:string:method", "ProtocolEra:string:protocol_era", "ProtocolVersion:string:protocol_version",
		"ServerOrigin:string:server_origin", "Tool:string:tool,omitempty", "ActionClass:schema.ActionClass:action_class",
		"Decision:schema.Outcome:decision", "Approval:schema.ApprovalState:approval", "ErrorCode:string:error_code,omitempty",
		"RetryCount:int:retry_count", "LatencyMS:float64:latency_ms", "PathHashes:[]schema.PathHash:path_hashes,omitempty",
		"CorrelationID:string:correlation_id,omitempty", "StartNS:int64:start_ns", "EndNS:int64:end_ns",
	}
	if got := tags(schema.Event{}); !slices.Equal(got, wantEvent) {
		t.Errorf("schema.Event changed: update appendEvent and this list\ngot  %q\nwant %q", got, wantEvent)
	}
	if got := tags(schema.Decision{}); !slices.Equal(got, wantDecision) {
		t.Errorf("schema.Decision changed: update appendEvent and this list\ngot  %q\nwant %q", got, wantDecision)
	}
	wantLaunch := []string{
		"Phase:schema.LaunchPhase:phase", "Mode:schema.RunMode:mode", "LandlockABI:int:landlock_abi", "Degraded:bool:degraded",
		"DegradedReason:string:degraded_reason,omitempty", "ServerExe:string:server_exe,omitempty", "ServerName:string:server_name,omitempty",
		"ServerVersion:string:server_version,omitempty", "ProtocolEra:string:protocol_era,omitempty", "RootPID:int:root_pid,omitempty",
		"ExitStatus:int:exit_status", "ExitReason:schema.ExitReason:exit_reason,omitempty", "DurationMS:int64:duration_ms",
		"Layers:[]schema.Layer:layers,omitempty", "ServerUID:int:server_uid", "FileOwner:string:file_owner,omitempty",
		"LauncherUID:*int:launcher_uid,omitempty", "LauncherUIDBy:schema.LauncherUIDBy:launcher_uid_by,omitempty",
	}
	if got := tags(schema.Launch{}); !slices.Equal(got, wantLaunch) {
		t.Errorf("schema.Launch changed: update appendLaunch and this list\ngot  %q\nwant %q", got, wantLaunch)
	}
	wantLayer := []string{"Name:schema.LayerName:name", "State:schema.LayerState:state", "Reason:string:reason,omitempty"}
	if got := tags(schema.Layer{}); !slices.Equal(got, wantLayer) {
		t.Errorf("schema.Layer changed: update appendLaunch and this list\ngot  %q\nwant %q", got, wantLayer)
	}
	// None of the types has a marshaller of its own, which encoding/json
	// would call and appendEvent would not.
	for _, v := range []any{schema.Event{}, schema.Decision{}, schema.Kind(""), schema.ActionClass(""), schema.Outcome(""), schema.ApprovalState(""), schema.PathHash(""),
		schema.Launch{}, schema.Layer{}, schema.LaunchPhase(""), schema.RunMode(""), schema.ExitReason(""), schema.LayerName(""), schema.LayerState(""), schema.LauncherUIDBy("")} {
		rt := reflect.TypeOf(v)
		for _, m := range []reflect.Type{reflect.TypeFor[json.Marshaler](), reflect.TypeFor[interface{ MarshalText() ([]byte, error) }]()} {
			if rt.Implements(m) || reflect.PointerTo(rt).Implements(m) {
				t.Errorf("%v implements %v: appendEvent does not call it", rt, m)
			}
		}
	}
}

func TestAppendEventAllocationBudget(t *testing.T) {
	ev := decisionEvent(fullDecision())
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() {
		var err error
		if buf, err = appendEvent(buf[:0], &ev); err != nil {
			t.Fatal(err)
		}
	}); n > 0 {
		t.Errorf("appendEvent of a decision into a large enough buffer: %v allocations, want 0", n)
	}
}

func FuzzAppendEvent(f *testing.F) {
	f.Add("op-1", "tools/call", "read_text_file", "<&>\u2028", "\xff\xfe", 0.25, int64(7), 1, true)
	f.Add("", "", "", "", "", 1e-7, int64(-1), -3, false)
	f.Fuzz(func(t *testing.T, opID, method, tool, origin, hash string, latency float64, ns int64, retry int, hasDecision bool) {
		ev := schema.Event{EventID: opID, Host: origin, RunID: tool, Kind: schema.Kind(method), TimeNS: ns, SchemaVersion: retry}
		if retry%3 != 0 {
			var uid *int
			if retry%2 == 0 {
				uid = &retry
			}
			var layers []schema.Layer
			if len(hash) > 0 {
				layers = []schema.Layer{{Name: schema.LayerName(hash), State: schema.LayerState(tool), Reason: origin}, {}}
			}
			ev.Launch = &schema.Launch{
				Phase: schema.LaunchPhase(method), Mode: schema.RunMode(tool), LandlockABI: retry, Degraded: hasDecision, DegradedReason: hash,
				ServerExe: origin, ServerName: opID, ServerVersion: hash, ProtocolEra: tool, RootPID: -retry, ExitStatus: retry,
				ExitReason: schema.ExitReason(opID), DurationMS: ns, Layers: layers, ServerUID: retry, FileOwner: hash,
				LauncherUID: uid, LauncherUIDBy: schema.LauncherUIDBy(origin),
			}
		}
		if hasDecision {
			ev.Decision = &schema.Decision{
				OpID: opID, Method: method, ProtocolEra: hash, ProtocolVersion: origin, ServerOrigin: origin, Tool: tool,
				ActionClass: schema.ActionClass(hash), Decision: schema.Outcome(method), Approval: schema.ApprovalState(tool),
				ErrorCode: hash, RetryCount: retry, LatencyMS: latency, PathHashes: []schema.PathHash{schema.PathHash(hash), schema.PathHash(opID)},
				CorrelationID: tool, StartNS: ns, EndNS: -ns,
			}
		}
		want, werr := encodingJSON(&ev)
		got, gerr := appendEvent(nil, &ev)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("errors differ: encoding/json %v, appendEvent %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("appendEvent:\n%q\nencoding/json:\n%q", got, want)
		}
		if werr == nil && strings.Count(string(got), "\n") != 1 {
			t.Fatalf("not one line: %q", got)
		}
	})
}

func BenchmarkAppendEvent(b *testing.B) {
	ev := decisionEvent(fullDecision())
	b.Run("appendEvent", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _ = appendEvent(buf[:0], &ev)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = encodingJSON(&ev)
		}
	})
}
