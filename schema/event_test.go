package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

type schemaProp struct {
	Type any    `json:"type"`
	Ref  string `json:"$ref"`
}

type schemaObj struct {
	Required   []string              `json:"required"`
	Properties map[string]schemaProp `json:"properties"`
	Type       any                   `json:"type"`
}

// TestEventJSONSchemaInStep keeps event.schema.json and the Go event types in
// step: for the envelope and every body, the same property names, the same
// required set (fields without omitempty), compatible JSON types.
func TestEventJSONSchemaInStep(t *testing.T) {
	raw, err := os.ReadFile("event.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		schemaObj
		Defs map[string]schemaObj `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("event.schema.json: %v", err)
	}
	check := func(t *testing.T, typ reflect.Type, obj schemaObj) {
		var fields, required []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			fields = append(fields, name)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
			p, ok := obj.Properties[name]
			if !ok {
				t.Errorf("Go field %s.%s (%q) missing from the schema", typ.Name(), f.Name, name)
				continue
			}
			st := p.Type
			if st == nil && p.Ref != "" {
				st = doc.Defs[strings.TrimPrefix(p.Ref, "#/$defs/")].Type
			}
			if want := eventJSONType(f.Type); !typeListed(st, want) {
				t.Errorf("%s.%s: schema type %v, Go type %s wants %q", typ.Name(), name, st, f.Type, want)
			}
		}
		for name := range obj.Properties {
			if !slices.Contains(fields, name) {
				t.Errorf("schema property %q of %s has no Go field", name, typ.Name())
			}
		}
		slices.Sort(required)
		req := slices.Clone(obj.Required)
		slices.Sort(req)
		if !slices.Equal(required, req) {
			t.Errorf("%s required: schema %v, Go %v", typ.Name(), req, required)
		}
	}
	t.Run("envelope", func(t *testing.T) { check(t, reflect.TypeOf(Event{}), doc.schemaObj) })
	for def, v := range map[string]any{
		"launch": Launch{}, "layer": Layer{}, "decision": Decision{}, "file_op": FileOp{},
		"landlock_denial": LandlockDenial{}, "finding": Finding{}, "health": Health{},
	} {
		t.Run(def, func(t *testing.T) { check(t, reflect.TypeOf(v), doc.Defs[def]) })
	}
	var kinds []string
	if err := json.Unmarshal(mustProp(t, raw, "kind"), &struct {
		Enum *[]string `json:"enum"`
	}{&kinds}); err != nil {
		t.Fatal(err)
	}
	for _, k := range Kinds {
		if !slices.Contains(kinds, string(k)) {
			t.Errorf("kind %q missing from the schema's enum", k)
		}
	}
}

func mustProp(t *testing.T, raw []byte, name string) json.RawMessage {
	var doc struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Properties[name]
}

func eventJSONType(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int64, reflect.Uint64, reflect.Int32, reflect.Uint32:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice:
		return "array"
	case reflect.Struct:
		return "object"
	}
	return "?"
}

func validEvents() []Event {
	o := Origin{Host: "web-1.example.com", BootID: "0b6c2a58-4a4d-4f3b-9a55-2f3c5e0d9e11"}
	h, _ := NewPathHasher(make([]byte, PathKeySize))
	now := time.Unix(1_780_000_000, 0)
	sh := "sha256:" + strings.Repeat("ab", 32)
	mk := func(k Kind) Event { return o.NewEvent(k, NewID(), "scope-1", sh, now) }
	l := mk(KindLaunch)
	l.Launch = &Launch{Phase: "start", Mode: ModeAudit, LandlockABI: 7, ServerExe: "node", ServerName: "secure-filesystem-server", ServerVersion: "0.2.0", ProtocolEra: "legacy",
		Layers: []Layer{{Name: LayerLandlock, State: LayerOn}, {Name: LayerNetNS, State: LayerOff, Reason: "scope_grants_network"}}, ServerUID: 1879048193, FileOwner: "1000:1000",
		LauncherUID: func() *int { u := 1000; return &u }(), LauncherUIDBy: LauncherUIDByDaemon}
	d := mk(KindDecision)
	d.Decision = &Decision{OpID: "op-1", Method: "tools/call", ProtocolEra: "legacy", ProtocolVersion: "2025-11-25", ServerOrigin: "stdio", Tool: "read_text_file", ActionClass: "read", Decision: "deny", Approval: "not_required", ErrorCode: string(ErrPathOutsideScope), PathHashes: []PathHash{h.Hash("/etc/passwd")}, CorrelationID: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", StartNS: 1, EndNS: 2}
	f := mk(KindFileOp)
	f.FileOp = &FileOp{Syscall: "openat", FlagsClass: "read", Result: -13, PathHash: h.Hash("/etc/shadow"), PathClass: PathOutside, Verdict: "blocked_by_kernel", PID: 42, Comm: "node"}
	ll := mk(KindLandlockDenial)
	ll.LandlockDenial = &LandlockDenial{Domain: "18ed00109", Blockers: []string{"fs.read_file"}, PathHash: h.Hash("/etc/hostname"), PathClass: PathOutside, PID: 42, Comm: "node"}
	fi := mk(KindFinding)
	fi.Finding = &Finding{Type: FindingBlockedAttempt, Severity: SeverityMedium, EvidenceIDs: []string{f.EventID, ll.EventID}, Tool: "read_text_file", OpID: "op-1", Reason: "kernel_denied"}
	he := mk(KindHealth)
	he.Health = &Health{Component: "daemon", Hooks: []string{"tracepoint/syscalls/sys_enter_openat"}, LandlockABI: 7, AuditStream: "on", DropsKernelAudit: 3}
	return []Event{l, d, f, ll, fi, he}
}

func TestValidateAcceptsEveryKind(t *testing.T) {
	for _, e := range validEvents() {
		t.Run(string(e.Kind), func(t *testing.T) {
			if err := e.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestValidateRefusesUnsanitized: every way a path, a prompt or a malformed
// envelope could be smuggled into an event is refused.
func TestValidateRefusesUnsanitized(t *testing.T) {
	ev := validEvents()
	launch, decision, fileop, denial, finding, health := ev[0], ev[1], ev[2], ev[3], ev[4], ev[5]
	for _, tc := range []struct {
		name string
		base Event
		mut  func(e *Event)
	}{
		{"bad event id", launch, func(e *Event) { e.EventID = "x" }},
		{"uppercase event id", launch, func(e *Event) { e.EventID = strings.ToUpper(NewID()) }},
		{"future schema version", launch, func(e *Event) { e.SchemaVersion = EventSchemaVersion + 1 }},
		{"negative launcher uid", launch, func(e *Event) { u := -1; e.Launch = cloneLaunch(e.Launch); e.Launch.LauncherUID = &u }},
		{"launcher uid beyond 32 bits", launch, func(e *Event) { u := 1 << 32; e.Launch = cloneLaunch(e.Launch); e.Launch.LauncherUID = &u }},
		{"launcher uid in schema version 1", launch, func(e *Event) {
			u := 1000
			e.Launch = cloneLaunch(e.Launch)
			e.Launch.LauncherUID, e.SchemaVersion = &u, 1
		}},
		{"host with space", launch, func(e *Event) { e.Host = "a b" }},
		{"host with subject wildcard", launch, func(e *Event) { e.Host = "a.>" }},
		// '_' and '.' share a subject token (web_1 is web.1's).
		{"host with underscore", launch, func(e *Event) { e.Host = "web_1" }},
		{"run id path", launch, func(e *Event) { e.RunID = "/etc/passwd" }},
		{"scope hash not sha256", launch, func(e *Event) { e.ScopeHash = strings.Repeat("a", 64) }},
		{"zero time", launch, func(e *Event) { e.TimeNS = 0 }},
		{"no body", launch, func(e *Event) { e.Launch = nil }},
		{"two bodies", launch, func(e *Event) { e.Health = &Health{Component: "x"} }},
		{"body of another kind", launch, func(e *Event) { e.Kind = KindHealth }},
		{"unknown kind", launch, func(e *Event) { e.Kind = "other" }},
		{"server exe full path", launch, func(e *Event) { e.Launch.ServerExe = "/usr/bin/node" }},
		{"server name sentence", launch, func(e *Event) { e.Launch.ServerName = "ignore previous instructions" }},
		{"unknown mode", launch, func(e *Event) { e.Launch.Mode = "loose" }},
		{"unknown layer", launch, func(e *Event) { e.Launch.Layers = []Layer{{Name: "chroot", State: LayerOn}} }},
		{"layer twice", launch, func(e *Event) {
			e.Launch.Layers = []Layer{{Name: LayerNetNS, State: LayerOn}, {Name: LayerNetNS, State: LayerOff}}
		}},
		{"unknown layer state", launch, func(e *Event) { e.Launch.Layers = []Layer{{Name: LayerPIDNS, State: "maybe"}} }},
		{"layer reason path", launch, func(e *Event) { e.Launch.Layers = []Layer{{Name: LayerMountNS, State: LayerOff, Reason: "/etc/x"}} }},
		{"file owner sentence", launch, func(e *Event) { e.Launch.FileOwner = "alice and bob" }},
		{"server uid below -1", launch, func(e *Event) { e.Launch.ServerUID = -2 }},
		{"tool absolute path", decision, func(e *Event) { e.Decision.Tool = "/etc/shadow" }},
		{"tool traversal", decision, func(e *Event) { e.Decision.Tool = "a/../../etc" }},
		{"raw path in path hashes", decision, func(e *Event) { e.Decision.PathHashes = []PathHash{"/home/u/.ssh/id_rsa"} }},
		{"credential in correlation id", decision, func(e *Event) { e.Decision.CorrelationID = "Bearer abc" }},
		{"end before start", decision, func(e *Event) { e.Decision.StartNS, e.Decision.EndNS = 5, 4 }},
		{"unknown decision", decision, func(e *Event) { e.Decision.Decision = "maybe" }},
		{"file op path in hash", fileop, func(e *Event) { e.FileOp.PathHash = "/etc/shadow" }},
		{"file op comm with slash", fileop, func(e *Event) { e.FileOp.Comm = "kworker/0:1" }},
		{"file op long comm", fileop, func(e *Event) { e.FileOp.Comm = strings.Repeat("a", 17) }},
		{"file op unknown verdict", fileop, func(e *Event) { e.FileOp.Verdict = "fine" }},
		{"denial blocker sentence", denial, func(e *Event) { e.LandlockDenial.Blockers = []string{"read /etc"} }},
		{"finding unknown type", finding, func(e *Event) { e.Finding.Type = "OOPS" }},
		{"finding evidence not id", finding, func(e *Event) { e.Finding.EvidenceIDs = []string{"/etc"} }},
		{"finding reason sentence", finding, func(e *Event) { e.Finding.Reason = "the model read secrets" }},
		{"health hook absolute", health, func(e *Event) { e.Health.Hooks = []string{"/sys/kernel"} }},
		// Numbers beyond what their ClickHouse column holds would be stored
		// wrapped to another value (a pid of -1 as 4294967295).
		{"file op negative pid", fileop, func(e *Event) { e.FileOp.PID = -1 }},
		{"file op pid beyond PID_MAX_LIMIT", fileop, func(e *Event) { e.FileOp.PID = MaxPID + 1 }},
		{"file op result beyond int32", fileop, func(e *Event) { e.FileOp.Result = 1 << 40 }},
		{"file op result below int32", fileop, func(e *Event) { e.FileOp.Result = -(1 << 40) }},
		{"denial pid beyond PID_MAX_LIMIT", denial, func(e *Event) { e.LandlockDenial.PID = 1 << 32 }},
		{"launch negative root pid", launch, func(e *Event) { e.Launch.RootPID = -7 }},
		{"launch exit status beyond int32", launch, func(e *Event) { e.Launch.ExitStatus = 1 << 40 }},
		{"launch landlock abi beyond uint8", launch, func(e *Event) { e.Launch.LandlockABI = 256 }},
		{"launch negative landlock abi", launch, func(e *Event) { e.Launch.LandlockABI = -1 }},
		{"launch negative duration", launch, func(e *Event) { e.Launch.DurationMS = -5 }},
		{"launch server uid beyond uid_t", launch, func(e *Event) { e.Launch.ServerUID = 1 << 32 }},
		{"decision negative retry count", decision, func(e *Event) { e.Decision.RetryCount = -1 }},
		{"decision retry count beyond uint32", decision, func(e *Event) { e.Decision.RetryCount = 1 << 32 }},
		{"decision negative latency", decision, func(e *Event) { e.Decision.LatencyMS = -0.5 }},
		{"health landlock abi beyond uint8", health, func(e *Event) { e.Health.LandlockABI = 1000 }},
		{"launcher uid asserted by an unknown party", launch, func(e *Event) {
			e.Launch = cloneLaunch(e.Launch)
			e.Launch.LauncherUIDBy = "kernel"
		}},
		{"launcher uid without who asserts it (schema version 3)", launch, func(e *Event) {
			e.Launch = cloneLaunch(e.Launch)
			e.Launch.LauncherUIDBy = ""
		}},
		{"who asserts a launcher uid, without it", launch, func(e *Event) {
			e.Launch = cloneLaunch(e.Launch)
			e.Launch.LauncherUID = nil
		}},
		{"who asserts a launcher uid in schema version 2", launch, func(e *Event) {
			e.Launch = cloneLaunch(e.Launch)
			e.SchemaVersion = 2
		}},
		{"kernel audit drops in schema version 2", health, func(e *Event) {
			h := *e.Health
			h.DropsKernelAudit, e.Health, e.SchemaVersion = 1, &h, 2
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Deep copy through JSON so mutations do not leak between cases.
			b, _ := json.Marshal(tc.base)
			var e Event
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			tc.mut(&e)
			err := e.Validate()
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("accepted (err %v)", err)
			}
		})
	}
}

func TestSanitizeHelpers(t *testing.T) {
	for in, want := range map[string]string{"kworker/0:1": "kworker_0:1", "node": "node", "a b\x00c": "a_b_c", strings.Repeat("x", 20): strings.Repeat("x", 16)} {
		if got := SanitizeComm(in); got != want {
			t.Errorf("SanitizeComm(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"tools/call": "tools/call", "/etc/passwd": "_invalid", "a/../b": "_invalid", "read file": "_invalid", "": "_invalid"} {
		if got := SanitizeLabel(in); got != want {
			t.Errorf("SanitizeLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBatchRoundTrip(t *testing.T) {
	evs := validEvents()
	body, err := EncodeBatch(evs)
	if err != nil {
		t.Fatal(err)
	}
	bad := append(append([]byte(nil), body...), []byte("{\"event_id\":\"nope\"}\nnot json\n\n")...)
	got, rejected, err := DecodeBatch(bad)
	if err != nil {
		t.Fatal(err)
	}
	if rejected != 2 || len(got) != len(evs) {
		t.Fatalf("got %d events, %d rejected; want %d, 2", len(got), rejected, len(evs))
	}
	for i := range evs {
		if !reflect.DeepEqual(got[i], evs[i]) {
			t.Fatalf("event %d changed in transit:\n%+v\n%+v", i, got[i], evs[i])
		}
	}
	if _, _, err := DecodeBatch(make([]byte, MaxBatchBytes+1)); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("oversized batch: %v", err)
	}
	if _, _, err := DecodeBatch(bytes.Repeat([]byte("\n"), MaxBatchEvents+2)); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("too many lines: %v", err)
	}
}

// TestDecodeBatchRefusesAmbiguousLines: a line that names a field twice could
// mean different things to different readers; it is rejected, not resolved.
// A name in another case is an unknown member, never the field itself:
// the line is rejected, like any member this release does not know.
func TestDecodeBatchRefusesAmbiguousLines(t *testing.T) {
	evs := validEvents()
	body, err := EncodeBatch(evs[:1])
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.TrimSpace(body)
	for name, bad := range map[string][]byte{
		"duplicate run_id": bytes.Replace(line, []byte(`"run_id":`), []byte(`"run_id":"x","run_id":`), 1),
		"invalid utf-8":    bytes.Replace(line, []byte(`"host":"`), []byte("\"host\":\"\xff"), 1),
	} {
		t.Run(name, func(t *testing.T) {
			if bytes.Equal(bad, line) {
				t.Fatal("test input was not changed")
			}
			got, rejected, err := DecodeBatch(bad)
			if err != nil || rejected != 1 || len(got) != 0 {
				t.Fatalf("got %d events, %d rejected, %v; want the line rejected", len(got), rejected, err)
			}
		})
	}
	for name, bad := range map[string][]byte{
		"case variant":           bytes.Replace(line, []byte(`"run_id":`), []byte(`"RUN_ID":`), 1),
		"case variant of a body": bytes.Replace(line, []byte(`"launch":`), []byte(`"Launch":`), 1),
		"unknown member":         bytes.Replace(line, []byte(`"run_id":`), []byte(`"path":"/etc/shadow","run_id":`), 1),
		"unknown body member":    bytes.Replace(line, []byte(`"phase":`), []byte(`"prompt":"ignore all","phase":`), 1),
	} {
		if bytes.Equal(bad, line) {
			t.Fatalf("%s: test input was not changed", name)
		}
		got, rejected, err := DecodeBatch(bad)
		if err != nil || rejected != 1 || len(got) != 0 {
			t.Fatalf("%s: got %d events, %d rejected, %v; want the line rejected", name, len(got), rejected, err)
		}
	}
}

