package proxy

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
)

// The out-of-process benchmarks measure what an MCP client waits for: this
// process is the client, and each configuration is a separate process tree
// started the way a client config would start it:
//
//	direct       mcpecho
//	c-relay      relay mcpecho              (testdata/relay.c: two threads, blocking read/write)
//	c-relay-setsid relay setsid mcpecho     (the same, its server in a session of its own, as
//	                                         the fence starts it: a scheduler autogroup of its own)
//	go-relay-setsid gorelay setsid mcpecho  (testdata/gorelay: the proxy's I/O structure in Go,
//	                                         none of its work: the floor of a Go process in the path)
//	fence-relay  mcpwarden run --proxy=false -- mcpecho
//	proxy        mcpwarden run -- mcpecho   (default flags: fence + proxy + audit log)
//
// mcpecho (internal/mcpecho) answers at once, so the differences are what
// sits in between. The configurations run side by side in one benchmark
// and are called in turn, call by call, so they see the same machine.
//
//	go test -run '^$' -bench 'BenchmarkProcess' -benchtime 3000x ./launcher/proxy/

// procConn is one configuration's process and a synchronous client on it.
type procConn struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	id   int
	buf  []byte
}

type benchBins struct {
	mcpwarden, echo, relay string
	goRelay                string // testdata/gorelay
	setsid                 string // setsid(1): the c-relay-setsid configuration's server in a session of its own
	baseline               string // MCPWARDEN_BASELINE_BIN: an older binary run side by side
	base, scope, stateDir  string
}

func buildBenchBins(b *testing.B) benchBins {
	b.Helper()
	fencetest.RequireFence(b)
	gcc := testenv.RequireCommand(b, "gcc")
	bins := fencetest.Build(b)
	dir := b.TempDir()
	bb := benchBins{mcpwarden: bins.Mcpwarden, echo: filepath.Join(dir, "mcpecho"), relay: filepath.Join(dir, "relay"),
		goRelay: filepath.Join(dir, "gorelay"), setsid: testenv.RequireCommand(b, "setsid")}
	if old := os.Getenv("MCPWARDEN_BASELINE_BIN"); old != "" {
		if !filepath.IsAbs(old) {
			b.Fatalf("MCPWARDEN_BASELINE_BIN=%q: give an absolute path", old)
		}
		bb.baseline = old
	}
	if err := testenv.GoBuild(bb.echo, "./internal/mcpecho", "CGO_ENABLED=0"); err != nil {
		b.Fatal(err)
	}
	if err := testenv.GoBuild(bb.goRelay, "./launcher/proxy/testdata/gorelay", "CGO_ENABLED=0"); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-o", bb.relay, "testdata/relay.c").CombinedOutput(); err != nil {
		b.Fatalf("gcc relay.c: %v\n%s", err, out)
	}
	base, err := filepath.EvalSymlinks(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	testenv.WriteFiles(b, map[string]string{filepath.Join(base, "allowed", "probe.txt"): "probe"})
	bb.base = base
	bb.scope = fencetest.WriteScope(b, b.TempDir(), map[string]any{
		"allowed_paths": []string{"allowed"}, "tool_allowlist": []string{"echo"},
		"tool_classes": map[string]string{"echo": "read"}, "tool_path_args": map[string][]string{"echo": {"path"}},
		"expires_after_minutes": 600,
	})
	bb.stateDir = b.TempDir()
	return bb
}

// configs returns the argv of each configuration. With
// MCPWARDEN_BASELINE_BIN set, that binary's proxy and --proxy=false run
// too ("baseline-proxy", "baseline-fence-relay"), called in the same turns,
// so that an old and a new binary are compared on the same machine state.
func (bb benchBins) configs() [][2]any {
	args := []string{"run", "--scope", bb.scope, "--base", bb.base, "--state-dir", bb.stateDir}
	run := append([]string{bb.mcpwarden}, args...)
	cfgs := [][2]any{
		{"direct", []string{bb.echo}},
		{"c-relay", []string{bb.relay, bb.echo}},
		// The fence starts the server in a session of its own (setsid), so
		// where the kernel groups sessions for scheduling (autogroup) the
		// wrapped server competes as a group apart from the client's: this
		// is the relay floor with that cost.
		{"c-relay-setsid", []string{bb.relay, bb.setsid, bb.echo}},
		// The same two blocking readers in Go, with the proxy's runtime
		// settings and none of its work: what Go's runtime costs in the
		// path, apart from what the proxy does there.
		{"go-relay-setsid", []string{bb.goRelay, bb.setsid, bb.echo}},
		{"fence-relay", append(append(slices.Clone(run), "--proxy=false", "--"), bb.echo)},
		{"proxy", append(append(slices.Clone(run), "--"), bb.echo)},
	}
	if bb.baseline != "" {
		old := append([]string{bb.baseline}, args...)
		cfgs = append(cfgs,
			[2]any{"baseline-fence-relay", append(append(slices.Clone(old), "--proxy=false", "--"), bb.echo)},
			[2]any{"baseline-proxy", append(append(slices.Clone(old), "--"), bb.echo)})
	}
	return cfgs
}

