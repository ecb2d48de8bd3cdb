package proxy

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/schema"
)

// FuzzMediateFrames feeds arbitrary client bytes to a live proxy (in front
// of the in-process echo server) and checks that it keeps running: a ping
// sent afterwards is answered, and everything it wrote is valid JSON-RPC.
func FuzzMediateFrames(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"path":"/etc/passwd"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{}}}}` + "\n" + `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":7,"result":{"roots":[{"uri":"file:///"}]}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"path":"a","path":"b"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///%2e%2e/etc"}}`,
		"\x00\xff{", `{"jsonrpc":"2.0","id":1e400,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"x"}}}`,
	} {
		f.Add([]byte(s))
	}
	base := makeBase(f)
	cs, err := schema.Canonicalize(&schema.Scope{
		ScopeID: "fuzz", AllowedPaths: []string{"allowed"}, AccessMode: schema.AccessRead,
		ToolAllowlist: []string{"echo"}, ToolClasses: map[string]string{"echo": "read"},
		Approval: schema.ApprovalNone, ExpiresAfterMinutes: 600,
	}, base, time.Now())
	if err != nil {
		f.Fatal(err)
	}
	h, _ := schema.NewPathHasher(make([]byte, schema.PathKeySize))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := New(Config{Scope: cs, RunID: "fuzz", Hasher: h, Sink: &memSink{}, ServerOrigin: "echo",
			RootsTimeout: 200 * time.Millisecond, WarmupTimeout: 50 * time.Millisecond, ProbeTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		up := newEchoUpstream()
		defer up.close()
		cr, cw := io.Pipe()
		pr, pw := io.Pipe()
		done := make(chan struct{})
		go func() { _ = p.Mediate(context.Background(), cr, pw, up); pw.Close(); close(done) }()
		answered := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(pr)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				m, err := jsonrpc.Parse(sc.Bytes())
				if err != nil {
					t.Errorf("proxy wrote an invalid frame %q: %v", sc.Bytes(), err)
					continue
				}
				if m.Kind == jsonrpc.KindResponse && string(m.ID) == `"fuzz-ping"` {
					close(answered)
				}
			}
			io.Copy(io.Discard, pr)
		}()
		go func() {
			cw.Write(data)
			cw.Write([]byte("\n" + `{"jsonrpc":"2.0","id":"fuzz-ping","method":"ping"}` + "\n"))
		}()
		select {
		case <-answered:
		case <-time.After(5 * time.Second):
			t.Fatalf("the proxy stopped answering after %q", truncate(strings.ToValidUTF8(string(data), "?"), 200))
		}
		cw.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Mediate did not return after the client left")
		}
	})
}