// FuzzDecodeBatch feeds untrusted message bodies to the collector's decoder:
// it must not panic, and whatever it returns is valid and carries no string
// that looks like a path or a sentence.
func FuzzDecodeBatch(f *testing.F) {
	body, _ := EncodeBatch(validEvents())
	f.Add(body)
	f.Add(encodeV2(f, sameEnvelope()))
	f.Add([]byte("{\"batch\":{\"format\":\"ndjson-v2\",\"schema_version\":1,\"host\":\"h\",\"boot_id\":\"\",\"kind\":\"health\"}}\n{\"event_id\":\"0123456789abcdef0123456789abcdef\",\"time_ns\":1,\"health\":{\"component\":\"x\"}}\n"))
	f.Add([]byte(`{"event_id":"0123456789abcdef0123456789abcdef","schema_version":1,"host":"h","boot_id":"","kind":"health","time_ns":1,"health":{"component":"x","drops_bpf_reserve":0,"drops_queue_full":0,"drops_publish_fail":0,"spool_depth":0}}`))
	f.Add([]byte(`{"event_id":"0123456789abcdef0123456789abcdef","schema_version":3,"host":"h","boot_id":"","kind":"health","time_ns":1,"health":{"component":"x","drops_bpf_reserve":0,"drops_queue_full":0,"drops_publish_fail":0,"spool_depth":0,"drops_kernel_audit":18446744073709551615}}`))
	f.Add([]byte("{\"kind\":\"file_op\",\"file_op\":{\"comm\":\"/etc\"}}\n[]\nnull\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, rejected, err := DecodeBatch(body)
		if err != nil {
			return
		}
		if rejected < 0 || len(evs) > bytes.Count(body, []byte{'\n'})+1 {
			t.Fatalf("impossible counts: %d events, %d rejected", len(evs), rejected)
		}
		for i := range evs {
			if err := evs[i].Validate(); err != nil {
				t.Fatalf("returned an invalid event: %v", err)
			}
			walkStrings(reflect.ValueOf(evs[i]), func(s string) {
				if strings.HasPrefix(s, "/") || strings.ContainsAny(s, " \n\t\"") {
					t.Fatalf("decoded event carries %q", s)
				}
			})
			if _, err := AppendEvent(nil, &evs[i]); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func walkStrings(v reflect.Value, fn func(string)) {
	switch v.Kind() {
	case reflect.String:
		fn(v.String())
	case reflect.Pointer:
		if !v.IsNil() {
			walkStrings(v.Elem(), fn)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			walkStrings(v.Field(i), fn)
		}
	case reflect.Slice:
		for i := range v.Len() {
			walkStrings(v.Index(i), fn)
		}
	}
}

// encodeV2 builds an ndjson-v2 body the way the publisher does: the
// envelope of evs[0], then every event's line.
func encodeV2(t testing.TB, evs []Event) []byte {
	t.Helper()
	body, err := AppendEnvelope(nil, EnvelopeOf(&evs[0]))
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if EnvelopeOf(&evs[i]) != EnvelopeOf(&evs[0]) {
			t.Fatalf("event %d has another envelope", i)
		}
		if body, err = AppendEventLine(body, &evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return body
}

// sameEnvelope returns valid events that share one envelope: the valid
// events of the first's kind, and copies of the first at other times.
func sameEnvelope() []Event {
	evs := validEvents()
	var out []Event
	for i := range evs {
		if EnvelopeOf(&evs[i]) == EnvelopeOf(&evs[0]) {
			out = append(out, evs[i])
		}
	}
	for i := range 4 {
		e := evs[0]
		e.EventID, e.TimeNS = NewID(), e.TimeNS+int64(i+1)
		out = append(out, e)
	}
	return out
}

func TestBatchV2RoundTrip(t *testing.T) {
	evs := sameEnvelope()
	body := encodeV2(t, evs)
	lines := bytes.Split(bytes.TrimSpace(body), []byte{'\n'})
	if len(lines) != len(evs)+1 || !bytes.HasPrefix(lines[0], []byte(`{"batch":{"format":"ndjson-v2",`)) {
		t.Fatalf("unexpected body:\n%s", body)
	}
	for _, l := range lines[1:] {
		for _, f := range []string{`"host"`, `"boot_id"`, `"kind"`, `"schema_version"`, `"run_id"`, `"scope_hash"`} {
			if bytes.Contains(l, []byte(f)) {
				t.Fatalf("event line repeats the envelope field %s: %s", f, l)
			}
		}
	}
	got, rejected, err := DecodeBatch(append(body, "not json\n\n"...))
	if err != nil || rejected != 1 || len(got) != len(evs) {
		t.Fatalf("got %d events, %d rejected, %v; want %d, 1", len(got), rejected, err, len(evs))
	}
	for i := range evs {
		if !reflect.DeepEqual(got[i], evs[i]) {
			t.Fatalf("event %d changed in transit:\n%+v\n%+v", i, got[i], evs[i])
		}
	}
	v1, _ := EncodeBatch(evs)
	if len(body) >= len(v1) {
		t.Errorf("v2 body (%d bytes) is not smaller than v1 (%d)", len(body), len(v1))
	}
}

// TestBatchV2Hostile: an envelope applies to every line, so any doubt about
// it refuses the whole message; a line that restates an envelope field
// (which reader's value would win?) is refused alone.
func TestBatchV2Hostile(t *testing.T) {
	evs := sameEnvelope()
	body := encodeV2(t, evs)
	env, rest, _ := bytes.Cut(body, []byte{'\n'})
	whole := map[string][]byte{
		"unknown format":        bytes.Replace(env, []byte(`ndjson-v2`), []byte(`ndjson-v9`), 1),
		"unknown envelope key":  bytes.Replace(env, []byte(`"host":`), []byte(`"shell":"x","host":`), 1),
		"case-variant key":      bytes.Replace(env, []byte(`"host":`), []byte(`"HOST":`), 1),
		"duplicate host":        bytes.Replace(env, []byte(`"host":`), []byte(`"host":"other","host":`), 1),
		"envelope not json":     []byte(`{"batch":{"format":"ndjson-v2"`),
		"envelope invalid utf8": bytes.Replace(env, []byte(`"host":"`), []byte("\"host\":\"\xff"), 1),
	}
	for name, e := range whole {
		t.Run(name, func(t *testing.T) {
			if bytes.Equal(e, env) {
				t.Fatal("test input was not changed")
			}
			got, _, err := DecodeBatch(append(append(e, '\n'), rest...))
			if err == nil || len(got) != 0 {
				t.Fatalf("accepted %d events (err %v)", len(got), err)
			}
		})
	}
	first, _, _ := bytes.Cut(rest, []byte{'\n'})
	for _, field := range []string{`"host":"evil"`, `"kind":"health"`, `"run_id":"0123456789abcdef0123456789abcdef"`, `"schema_version":1`, `"boot_id":"x"`} {
		t.Run("line sets "+field, func(t *testing.T) {
			line := bytes.Replace(first, []byte(`{`), []byte(`{`+field+`,`), 1)
			got, rejected, err := DecodeBatch(append(append(append([]byte(nil), env...), '\n'), line...))
			if err != nil || rejected != 1 || len(got) != 0 {
				t.Fatalf("got %d events, %d rejected, %v; want the line rejected", len(got), rejected, err)
			}
		})
	}
	// The envelope's own values are validated with every event.
	badHost := bytes.Replace(env, []byte(`"host":"`), []byte(`"host":"/etc/`), 1)
	got, rejected, err := DecodeBatch(append(append(badHost, '\n'), rest...))
	if err != nil || len(got) != 0 || rejected != len(evs) {
		t.Fatalf("a path as host: got %d events, %d rejected, %v", len(got), rejected, err)
	}
}

func TestSanitizeToken(t *testing.T) {
	for in, want := range map[string]string{
		"secure-filesystem-server":                "secure-filesystem-server",
		"@modelcontextprotocol/server-everything": "@modelcontextprotocol_server-everything",
		"0.6.2-beta+build.7":                      "0.6.2-beta+build.7",
		"my server \"v2\"":                        "my_server__v2_",
		"":                                        "",
		strings.Repeat("a", 200):                  strings.Repeat("a", 128),
	} {
		if got := SanitizeToken(in); got != want {
			t.Errorf("SanitizeToken(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzSanitizeToken: whatever a server calls itself, the result is a token
// (or empty for an empty name), so a launch record carrying it validates.
func FuzzSanitizeToken(f *testing.F) {
	f.Add("server/../../etc")
	f.Add("\x00\xff name")
	f.Fuzz(func(t *testing.T, s string) {
		got := SanitizeToken(s)
		if (got == "") != (s == "") {
			t.Fatalf("SanitizeToken(%q) = %q", s, got)
		}
		if got != "" && !IsToken(got) {
			t.Fatalf("SanitizeToken(%q) = %q, not a token", s, got)
		}
	})
}

// TestEventJSONSchemaBoundsMatchValidate: every minimum and maximum that
// event.schema.json states is the bound Validate enforces: the bound itself
// is accepted, one past it is refused (by Validate, or by decoding when the
// Go type cannot hold it).
func TestEventJSONSchemaBoundsMatchValidate(t *testing.T) {
	raw, err := os.ReadFile("event.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	type obj struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	var doc struct {
		obj
		Defs map[string]obj `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	bodies := map[string]Event{}
	for _, e := range validEvents() {
		bodies[string(e.Kind)] = e
	}
	// The envelope's bounds on a body every schema_version takes.
	bodies[""] = bodies[string(KindFileOp)]
	// with sets member name of the event's body (or of the envelope when
	// body is "") to the literal n and validates the result.
	with := func(body, name, n string) error {
		b, _ := json.Marshal(bodies[body])
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if body == "" {
			m[name] = json.RawMessage(n)
		} else {
			var inner map[string]json.RawMessage
			if err := json.Unmarshal(m[body], &inner); err != nil {
				t.Fatal(err)
			}
			inner[name] = json.RawMessage(n)
			m[body], _ = json.Marshal(inner)
		}
		b, _ = json.Marshal(m)
		var e Event
		if err := json.Unmarshal(b, &e); err != nil {
			return err
		}
		return e.Validate()
	}
	checked := 0
	for _, def := range []string{"", "launch", "decision", "file_op", "landlock_denial", "finding", "health"} {
		props := doc.Properties
		if def != "" {
			props = doc.Defs[def].Properties
		}
		for name, p := range props {
			var b struct {
				Type any          `json:"type"`
				Min  *json.Number `json:"minimum"`
				Max  *json.Number `json:"maximum"`
			}
			if err := json.Unmarshal(p, &b); err != nil {
				t.Fatal(err)
			}
			if b.Min == nil && b.Max == nil {
				continue
			}
			if _, ok := bodies[def]; !ok {
				t.Fatalf("no valid %s event to try %s on", def, name)
			}
			step := func(n json.Number, d int64) string {
				if b.Type == "number" {
					f, _ := n.Float64()
					return fmt.Sprint(f + float64(d)*0.5)
				}
				var z big.Int
				z.SetString(n.String(), 10)
				return z.Add(&z, big.NewInt(d)).String()
			}
			at := def + "." + name
			for _, bound := range []struct {
				n   *json.Number
				out int64
			}{{b.Min, -1}, {b.Max, +1}} {
				if bound.n == nil {
					continue
				}
				checked++
				if err := with(def, name, bound.n.String()); err != nil {
					t.Errorf("%s = %s (the schema's bound) refused: %v", at, bound.n, err)
				}
				if past := step(*bound.n, bound.out); with(def, name, past) == nil {
					t.Errorf("%s = %s (past the schema's bound %s) accepted", at, past, bound.n)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d bounds checked: the schema walk missed bodies", checked)
	}
}

func cloneLaunch(l *Launch) *Launch { c := *l; return &c }