func startProc(b *testing.B, name string, argv []string) *procConn {
	b.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start %s: %v", name, err)
	}
	c := &procConn{name: name, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	b.Cleanup(func() {
		c.in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			b.Logf("%s: killed at cleanup; stderr: %s", name, stderr.String())
		}
	})
	return c
}

// send writes one request and returns its id.
func (c *procConn) send(b *testing.B, method string, params any) int {
	c.id++
	c.write(b, jsonrpc.Request(jsonrpc.IntID(int64(c.id)), method, params))
	return c.id
}

func (c *procConn) notify(b *testing.B, method string) {
	c.write(b, jsonrpc.Request(nil, method, nil))
}

func (c *procConn) write(b *testing.B, frame []byte) {
	c.buf = append(append(c.buf[:0], frame...), '\n')
	if _, err := c.in.Write(c.buf); err != nil {
		b.Fatalf("%s: write: %v", c.name, err)
	}
}

// await reads until the answer to id arrives; it returns that line.
func (c *procConn) await(b *testing.B, id int) []byte {
	want := []byte(`"id":` + strconv.Itoa(id) + `,`)
	for {
		line, err := c.out.ReadSlice('\n')
		if err != nil {
			b.Fatalf("%s: read: %v", c.name, err)
		}
		if bytes.Contains(line, want) && !bytes.Contains(line, []byte(`"method":`)) {
			return line
		}
	}
}

func (c *procConn) roundTrip(b *testing.B, method string, params any) []byte {
	return c.await(b, c.send(b, method, params))
}

func (c *procConn) handshake(b *testing.B) {
	line := c.roundTrip(b, "initialize", initParams)
	if !bytes.Contains(line, []byte(`"result"`)) {
		b.Fatalf("%s: initialize: %s", c.name, line)
	}
	c.notify(b, "notifications/initialized")
}

// BenchmarkProcessRoundTrip: one tools/call round trip per configuration,
// in turn, at least 2000 times each, with and without a path argument.
// It reports p50 and p99 of each, what each adds to direct, and what the
// proxy adds to the C relay.
func BenchmarkProcessRoundTrip(b *testing.B) {
	bb := buildBenchBins(b)
	for _, v := range []struct {
		name string
		args map[string]any
	}{
		{"no-path", map[string]any{"text": "hello"}},
		{"path", map[string]any{"path": filepath.Join(bb.base, "allowed", "probe.txt")}},
	} {
		b.Run(v.name, func(b *testing.B) {
			var conns []*procConn
			for _, cfg := range bb.configs() {
				c := startProc(b, cfg[0].(string), cfg[1].([]string))
				c.handshake(b)
				conns = append(conns, c)
			}
			call := map[string]any{"name": "echo", "arguments": v.args}
			for _, c := range conns {
				if line := c.roundTrip(b, "tools/call", call); !bytes.Contains(line, []byte(`"text":"ok"`)) {
					b.Fatalf("%s: tools/call: %s", c.name, line)
				}
			}
			n := max(b.N, 2000)
			for i := 0; i < 200; i++ { // warm every path
				for _, c := range conns {
					c.roundTrip(b, "tools/call", call)
				}
			}
			lat := make([][]time.Duration, len(conns))
			cpu0 := make([]time.Duration, len(conns))
			for k, c := range conns {
				cpu0[k] = cpuTime(b, c.cmd.Process.Pid)
			}
			b.ResetTimer()
			for i := 0; i < n; i++ {
				for k := range conns {
					c := conns[(i+k)%len(conns)] // rotate who goes first
					t0 := time.Now()
					c.roundTrip(b, "tools/call", call)
					lat[(i+k)%len(conns)] = append(lat[(i+k)%len(conns)], time.Since(t0))
				}
			}
			b.StopTimer()
			reportLatencies(b, conns, lat)
			reportCPU(b, conns, cpu0, n)
		})
	}
}

