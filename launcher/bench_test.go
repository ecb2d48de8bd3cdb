package launcher_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/schema"
)

// pingOnce starts cmd, sends one request, waits for the first response line
// and then for the process to exit. It returns the time to the first response.
func pingOnce(b *testing.B, cmd *exec.Cmd) time.Duration {
	start := time.Now()
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	if _, err := in.Write([]byte(`{"op":"ping"}` + "\n")); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, "pong") {
		b.Fatalf("first response %q: %v", line, err)
	}
	first := time.Since(start)
	in.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
	// The CPU the process and everything it waited for (helper, server) used.
	cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return first
}

// cpu accumulates pingOnce's CPU time; BenchmarkLaunchFirstResponse reports
// it because wall-clock time is inflated by anything else on the machine.
var cpu time.Duration

// BenchmarkLaunchFirstResponse: time from start to the first response of a
// trivial server (and its exit), direct vs under `mcpwarden run`.
func BenchmarkLaunchFirstResponse(b *testing.B) {
	fencetest.RequireFence(b)
	bins := fencetest.Build(b)
	base := b.TempDir()
	os.Mkdir(filepath.Join(base, "allowed"), 0o755)
	scope := fencetest.WriteScope(b, b.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	log := filepath.Join(b.TempDir(), "audit.jsonl")
	b.Run("direct", func(b *testing.B) {
		var first time.Duration
		cpu = 0
		for b.Loop() {
			first += pingOnce(b, exec.Command(bins.Naive))
		}
		b.ReportMetric(float64(first.Microseconds())/1000/float64(b.N), "ms-to-first-response")
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms")
	})
	b.Run("wrapped", func(b *testing.B) {
		var first time.Duration
		cpu = 0
		for b.Loop() {
			cmd := exec.Command(bins.Mcpwarden, "run", fencetest.RelayFlag, "--scope", scope, "--base", base, "--audit-log", log, "--", bins.Naive)
			cmd.Dir = base
			first += pingOnce(b, cmd)
		}
		b.ReportMetric(float64(first.Microseconds())/1000/float64(b.N), "ms-to-first-response")
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms")
	})
}

// openServer is a naive server answering openloop requests.
type openServer struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startOpenServer(b *testing.B, cmd *exec.Cmd) *openServer {
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	s := &openServer{cmd: cmd, in: in, out: bufio.NewReader(out)}
	b.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	return s
}

// openClose asks for n open+close of path and returns the server-side time.
func (s *openServer) openClose(b *testing.B, path string, n int) time.Duration {
	req, _ := json.Marshal(map[string]any{"op": "openloop", "path": path, "fd": n})
	if _, err := s.in.Write(append(req, '\n')); err != nil {
		b.Fatal(err)
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	var r fencetest.Response
	if err := json.Unmarshal([]byte(line), &r); err != nil || !r.OK {
		b.Fatalf("openloop: %q %v", line, err)
	}
	ns, _ := strconv.ParseInt(r.Data, 10, 64)
	return time.Duration(ns)
}

// BenchmarkOpenClose: open()+close() of a file 1 and 10 levels below the
// scope root: outside any fence, under the launcher's fence, and under the
// same Landlock ruleset applied by a minimal program (the kernel's floor),
// and by that program with the launcher's seccomp filter added (the filter
// puts every syscall on the kernel's slower entry path).
// The figure that matters is ns/open reported by the server itself.
func BenchmarkOpenClose(b *testing.B) {
	fencetest.RequireFence(b)
	bins := fencetest.Build(b)
	base := b.TempDir()
	root := filepath.Join(base, "allowed")
	deep := root
	for i := 1; i <= 9; i++ {
		deep = filepath.Join(deep, fmt.Sprintf("d%d", i))
	}
	os.MkdirAll(deep, 0o755)
	files := map[string]string{"depth1": filepath.Join(root, "f.txt"), "depth10": filepath.Join(deep, "f.txt")}
	for _, f := range files {
		os.WriteFile(f, []byte("x"), 0o644)
	}
	scopeFile := fencetest.WriteScope(b, b.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})

	// The same ruleset the launcher derives, for the floor program.
	s, err := schema.ReadScopeFile(scopeFile)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := schema.Canonicalize(s, base, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	prof, err := runtimeprofile.Resolve([]string{bins.Naive}, runtimeprofile.Options{PATH: "/usr/bin:/bin"})
	if err != nil {
		b.Fatal(err)
	}
	rs, err := ruleset.Derive(cs, ruleset.Input{Profile: prof, TmpDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	handled, _, _ := ruleset.Handled(ruleset.MaxABI)
	floorArgs := []string{"-fs", strconv.FormatUint(uint64(handled), 16)}
	for _, r := range rs.Rules {
		floorArgs = append(floorArgs, "-rule", strconv.FormatUint(uint64(r.Access&handled), 16)+":"+r.Path)
	}
	floorSeccompArgs := append(append([]string{"-seccomp"}, floorArgs...), "--", bins.Naive)
	floorArgs = append(append(floorArgs, "--"), bins.Naive)

	servers := map[string]*exec.Cmd{
		"unfenced":      exec.Command(bins.Naive),
		"floor+seccomp": exec.Command(bins.Floor, floorSeccompArgs...),
		"fence":         exec.Command(bins.Mcpwarden, "run", fencetest.RelayFlag, "--scope", scopeFile, "--base", base, "--audit-log", filepath.Join(b.TempDir(), "a.jsonl"), "--", bins.Naive),
		"floor":         exec.Command(bins.Floor, floorArgs...),
	}
	names := []string{"unfenced", "floor", "floor+seccomp", "fence"}
	srvs := map[string]*openServer{}
	for _, name := range names {
		srvs[name] = startOpenServer(b, servers[name])
	}
	// The three run interleaved in chunks, so that load from elsewhere on the
	// machine hits them alike; each reports the time its server measured.
	const chunk = 5000
	for _, depth := range []string{"depth1", "depth10"} {
		b.Run(depth, func(b *testing.B) {
			for _, name := range names {
				srvs[name].openClose(b, files[depth], chunk) // warm the dentry cache
			}
			total := map[string]time.Duration{}
			best := map[string]time.Duration{}
			n, round := 0, 0
			for b.Loop() {
				// Rotate the order so that none always runs right after another.
				for i := range names {
					name := names[(i+round)%len(names)]
					d := srvs[name].openClose(b, files[depth], chunk)
					total[name] += d
					if best[name] == 0 || d < best[name] {
						best[name] = d
					}
				}
				n += chunk
				round++
			}
			// The mean suffers from whatever else runs on the machine; the
			// best chunk is each server's cost when it had a core to itself.
			for _, name := range names {
				b.ReportMetric(float64(total[name].Nanoseconds())/float64(n), name+"-ns/open")
				b.ReportMetric(float64(best[name].Nanoseconds())/chunk, name+"-best-ns/open")
			}
			b.ReportMetric(100*(float64(best["fence"])/float64(best["floor"])-1), "fence-vs-floor-best-%")
			b.ReportMetric(100*(float64(best["fence"])/float64(best["floor+seccomp"])-1), "fence-vs-floor+seccomp-best-%")
		})
	}
}

// pipeServer is an in-process Upstream whose "server" echoes lines, so the
// relay can be measured without a process or a fence in the way.
type pipeServer struct {
	stdinW, stdoutR *os.File
	done            chan struct{}
}

func newPipeServer(b *testing.B) *pipeServer {
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	p := &pipeServer{stdinW: inW, stdoutR: outR, done: make(chan struct{})}
	go func() {
		_, _ = io.Copy(outW, inR)
		outW.Close()
		inR.Close()
		close(p.done)
	}()
	return p
}

func (p *pipeServer) Stdin() io.Writer                                      { return p.stdinW }
func (p *pipeServer) Stdout() io.Reader                                     { return p.stdoutR }
func (p *pipeServer) Done() <-chan struct{}                                 { return p.done }
func (p *pipeServer) Restart(context.Context, []schema.CanonicalPath) error { return nil }

// relayPair returns the client's ends: a writer into the chain and a reader
// out of it, either straight into the echo server or through the Relay.
func relayPair(b *testing.B, relay bool) (io.WriteCloser, io.Reader) {
	srv := newPipeServer(b)
	if !relay {
		return srv.stdinW, srv.stdoutR
	}
	cinR, cinW, _ := os.Pipe()
	coutR, coutW, _ := os.Pipe()
	go func() {
		_ = launcher.Relay{}.Mediate(context.Background(), cinR, coutW, srv)
		coutW.Close()
	}()
	return cinW, coutR
}

// BenchmarkRelayThroughput: bytes/s through the byte-transparent relay vs a
// direct pipe to the same echo server.
func BenchmarkRelayThroughput(b *testing.B) {
	chunk := make([]byte, 64<<10)
	for _, mode := range []string{"direct", "relay"} {
		b.Run(mode, func(b *testing.B) {
			w, r := relayPair(b, mode == "relay")
			b.SetBytes(int64(len(chunk)))
			go func() {
				for i := 0; i < b.N; i++ {
					w.Write(chunk)
				}
				w.Close()
			}()
			buf := make([]byte, 64<<10)
			var got int64
			for got < int64(b.N)*int64(len(chunk)) {
				n, err := r.Read(buf)
				if err != nil {
					b.Fatal(err)
				}
				got += int64(n)
			}
		})
	}
}

// BenchmarkRelayLatency: one JSON-RPC sized line there and back, relay vs
// direct pipe.
func BenchmarkRelayLatency(b *testing.B) {
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_text_file","arguments":{"path":"/work/docs/a.txt"}}}` + "\n")
	for _, mode := range []string{"direct", "relay"} {
		b.Run(mode, func(b *testing.B) {
			w, r := relayPair(b, mode == "relay")
			br := bufio.NewReader(r)
			for b.Loop() {
				if _, err := w.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := br.ReadBytes('\n'); err != nil {
					b.Fatal(err)
				}
			}
			w.Close()
		})
	}
}
