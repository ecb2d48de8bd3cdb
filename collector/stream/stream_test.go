package stream

import (
	"strings"
	"testing"
	"time"

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
	if got := redactURL("nats://user:secret@host:4222"); strings.Contains(got, "secret") {
		t.Fatalf("redactURL kept the password: %q", got)
	}
}

func TestKeepOnSubject(t *testing.T) {
	mk := func(host string, kind schema.Kind) schema.Event { return schema.Event{Host: host, Kind: kind} }
	events := []schema.Event{
		mk("web-1.example.com", schema.KindFileOp),
		mk("web-2.example.com", schema.KindFileOp),  // another host
		mk("web-1.example.com", schema.KindFinding), // another kind
		mk("web-1_example_com", schema.KindFileOp),  // same token: the subject cannot tell them apart
		mk("web-1.example.com.>", schema.KindFileOp),
	}
	kept, dropped := KeepOnSubject("mcpwarden.v1.web-1_example_com.file_op", events)
	if dropped != 3 || len(kept) != 2 || kept[0].Host != "web-1.example.com" || kept[1].Host != "web-1_example_com" {
		t.Fatalf("kept %+v, dropped %d", kept, dropped)
	}
}
