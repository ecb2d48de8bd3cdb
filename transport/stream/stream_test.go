package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

func TestSubjects(t *testing.T) {
	for _, tc := range []struct{ host, want string }{
		{"web-1", "mcpwarden.v1.web-1.file_op"},
		{"web-1.example.com", "mcpwarden.v1.web-1_example_com.file_op"},
		{"a.>", "mcpwarden.v1.a__.file_op"},
		{"a *b", "mcpwarden.v1.a__b.file_op"},
		{"", "mcpwarden.v1._.file_op"},
		{"hôst", "mcpwarden.v1.h_st.file_op"},
	} {
		got := Subject(tc.host, schema.KindFileOp)
		if got != tc.want {
			t.Errorf("Subject(%q) = %q, want %q", tc.host, got, tc.want)
		}
		if strings.Count(got, ".") != 3 || strings.ContainsAny(got, "*> ") {
			t.Errorf("subject %q is not four plain tokens", got)
		}
	}
}

func TestStreamConfigDefaults(t *testing.T) {
	c := Config{}.JetStream()
	if c.Name != Name || c.Subjects[0] != AllSubjects || c.MaxAge != 7*24*time.Hour || c.Duplicates != 10*time.Minute || c.Replicas != 1 {
		t.Fatalf("defaults: %+v", c)
	}
	if c.Discard.String() != "DiscardNew" {
		t.Fatalf("a full stream must refuse new messages (publishers spool), got %v", c.Discard)
	}
}

func TestConnectErrorsRedactCredentials(t *testing.T) {
	if _, err := Connect(ConnOptions{}); err == nil {
		t.Fatal("empty URL accepted")
	}
	if _, err := Connect(ConnOptions{URL: "nats://127.0.0.1:1", CertFile: "x"}); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("half a client certificate: %v", err)
	}
	if got := RedactURL("nats://user:secret@host:4222"); strings.Contains(got, "secret") {
		t.Fatalf("redactURL kept the password: %q", got)
	}
}

func TestDecodeBatchKeepsOnlyTheSubjectsEvents(t *testing.T) {
	mk := func(host string, kind schema.Kind) schema.Event {
		return schema.Origin{Host: host, BootID: "0b6c2a58-4a4d-4f3b-9a55-2f3c5e0d9e11"}.NewEvent(kind, "", "", "", time.Unix(1_780_000_000, 0))
	}
	health := func(e schema.Event) schema.Event { e.Health = &schema.Health{Component: "daemon"}; return e }
	events := []schema.Event{
		health(mk("web-1.example.com", schema.KindHealth)),
		health(mk("web-2.example.com", schema.KindHealth)), // another host
		// Same token as web-1.example.com: no longer a valid host name
		// ('_' is refused), so the token names one host only.
		health(mk("web-1_example_com", schema.KindHealth)),
		health(mk("web-1.example.com.>", schema.KindHealth)),
	}
	finding := mk("web-1.example.com", schema.KindFinding) // another kind
	finding.Finding = &schema.Finding{Type: "ESCAPE", Severity: "high", EvidenceIDs: []string{schema.NewID()}}
	events = append(events, finding)
	body, err := schema.EncodeBatch(events)
	if err != nil {
		t.Fatal(err)
	}
	kept, dropped, err := DecodeBatch("mcpwarden.v1.web-1_example_com.health", body)
	if err != nil || dropped != 4 || len(kept) != 1 || kept[0].Host != "web-1.example.com" {
		t.Fatalf("kept %+v, dropped %d, %v", kept, dropped, err)
	}
}

// TestDeployStreamJSONInStep: deploy/nats/stream.json, which fleets that
// manage the stream centrally apply (`nats stream add --config`), is the
// stream `mcpwarden collect` creates, limits included.
func TestDeployStreamJSONInStep(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "nats", "stream.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got jetstream.StreamConfig
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if want := (Config{}).JetStream(); !reflect.DeepEqual(got, want) {
		t.Fatalf("deploy/nats/stream.json is\n%+v\nthe stream collect creates is\n%+v", got, want)
	}
}

// TestNotReady: a start-up waits out what a JetStream still
// electing, or a cluster a node short, answers, and gives up at once on
// what stays so (JetStream disabled, any other API error, anything else).
func TestNotReady(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"no meta leader yet", &jetstream.APIError{Code: 503, ErrorCode: 10008}, true},
		{"insufficient resources", &jetstream.APIError{Code: 503, ErrorCode: 10023}, true},
		{"jetstream disabled", &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled}, false},
		{"disabled for the account", &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabledForAccount}, false},
		{"stream not found", &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound}, false},
		{"deadline", fmt.Errorf("open: %w", context.DeadlineExceeded), true},
		{"nats timeout", nats.ErrTimeout, true},
		{"no responders", fmt.Errorf("open: %w", nats.ErrNoResponders), true},
		{"no stream response", jetstream.ErrNoStreamResponse, true},
		{"canceled", context.Canceled, false},
		{"other", errors.New("bad stream config"), false},
	}
	for _, c := range cases {
		if got := NotReady(c.err); got != c.want {
			t.Errorf("%s: NotReady(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
