package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/schema"
)

// procUpstream is a launcher.Upstream over a real process, without a fence
// (the fence is the launcher's, tested there). Restart records the paths it
// was asked to narrow to and starts the same command again.
type procUpstream struct {
	t    testing.TB
	argv []string
	env  []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	stdout   io.ReadCloser
	done     chan struct{}
	restarts [][]schema.CanonicalPath
}

func startUpstream(t testing.TB, env []string, argv ...string) *procUpstream {
	t.Helper()
	u := &procUpstream{t: t, argv: argv, env: env}
	if err := u.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.kill)
	return u
}

func (u *procUpstream) start() error {
	cmd := exec.Command(u.argv[0], u.argv[1:]...)
	cmd.Env = append(os.Environ(), u.env...)
	cmd.Stderr = io.Discard
	if testing.Verbose() {
		cmd.Stderr = os.Stderr
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", u.argv[0], err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	u.mu.Lock()
	u.cmd, u.stdin, u.stdout, u.done = cmd, in, out, done
	u.mu.Unlock()
	return nil
}

func (u *procUpstream) Stdin() io.Writer {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stdin
}

func (u *procUpstream) Stdout() io.Reader {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stdout
}

func (u *procUpstream) Done() <-chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.done
}

func (u *procUpstream) Restart(ctx context.Context, paths []schema.CanonicalPath) error {
	u.mu.Lock()
	u.restarts = append(u.restarts, paths)
	u.mu.Unlock()
	u.kill()
	return u.start()
}

// terminate sends SIGTERM to the current process.
func (u *procUpstream) terminate() {
	u.mu.Lock()
	cmd := u.cmd
	u.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
}

func (u *procUpstream) kill() {
	u.mu.Lock()
	cmd, in, done := u.cmd, u.stdin, u.done
	u.mu.Unlock()
	in.Close()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (u *procUpstream) restartCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.restarts)
}

// memSink keeps decision records.
type memSink struct {
	mu     sync.Mutex
	events []schema.Event
	fail   bool
}

func (m *memSink) Publish(_ context.Context, evs []schema.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return errors.New("sink is down")
	}
	m.events = append(m.events, evs...)
	return nil
}

func (m *memSink) decisions() []schema.Decision {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []schema.Decision
	for _, e := range m.events {
		if e.Decision != nil {
			out = append(out, *e.Decision)
		}
	}
	return out
}

func (m *memSink) raw() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, _ := json.Marshal(m.events)
	return string(b)
}

