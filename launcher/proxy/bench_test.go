package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/auditlog"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/schema"
)

// rawConn is a synchronous JSON-RPC client on a pair of pipes.
type rawConn struct {
	name string
	w    io.Writer
	r    *bufio.Reader
	id   int
}

func (c *rawConn) roundTrip(tb testing.TB, method string, params any) []byte {
	c.id++
	if _, err := c.w.Write(append(jsonrpc.Request(jsonrpc.IntID(int64(c.id)), method, params), '\n')); err != nil {
		tb.Fatal(err)
	}
	want := strconv.Itoa(c.id)
	for {
		line, err := c.r.ReadBytes('\n')
		if err != nil {
			tb.Fatalf("%s: read: %v", c.name, err)
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(line, &m) == nil && m.Method == "" && string(m.ID) == want {
			return line
		}
	}
}

func (c *rawConn) notify(tb testing.TB, method string) {
	if _, err := c.w.Write(append(jsonrpc.Request(nil, method, nil), '\n')); err != nil {
		tb.Fatal(err)
	}
}

var initParams = map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]string{"name": "bench", "version": "1"}}

// benchScope allows base for the filesystem tools.
func benchScope(tb testing.TB, base string) *schema.CanonicalScope {
	cs, err := schema.Canonicalize(&schema.Scope{
		ScopeID: "bench", AllowedPaths: []string{"."}, AccessMode: schema.AccessRead,
		ToolAllowlist: []string{"read_text_file", "echo"}, ToolClasses: map[string]string{"echo": "read"},
		Approval: schema.ApprovalNone, ExpiresAfterMinutes: 600,
	}, base, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return cs
}

// benchProxy starts a proxy in front of up, writing records to a real
// audit log, and returns a synchronous client on it.
func benchProxy(tb testing.TB, cs *schema.CanonicalScope, up upstreamForBench) *rawConn {
	log, err := auditlog.Open(filepath.Join(tb.TempDir(), "audit.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	h, _ := schema.NewPathHasher(make([]byte, schema.PathKeySize))
	p, err := New(Config{Scope: cs, RunID: "bench", Hasher: h, Sink: log, ServerOrigin: "bench", WarmupTimeout: 3 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	cr, cw := io.Pipe()
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() { _ = p.Mediate(context.Background(), cr, pw, up); pw.Close(); close(done) }()
	tb.Cleanup(func() {
		cw.Close()
		<-done
		log.Close()
	})
	return &rawConn{name: "proxy", w: cw, r: bufio.NewReaderSize(pr, 1<<20)}
}

type upstreamForBench interface {
	Stdin() io.Writer
	Stdout() io.Reader
	Restart(context.Context, []schema.CanonicalPath) error
	Done() <-chan struct{}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkToolCallLatency measures one tools/call round trip through the
// proxy and over a direct pipe to a second process of the same server,
// alternating, and reports p50/p99 of both and of the difference.
func BenchmarkToolCallLatency(b *testing.B) {
	b.Run("filesystem-server", func(b *testing.B) {
		base := makeBase(b)
		cs := benchScope(b, base)
		fs := fsServer(b)
		direct := startUpstream(b, nil, "node", fs, base)
		dc := &rawConn{name: "direct", w: direct.Stdin(), r: bufio.NewReaderSize(direct.Stdout(), 1<<20)}
		dc.roundTrip(b, "initialize", initParams)
		dc.notify(b, "notifications/initialized")
		pc := benchProxy(b, cs, startUpstream(b, nil, "node", fs))
		pc.roundTrip(b, "initialize", initParams)
		pc.notify(b, "notifications/initialized")
		args := map[string]any{"name": "read_text_file", "arguments": map[string]any{"path": filepath.Join(base, "allowed", "probe.txt")}}
		latencyLoop(b, dc, pc, args)
	})
	b.Run("go-echo-server", func(b *testing.B) {
		base := makeBase(b)
		cs := benchScope(b, base)
		direct := newEchoUpstream()
		b.Cleanup(direct.close)
		dc := &rawConn{name: "direct", w: direct.Stdin(), r: bufio.NewReaderSize(direct.Stdout(), 1<<20)}
		up := newEchoUpstream()
		b.Cleanup(up.close)
		pc := benchProxy(b, cs, up)
		pc.roundTrip(b, "initialize", initParams)
		pc.notify(b, "notifications/initialized")
		args := map[string]any{"name": "echo", "arguments": map[string]any{"path": filepath.Join(base, "allowed", "probe.txt")}}
		latencyLoop(b, dc, pc, args)
	})
}

func latencyLoop(b *testing.B, dc, pc *rawConn, args map[string]any) {
	for i := 0; i < 50; i++ { // warm both paths
		dc.roundTrip(b, "tools/call", args)
		pc.roundTrip(b, "tools/call", args)
	}
	directLat := make([]time.Duration, 0, b.N)
	proxyLat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		dc.roundTrip(b, "tools/call", args)
		t1 := time.Now()
		pc.roundTrip(b, "tools/call", args)
		t2 := time.Now()
		directLat = append(directLat, t1.Sub(t0))
		proxyLat = append(proxyLat, t2.Sub(t1))
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	d50, d99 := percentile(directLat, 0.50), percentile(directLat, 0.99)
	p50, p99 := percentile(proxyLat, 0.50), percentile(proxyLat, 0.99)
	b.ReportMetric(us(d50), "direct-p50-µs")
	b.ReportMetric(us(d99), "direct-p99-µs")
	b.ReportMetric(us(p50), "proxy-p50-µs")
	b.ReportMetric(us(p99), "proxy-p99-µs")
	b.ReportMetric(us(p50-d50), "added-p50-µs")
	b.ReportMetric(us(p99-d99), "added-p99-µs")
}

// BenchmarkThroughput measures tools/call messages per second through the
// proxy with 64 calls in flight, against the Go echo server (the proxy's
// own ceiling) and the real filesystem server.
func BenchmarkThroughput(b *testing.B) {
	run := func(b *testing.B, up upstreamForBench, tool string, path string) {
		cs := benchScope(b, filepath.Dir(filepath.Dir(path)))
		pc := benchProxy(b, cs, up)
		pc.roundTrip(b, "initialize", initParams)
		pc.notify(b, "notifications/initialized")
		args := map[string]any{"name": tool, "arguments": map[string]any{"path": path}}
		pc.roundTrip(b, "tools/call", args) // waits out the start-up (roots warm-up)
		const window = 64
		sem := make(chan struct{}, window)
		b.ResetTimer()
		start := time.Now()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // reader: each answer frees a slot
			defer wg.Done()
			for got := 0; got < b.N; {
				line, err := pc.r.ReadBytes('\n')
				if err != nil {
					b.Error(err)
					return
				}
				if len(line) > 0 && !jsonHasMethod(line) {
					got++
					<-sem
				}
			}
		}()
		for i := 0; i < b.N; i++ {
			sem <- struct{}{}
			pc.id++
			if _, err := pc.w.Write(append(jsonrpc.Request(jsonrpc.IntID(int64(pc.id)), "tools/call", args), '\n')); err != nil {
				b.Fatal(err)
			}
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	}
	b.Run("go-echo-server", func(b *testing.B) {
		base := makeBase(b)
		up := newEchoUpstream()
		b.Cleanup(up.close)
		run(b, up, "echo", filepath.Join(base, "allowed", "probe.txt"))
	})
	b.Run("filesystem-server", func(b *testing.B) {
		base := makeBase(b)
		run(b, startUpstream(b, nil, "node", fsServer(b)), "read_text_file", filepath.Join(base, "allowed", "probe.txt"))
	})
}

func jsonHasMethod(line []byte) bool {
	var m struct {
		Method string `json:"method"`
	}
	return json.Unmarshal(line, &m) == nil && m.Method != ""
}

// echoUpstream is an in-process legacy MCP server that answers every
// tools/call at once, to measure the proxy without a server's own cost.
type echoUpstream struct {
	inR, outR *io.PipeReader
	inW, outW *io.PipeWriter
	done      chan struct{}
}

func newEchoUpstream() *echoUpstream {
	e := &echoUpstream{done: make(chan struct{})}
	e.inR, e.inW = io.Pipe()
	e.outR, e.outW = io.Pipe()
	go func() {
		defer close(e.done)
		r := jsonrpc.NewReader(e.inR, 0)
		w := bufio.NewWriter(e.outW)
		for {
			fr, err := r.Next()
			if err != nil {
				e.outW.Close()
				return
			}
			m, err := jsonrpc.Parse(fr)
			if err != nil || m.Kind != jsonrpc.KindRequest {
				continue
			}
			var out []byte
			switch m.Method {
			case "initialize":
				out = jsonrpc.Result(m.ID, json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"echo","version":"1"}}`))
			case "tools/call":
				out = jsonrpc.Result(m.ID, json.RawMessage(`{"content":[{"type":"text","text":"ok"}]}`))
			default:
				out = jsonrpc.ErrorResponse(m.ID, -32601, "Method not found", nil)
			}
			w.Write(out)
			w.WriteByte('\n')
			w.Flush()
		}
	}()
	return e
}

func (e *echoUpstream) Stdin() io.Writer      { return e.inW }
func (e *echoUpstream) Stdout() io.Reader     { return e.outR }
func (e *echoUpstream) Done() <-chan struct{} { return e.done }
func (e *echoUpstream) Restart(context.Context, []schema.CanonicalPath) error {
	return fmt.Errorf("echo upstream cannot restart")
}
func (e *echoUpstream) close() { e.inW.Close() }