func reportLatencies(b *testing.B, conns []*procConn, lat [][]time.Duration) {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	p := map[string][2]time.Duration{}
	for i, c := range conns {
		p[c.name] = [2]time.Duration{percentile(lat[i], 0.50), percentile(lat[i], 0.99)}
	}
	for _, c := range conns {
		b.ReportMetric(us(p[c.name][0]), c.name+"-p50-µs")
		b.ReportMetric(us(p[c.name][1]), c.name+"-p99-µs")
		if c.name != "direct" {
			b.ReportMetric(us(p[c.name][0]-p["direct"][0]), c.name+"-added-p50-µs")
			b.ReportMetric(us(p[c.name][1]-p["direct"][1]), c.name+"-added-p99-µs")
		}
	}
	b.ReportMetric(us(p["proxy"][0]-p["c-relay"][0]), "proxy-over-relay-p50-µs")
	b.ReportMetric(us(p["proxy"][1]-p["c-relay"][1]), "proxy-over-relay-p99-µs")
	b.ReportMetric(us(p["proxy"][0]-p["c-relay-setsid"][0]), "proxy-over-setsid-relay-p50-µs")
	b.ReportMetric(us(p["go-relay-setsid"][0]-p["c-relay-setsid"][0]), "go-relay-over-setsid-relay-p50-µs")
	b.ReportMetric(us(p["proxy"][0]-p["go-relay-setsid"][0]), "proxy-over-go-relay-p50-µs")
	if _, ok := p["baseline-proxy"]; ok {
		b.ReportMetric(us(p["baseline-proxy"][0]-p["c-relay"][0]), "baseline-proxy-over-relay-p50-µs")
		b.ReportMetric(us(p["baseline-proxy"][1]-p["c-relay"][1]), "baseline-proxy-over-relay-p99-µs")
	}
	b.ReportMetric(float64(len(lat[0])), "calls-each")
}

// BenchmarkProcessSpacedCalls: the same configurations, called the way a
// model drives a client, one call at a time with idle time between them:
// every call comes after the whole machine (as far as these process trees
// go) idled for spacedIdle, so each configuration's calls are about
// len(configurations) × spacedIdle apart. Back-to-back calls
// (BenchmarkProcessRoundTrip) keep every thread warm and the Go runtime's
// monitor busy anyway; spaced calls also pay what a process does to wake
// up from idle and to go idle again (for a Go program: the monitor's
// 20 µs polls after a wake, the processors it takes back from threads
// blocked in read(2) after 10 ms, the record writer's batch per call).
// Reports p50 and p99 of each, the proxy's over the C relay, and the
// processor time per call of each configuration's own process.
func BenchmarkProcessSpacedCalls(b *testing.B) {
	bb := buildBenchBins(b)
	var conns []*procConn
	for _, cfg := range bb.configs() {
		c := startProc(b, cfg[0].(string), cfg[1].([]string))
		c.handshake(b)
		conns = append(conns, c)
	}
	call := map[string]any{"name": "echo", "arguments": map[string]any{"text": "hello"}}
	for i := 0; i < 50; i++ { // warm every path
		for _, c := range conns {
			c.roundTrip(b, "tools/call", call)
		}
	}
	// -benchtime 3000x (the documented command) gives 200 calls each:
	// about 4 s per configuration at 3 ms of idle before each call.
	n := max(b.N/15, 100)
	lat := make([][]time.Duration, len(conns))
	cpu0 := make([]time.Duration, len(conns))
	for k, c := range conns {
		cpu0[k] = cpuTime(b, c.cmd.Process.Pid)
	}
	b.ResetTimer()
	for i := 0; i < n; i++ {
		for k := range conns {
			c := conns[(i+k)%len(conns)]
			time.Sleep(spacedIdle)
			t0 := time.Now()
			c.roundTrip(b, "tools/call", call)
			lat[(i+k)%len(conns)] = append(lat[(i+k)%len(conns)], time.Since(t0))
		}
	}
	b.StopTimer()
	reportLatencies(b, conns, lat)
	reportCPU(b, conns, cpu0, n)
}