// waitDecision polls until a record matching f exists.
func (m *memSink) waitDecision(t testing.TB, f func(schema.Decision) bool) schema.Decision {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, d := range m.decisions() {
			if f(d) {
				return d
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no matching decision record; have %+v", m.decisions())
	return schema.Decision{}
}

// testClient speaks to the proxy like an MCP client.
type testClient struct {
	t   testing.TB
	enc *jsonrpc.Writer
	raw io.Writer // the proxy's stdin, for frames written in pieces

	mu       sync.Mutex
	nextID   int
	waiters  map[string]chan *jsonrpc.Message
	requests chan *jsonrpc.Message // requests from the proxy (roots/list, elicitation)
	notes    chan *jsonrpc.Message
	stray    chan *jsonrpc.Message // responses nobody waited for
}

// fixture is a running proxy with a client and an upstream.
type fixture struct {
	t      testing.TB
	base   string
	scope  *schema.CanonicalScope
	proxy  *Proxy
	up     *procUpstream
	client *testClient
	sink   *memSink
	errc   chan error
}

type fixtureOpts struct {
	keepClientOpen bool // do not close the proxy's output when Mediate returns
	scope          func(*schema.Scope)
	config         func(*Config)
	upstream       func(t testing.TB) *procUpstream
	base           func(base string)         // called with the base before the upstream starts
	clientReader   func(io.Reader) io.Reader // wraps what the test client reads from the proxy
}

// fsServer returns the path of the pinned filesystem server.
func fsServer(t testing.TB) string {
	t.Helper()
	node := testenv.RequireCommand(t, "node")
	_ = node
	root, err := filepath.Abs("../../deploy/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
	if err != nil {
		t.Fatal(err)
	}
	testenv.RequireFile(t, root, "run scripts/test-env.sh install-npm")
	return root
}

// makeBase creates base/{allowed,outside}/probe.txt with distinct markers.
func makeBase(t testing.TB) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for dir, marker := range map[string]string{"allowed": "MARKER-ALLOWED-7f3a", "outside": "MARKER-OUTSIDE-91c2"} {
		if err := os.MkdirAll(filepath.Join(base, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(base, dir, "probe.txt"), []byte(marker), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

func newFixture(t testing.TB, o fixtureOpts) *fixture {
	t.Helper()
	base := makeBase(t)
	if o.base != nil {
		o.base(base)
	}
	sc := &schema.Scope{
		ScopeID: "test-scope", AllowedPaths: []string{"."}, AccessMode: schema.AccessWrite,
		ToolAllowlist: []string{"read_text_file", "list_allowed_directories", "write_file", "list_directory", "directory_tree", "read_multiple_files", "search_files", "move_file"},
		Approval:      schema.ApprovalNone, ExpiresAfterMinutes: 60,
	}
	if o.scope != nil {
		o.scope(sc)
	}
	cs, err := schema.Canonicalize(sc, base, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, schema.PathKeySize)
	h, _ := schema.NewPathHasher(key)
	sink := &memSink{}
	cfg := Config{
		Scope: cs, RunID: "run-" + schema.NewID()[:8], Origin: schema.Origin{Host: "test", BootID: "b"},
		Hasher: h, Sink: sink, ServerOrigin: "test-server",
		RootsTimeout: 10 * time.Second, WarmupTimeout: 30 * time.Second,
	}
	if testing.Verbose() {
		cfg.Logger = testLogger(t)
	}
	if o.config != nil {
		o.config(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var up *procUpstream
	if o.upstream != nil {
		up = o.upstream(t)
	} else {
		up = startUpstream(t, nil, "node", fsServer(t))
	}
	cr, cw := io.Pipe() // client → proxy
	pr, pw := io.Pipe() // proxy → client
	f := &fixture{t: t, base: base, scope: cs, proxy: p, up: up, sink: sink, errc: make(chan error, 1)}
	go func() {
		err := p.Mediate(context.Background(), cr, pw, up)
		if !o.keepClientOpen {
			pw.Close()
		}
		f.errc <- err
	}()
	var fromProxy io.Reader = pr
	if o.clientReader != nil {
		fromProxy = o.clientReader(pr)
	}
	f.client = newTestClient(t, cw, fromProxy)
	t.Cleanup(func() {
		cw.Close()
		defer pw.Close()
		// As the launcher does after the client's EOF, a server that does not
		// exit by itself is stopped after a grace period (server-everything
		// asks roots/list 350 ms after initialized and lingers when the
		// answer cannot reach it any more).
		escalate := time.AfterFunc(2*time.Second, up.terminate)
		defer escalate.Stop()
		select {
		case <-f.errc:
		case <-time.After(10 * time.Second):
			t.Error("Mediate did not return after the client left")
		}
	})
	return f
}

func newTestClient(t testing.TB, w io.Writer, r io.Reader) *testClient {
	c := &testClient{t: t, enc: jsonrpc.NewWriter(w), raw: w, waiters: map[string]chan *jsonrpc.Message{},
		requests: make(chan *jsonrpc.Message, 64), notes: make(chan *jsonrpc.Message, 256), stray: make(chan *jsonrpc.Message, 64)}
	go func() {
		rd := jsonrpc.NewReader(r, 0)
		for {
			fr, err := rd.Next()
			if err != nil {
				return
			}
			m, err := jsonrpc.Parse(fr)
			if err != nil {
				t.Errorf("proxy sent an invalid frame %q: %v", fr, err)
				continue
			}
			switch m.Kind {
			case jsonrpc.KindResponse:
				c.mu.Lock()
				ch := c.waiters[string(m.ID)]
				delete(c.waiters, string(m.ID))
				c.mu.Unlock()
				if ch != nil {
					ch <- m
				} else {
					c.stray <- m
				}
			case jsonrpc.KindRequest:
				c.requests <- m
			default:
				select {
				case c.notes <- m:
				default:
				}
			}
		}
	}()
	return c
}

func (c *testClient) sendRaw(s string) {
	c.t.Helper()
	if err := c.enc.Write([]byte(s)); err != nil {
		c.t.Fatalf("write to proxy: %v", err)
	}
}

// expect registers a waiter for id (its JSON form) before the request is sent.
func (c *testClient) expect(id string) chan *jsonrpc.Message {
	ch := make(chan *jsonrpc.Message, 1)
	c.mu.Lock()
	c.waiters[id] = ch
	c.mu.Unlock()
	return ch
}

// start sends a request and returns the channel its answer arrives on.
func (c *testClient) start(method string, params any) chan *jsonrpc.Message {
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.mu.Unlock()
	ch := c.expect(fmt.Sprint(id))
	c.enc.Write(jsonrpc.Request(jsonrpc.IntID(int64(id)), method, params))
	return ch
}

func (c *testClient) wait(ch chan *jsonrpc.Message) *jsonrpc.Message {
	c.t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(2 * time.Minute):
		// Generous: a Node server's start at a load average near 30 took
		// longer than 30 s once (TestLateRootsAsker's initialize).
		c.t.Fatal("no answer from the proxy within 2 minutes")
		return nil
	}
}

func (c *testClient) call(method string, params any) *jsonrpc.Message {
	c.t.Helper()
	return c.wait(c.start(method, params))
}

func (c *testClient) notify(method string, params any) {
	c.enc.Write(jsonrpc.Request(nil, method, params))
}

// nextRequest waits for a request from the proxy with the given method.
func (c *testClient) nextRequest(method string) *jsonrpc.Message {
	c.t.Helper()
	for {
		select {
		case m := <-c.requests:
			if m.Method == method {
				return m
			}
			c.t.Fatalf("unexpected request %s from the proxy", m.Method)
		case <-time.After(30 * time.Second):
			c.t.Fatalf("the proxy sent no %s request", method)
		}
	}
}

func (c *testClient) reply(req *jsonrpc.Message, result any) {
	c.enc.Write(jsonrpc.Result(req.ID, mustJSON(result)))
}

func rootsAnswer(dirs ...string) map[string]any {
	list := []map[string]string{}
	for _, d := range dirs {
		list = append(list, map[string]string{"uri": "file://" + d, "name": filepath.Base(d)})
	}
	return map[string]any{"roots": list}
}

// initLegacy performs a legacy handshake. With roots, the client declares
// roots.listChanged and answers the first roots/list with them.
func (c *testClient) initLegacy(withRoots bool, rootsDirs ...string) *jsonrpc.Message {
	c.t.Helper()
	caps := map[string]any{}
	if withRoots {
		caps["roots"] = map[string]any{"listChanged": true}
	}
	res := c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": caps, "clientInfo": map[string]string{"name": "test", "version": "1"}})
	if res.Error != nil {
		c.t.Fatalf("initialize: %v", res.Error)
	}
	c.notify("notifications/initialized", nil)
	if withRoots {
		c.reply(c.nextRequest("roots/list"), rootsAnswer(rootsDirs...))
	}
	return res
}

// toolResult decodes a tools/call answer.
type toolResult struct {
	IsError bool `json:"isError"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Meta map[string]any `json:"_meta"`
}

func (r toolResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func decodeTool(t testing.TB, m *jsonrpc.Message) toolResult {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("tools/call answered with a JSON-RPC error: %d %s", m.Error.Code, m.Error.Message)
	}
	var r toolResult
	if err := json.Unmarshal(m.Result, &r); err != nil {
		t.Fatalf("tool result: %v", err)
	}
	return r
}

func (c *testClient) tool(name string, args map[string]any) toolResult {
	c.t.Helper()
	return decodeTool(c.t, c.call("tools/call", map[string]any{"name": name, "arguments": args}))
}

func (c *testClient) read(path string) toolResult {
	c.t.Helper()
	return c.tool("read_text_file", map[string]any{"path": path})
}

func denialCode(r toolResult) string {
	if !r.IsError || r.Meta == nil {
		return ""
	}
	s, _ := r.Meta["io.mcpwarden/error_code"].(string)
	return s
}

// rpcErrorCode is the mcpwarden error class of a JSON-RPC error answer
// (data.error_code), "" for anything else.
func rpcErrorCode(m *jsonrpc.Message) string {
	if m.Error == nil || m.Error.Data == nil {
		return ""
	}
	var d struct {
		Code string `json:"error_code"`
	}
	if json.Unmarshal(m.Error.Data, &d) != nil {
		return ""
	}
	return d.Code
}
