package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// inspectorOps are the operations the Inspector CLI runs per server: a
// representative set (every CLI call starts Node, the CLI and a server, so
// not all of opsFor), each of a kind the CLI can express. Left out: calls
// that need the client to answer sampling or elicitation or to list roots
// (the CLI does none of these), completion (no CLI method) and the
// roots-only filesystem server (the CLI declares roots but lists none).
var inspectorOps = map[string][]string{
	"go-sdk-everything": {"list tools", "simple text", "read outside resource_refs", "prompt with arguments", "set log level"},
	"server-everything": {"list tools", "sum", "read outside resource_refs", "simple prompt"},
	"server-filesystem": {"list tools", "read a file", "read a secret", "read outside"},
}

// inspectorArgs is o as the Inspector CLI's flags.
func inspectorArgs(o op) []string {
	args := []string{"--method", o.Method}
	switch o.Method {
	case "tools/call":
		a, _ := json.Marshal(o.Params["arguments"])
		args = append(args, "--tool-name", fmt.Sprint(o.Params["name"]), "--tool-args-json", string(a))
	case "resources/read":
		args = append(args, "--uri", fmt.Sprint(o.Params["uri"]))
	case "prompts/get":
		args = append(args, "--prompt-name", fmt.Sprint(o.Params["name"]))
		if a, ok := o.Params["arguments"].(map[string]any); ok {
			keys := make([]string, 0, len(a))
			for k := range a {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			args = append(args, "--prompt-args")
			for _, k := range keys {
				args = append(args, k+"="+fmt.Sprint(a[k]))
			}
		}
	case "logging/setLevel":
		args = append(args, "--log-level", fmt.Sprint(o.Params["level"]))
	}
	return args
}

// inspectorEra is the CLI's --protocol-era for a test era: "auto" for
// 2026-07-28 (server/discover first, initialize for a server that has
// none), as the SDK clients' modern runs.
func inspectorEra(era string) string {
	if era == eraModern {
		return "auto"
	}
	return "legacy"
}

// cliErrorLine is the CLI's error envelope on stderr (--format json).
var cliErrorLine = regexp.MustCompile(`(?m)^\{"error":.*\}$`)

// runInspector runs one op through `mcp-inspector --cli` against argv: one
// CLI process, which starts its own server process and connects (and sends
// logging/setLevel first, which the CLI does on every connect).
// It runs on a goroutine of its own: it reports failures with t.Errorf.
func runInspector(ctx context.Context, t *testing.T, env []string, argv []string, era string, o op) outcome {
	cli := interopFile(t, "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js")
	// The CLI's own flags first, then "--" and the server's command line,
	// whose flags (mcpwarden run --scope …) the CLI must not read.
	// The connect timeout (15 s by default) is the run's own bound: on a
	// loaded machine Node alone can take that long to start.
	args := append([]string{cli, "--cli", "--format", "json", "-q", "--connect-timeout", "150000",
		"--protocol-era", inspectorEra(era)}, inspectorArgs(o)...)
	args = append(append(args, "--"), argv...)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node22(t), args...)
	cmd.Dir = t.TempDir()
	// Its own home: the CLI keeps a catalog and secrets under ~/.mcp-inspector.
	cmd.Env = append(slices.Clone(env), "HOME="+cmd.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	oc := outcome{Op: o.Name}
	if err != nil && !errors.As(err, &exit) {
		t.Errorf("%s: the Inspector CLI did not run: %v", o.Name, err)
		return oc
	}
	var res struct {
		Result json.RawMessage `json:"result"`
	}
	if out := bytes.TrimSpace(stdout.Bytes()); len(out) > 0 {
		if json.Unmarshal(out, &res) != nil {
			t.Errorf("%s: the Inspector CLI printed no JSON on stdout: %q", o.Name, out)
			return oc
		}
		oc.Result = res.Result
	}
	if err != nil {
		// The CLI prints no JSON-RPC code, only its message; a denial
		// reads "mcpwarden: CODE: …" (see isDenial).
		var env struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		line := cliErrorLine.FindAll(stderr.Bytes(), -1)
		if len(line) == 0 || json.Unmarshal(line[len(line)-1], &env) != nil {
			t.Errorf("%s: the Inspector CLI failed (%v) with no error envelope:\n%s", o.Name, err, stderr.String())
			return oc
		}
		if res.Result == nil { // an isError tool result is the result, not an error
			oc.Error = &opError{Message: fmt.Sprintf("exit %d: %s", exit.ExitCode(), env.Error.Message)}
		}
	}
	return oc
}

// requireServed fails unless the direct server answered every op with a
// result: each op the Inspector runs is one the server serves (errors,
// isError results included), so a CLI that failed to run the op — and
// might fail the same way wrapped — never counts as a match.
func requireServed(t *testing.T, ops []op, direct []outcome) {
	t.Helper()
	for i, o := range ops {
		if direct[i].Result == nil {
			t.Errorf("%s: the server gave the Inspector no result direct: %s", o.Name, show(direct[i]))
		}
	}
}

// TestInspectorCLI runs the MCP Inspector CLI (2.12.0) against the servers
// direct and wrapped, in both eras, and compares what it printed. The CLI
// calls run in parallel, two per core (each has its own server process and
// home; most of a call is Node starting, the rest waiting on the server).
func TestInspectorCLI(t *testing.T) {
	w := newWorld(t)
	interopFile(t, "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js")
	env := childEnv(t)
	type target struct {
		prefix          string
		ops             []op
		direct, wrapped []outcome
		translated      bool
	}
	var targets []*target
	var calls []func()
	for _, s := range []server{w.goSDKServer(), w.everythingServer(), w.filesystemServer(false)} {
		byName := map[string]op{}
		for _, o := range opsFor(w, s) {
			byName[o.Name] = o
		}
		for _, era := range eras {
			tg := &target{prefix: "inspector/" + s.name + "/" + era, translated: era == eraModern && !s.modern}
			for _, name := range inspectorOps[s.name] {
				o, ok := byName[name]
				if !ok {
					t.Fatalf("%s: no op %q", s.name, name)
				}
				tg.ops = append(tg.ops, o)
			}
			tg.ops = inEra(tg.ops, era)
			tg.direct = make([]outcome, len(tg.ops))
			tg.wrapped = make([]outcome, len(tg.ops))
			targets = append(targets, tg)
			wrapped := w.wrap(s)
			for i, o := range tg.ops {
				calls = append(calls,
					func() { tg.direct[i] = runInspector(context.Background(), t, env, s.argv, era, o) },
					func() { tg.wrapped[i] = runInspector(context.Background(), t, env, wrapped, era, o) })
			}
		}
	}
	work := make(chan func())
	var wg sync.WaitGroup
	for range 2 * runtime.NumCPU() {
		wg.Go(func() {
			for f := range work {
				f()
			}
		})
	}
	for _, f := range calls {
		work <- f
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		return
	}
	var ta tally
	for _, tg := range targets {
		t.Run(strings.TrimPrefix(tg.prefix, "inspector/"), func(t *testing.T) {
			requireServed(t, tg.ops, tg.direct)
			m, d := compareOutcomes(t, tg.prefix, tg.ops, tg.direct, tg.wrapped, tg.translated)
			ta.add(tg.prefix, m, d, len(tg.ops))
		})
	}
	ta.report(t, "Inspector CLI 2.12.0")
}