// spacedIdle is the idle time before each call of BenchmarkProcessSpacedCalls.
const spacedIdle = 3 * time.Millisecond

// cpuTime is the processor time pid's threads have used (the sum of their
// /proc/PID/task/TID/schedstat run times: nanoseconds, where /proc/PID/stat
// counts clock ticks). Wall time swings with the machine's load by tens of
// µs per call; processor time per call much less, so the two together
// tell work from waiting.
func cpuTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // the thread ended meanwhile
		}
		f := bytes.Fields(raw)
		if len(f) == 0 {
			b.Fatalf("%s/%s/schedstat: %q", dir, t.Name(), raw)
		}
		ns, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			b.Fatalf("%s/%s/schedstat: %v", dir, t.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum
}

// reportCPU reports the processor time per call of each configuration's
// own process (the relay, or mcpwarden with all its threads: readers,
// record writer, runtime; not the server it starts, except for direct,
// where the process is the server), and the proxy's over the C relay's.
func reportCPU(b *testing.B, conns []*procConn, cpu0 []time.Duration, n int) {
	per := map[string]float64{}
	for k, c := range conns {
		per[c.name] = float64((cpuTime(b, c.cmd.Process.Pid) - cpu0[k]).Nanoseconds()) / 1000 / float64(n)
		b.ReportMetric(per[c.name], c.name+"-cpu-µs/call")
	}
	b.ReportMetric(per["proxy"]-per["c-relay"], "proxy-cpu-over-relay-µs/call")
	if _, ok := per["baseline-proxy"]; ok {
		b.ReportMetric(per["baseline-proxy"]-per["c-relay"], "baseline-proxy-cpu-over-relay-µs/call")
	}
}

// BenchmarkProcessFirstListAndShutdown starts each configuration afresh per
// iteration and times (a) the first tools/list after initialize and
// notifications/initialized (the proxy must not hold it for servers that
// never ask for roots), and (b) the time from closing the client's stdin
// to the process's exit. It reports medians and what each adds to direct.
func BenchmarkProcessFirstListAndShutdown(b *testing.B) {
	bb := buildBenchBins(b)
	cfgs := bb.configs()
	first := make([][]time.Duration, len(cfgs))
	shut := make([][]time.Duration, len(cfgs))
	// Each start costs tens of milliseconds per configuration: the count is
	// b.N held between 20 and 100, so that the documented command
	// (-benchtime 3000x, meant for the round trips) does not start 12000
	// process trees.
	n := min(max(b.N, 20), 100)
	for i := 0; i < n; i++ {
		for k, cfg := range cfgs {
			argv := cfg[1].([]string)
			cmd := exec.Command(argv[0], argv[1:]...)
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			c := &procConn{name: cfg[0].(string), cmd: cmd, in: in, out: bufio.NewReader(out)}
			c.handshake(b)
			t0 := time.Now()
			if line := c.roundTrip(b, "tools/list", map[string]any{}); !bytes.Contains(line, []byte(`"echo"`)) {
				b.Fatalf("%s: tools/list: %s", c.name, line)
			}
			first[k] = append(first[k], time.Since(t0))
			t1 := time.Now()
			in.Close()
			if err := cmd.Wait(); err != nil {
				b.Fatalf("%s: exit: %v", c.name, err)
			}
			shut[k] = append(shut[k], time.Since(t1))
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for k, cfg := range cfgs {
		name := cfg[0].(string)
		b.ReportMetric(ms(percentile(first[k], 0.5)), name+"-first-list-ms")
		b.ReportMetric(ms(percentile(shut[k], 0.5)), name+"-shutdown-ms")
		if k > 0 {
			b.ReportMetric(ms(percentile(first[k], 0.5)-percentile(first[0], 0.5)), name+"-first-list-added-ms")
			b.ReportMetric(ms(percentile(shut[k], 0.5)-percentile(shut[0], 0.5)), name+"-shutdown-added-ms")
		}
	}
	b.ReportMetric(float64(n), "starts-each")
}
