package interop

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

func TestMain(m *testing.M) { os.Exit(fencetest.Run(m)) }

// The protocol eras every client test runs in.
const (
	eraLegacy = "2025-11-25"
	eraModern = "2026-07-28"
)

var eras = []string{eraLegacy, eraModern}

// interopFile is a file of the pinned clients in deploy/interop.
func interopFile(tb testing.TB, rel ...string) string {
	tb.Helper()
	p := filepath.Join(append([]string{testenv.RepoRoot(), "deploy", "interop"}, rel...)...)
	testenv.RequireFile(tb, p, "run scripts/test-env.sh install")
	return p
}

// node22 is Node 22 from npm (deploy/interop): the conformance suite and
// the Inspector need Node ≥ 22.19, Debian's is older.
func node22(tb testing.TB) string {
	return interopFile(tb, "node_modules", "node", "bin", "node")
}

// childEnv is the environment of the clients and bridges the tests start:
// Node 22 first on PATH.
func childEnv(tb testing.TB) []string {
	bin := filepath.Dir(node22(tb))
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PATH=") {
			env = append(env, e)
		}
	}
	return append(env, "PATH="+bin+":"+os.Getenv("PATH"))
}

// server is a real MCP server the clients talk to, direct or wrapped.
type server struct {
	name   string
	argv   []string       // the server's own command line
	scope  map[string]any // what the wrapped run allows (merged into fencetest's defaults)
	modern bool           // the server itself speaks 2026-07-28
	roots  bool           // the server takes its directories from the client's roots only
}

// world is the base directory, state directory and binaries of one test.
type world struct {
	tb    testing.TB
	bins  fencetest.Binaries
	base  string // approved base; its "work" directory is the scope's path
	work  string
	state string
}

// newWorld demands what the wrapped runs need (root, Landlock ABI 7, the
// pinned servers and clients) and lays out a workspace: work/ holds a text
// file, a subdirectory and a secret (.env) that the scope's built-in secret
// patterns refuse.
func newWorld(tb testing.TB) *world {
	tb.Helper()
	fencetest.RequireFence(tb)
	node22(tb)
	base, err := filepath.EvalSymlinks(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	w := &world{tb: tb, bins: fencetest.Build(tb), base: base, work: filepath.Join(base, "work"), state: tb.TempDir()}
	testenv.WriteFiles(tb, map[string]string{
		filepath.Join(w.work, "hello.txt"):         "hello from the workspace\n",
		filepath.Join(w.work, "notes", "todo.md"):  "# todo\n- interop\n",
		filepath.Join(w.work, ".env"):              "TOKEN=do-not-read\n",
		filepath.Join(w.work, "notes", "done.txt"): "done\n",
	})
	return w
}

// goSDKServer is go-sdk's conformance everything-server (both eras).
func (w *world) goSDKServer() server {
	bin := testenv.GoTool(w.tb, "everything-server")
	return server{name: "go-sdk-everything", argv: []string{bin}, modern: true, scope: map[string]any{
		"allowed_paths": []string{"work"},
		"access_mode":   "write",
		"resource_refs": []string{"test://static-text", "test://static-binary", "test://watched-resource",
			"test://template/123/data", "test://nonexistent-resource-for-conformance-testing"},
		"prompt_allowlist": conformancePrompts,
		"tool_allowlist": []string{"json_schema_2020_12_tool", "test_audio_content", "test_elicitation",
			"test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums", "test_embedded_resource",
			"test_error_handling", "test_image_content", "test_input_required_result_capabilities",
			"test_input_required_result_elicitation", "test_input_required_result_list_roots",
			"test_input_required_result_multi_round", "test_input_required_result_multiple_inputs",
			"test_input_required_result_request_state", "test_input_required_result_sampling",
			"test_input_required_result_tampered_state", "test_logging_tool", "test_missing_capability",
			"test_multiple_content_types", "test_reconnection", "test_sampling", "test_simple_text",
			"test_streaming_elicitation", "test_tool_with_logging", "test_tool_with_progress",
			"test_trigger_prompt_change", "test_trigger_tool_change", "test_x_mcp_header"},
	}}
}

// conformancePrompts are the prompts go-sdk's everything-server has, which
// the conformance suite gets (and completes) on every server: a server
// that lacks one answers for itself, as direct.
var conformancePrompts = []string{"test_simple_prompt", "test_prompt_with_arguments",
	"test_prompt_with_embedded_resource", "test_prompt_with_image", "test_input_required_result_prompt",
	"__transient_prompt_for_list_changed"}

// everythingServer is @modelcontextprotocol/server-everything (legacy only).
func (w *world) everythingServer() server {
	js := interopFile(w.tb, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	return server{name: "server-everything", argv: []string{node22(w.tb), js, "stdio"}, scope: map[string]any{
		"allowed_paths": []string{"work"},
		"access_mode":   "write",
		"resource_refs": []string{"demo://resource/static/document/architecture.md",
			"demo://resource/static/document/extension.md", "demo://resource/static/document/features.md",
			"demo://resource/static/document/how-it-works.md", "demo://resource/static/document/instructions.md",
			"demo://resource/static/document/startup.md", "demo://resource/static/document/structure.md",
			"demo://resource/dynamic/text/1", "demo://resource/dynamic/blob/1",
			// the conformance suite subscribes to this one on every server
			"test://watched-resource"},
		"prompt_allowlist": append([]string{"simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"}, conformancePrompts...),
		"tool_allowlist": []string{"echo", "get-annotated-message", "get-env", "get-resource-links",
			"get-resource-reference", "get-roots-list", "get-structured-content", "get-sum", "get-tiny-image",
			"gzip-file-as-resource", "simulate-research-query", "toggle-simulated-logging",
			"toggle-subscriber-updates", "trigger-elicitation-request", "trigger-elicitation-request-async",
			"trigger-long-running-operation", "trigger-sampling-request", "trigger-sampling-request-async",
			"trigger-url-elicitation"},
	}}
}

// fsTools are the official filesystem server's tools.
var fsTools = []string{"read_text_file", "read_file", "read_media_file", "read_multiple_files",
	"list_directory", "list_directory_with_sizes", "directory_tree", "search_files", "get_file_info",
	"list_allowed_directories", "write_file", "edit_file", "create_directory", "move_file"}

// filesystemServer is @modelcontextprotocol/server-filesystem with the
// workspace on its command line, or with none (rootsOnly: it takes its
// directories from the client's roots).
func (w *world) filesystemServer(rootsOnly bool) server {
	js := fencetest.FilesystemServer(w.tb)
	s := server{name: "server-filesystem", argv: []string{node22(w.tb), js, w.work}, roots: rootsOnly, scope: map[string]any{
		"allowed_paths": []string{"work"}, "access_mode": "write", "tool_allowlist": fsTools, "prompt_allowlist": conformancePrompts,
	}}
	if rootsOnly {
		s.name = "server-filesystem-roots"
		s.argv = s.argv[:2]
	}
	return s
}

// wrap is the server's command line under the real `mcpwarden run`, default
// flags (only where its records go is chosen).
func (w *world) wrap(s server) []string {
	scope := fencetest.WriteScope(w.tb, w.state, s.scope)
	return append([]string{w.bins.Mcpwarden, "run", "--scope", scope, "--base", w.base, "--state-dir", w.state, "--"}, s.argv...)
}

// shellJoin quotes argv for a shell (supergateway runs its --stdio command
// through one).
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// bridge is supergateway serving a stdio server as Streamable HTTP: one
// server process per session (stateful) or per modern request.
type bridge struct {
	URL    string
	cmd    *exec.Cmd
	stderr *testenv.LockedBuffer
}

// startBridge starts supergateway in front of argv and waits until it answers.
func startBridge(tb testing.TB, argv []string) *bridge {
	tb.Helper()
	port := testenv.FreePort(tb)
	sg := interopFile(tb, "node_modules", "supergateway", "dist", "index.js")
	cmd := exec.Command(node22(tb), sg, "--stdio", shellJoin(argv), "--outputTransport", "streamableHttp",
		"--stateful", "--port", fmt.Sprint(port), "--healthEndpoint", "/healthz", "--logLevel", "none")
	cmd.Env = childEnv(tb)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	b := &bridge{URL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port), cmd: cmd, stderr: &testenv.LockedBuffer{}}
	cmd.Stdout, cmd.Stderr = b.stderr, b.stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.stop)
	health := fmt.Sprintf("http://127.0.0.1:%d/healthz", port)
	// Bounded generously: Node under heavy load has taken over 30 s to listen.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return b
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("supergateway did not answer on %s: %v\n%s", health, err, b.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends supergateway and every server it started (its process group;
// it puts each child in a group of its own and stops them on SIGTERM).
func (b *bridge) stop() {
	if b.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// runNode runs a Node 22 program to completion (bounded by ctx's deadline,
// else by 3 minutes) and returns its stdout; a non-zero exit is returned as
// an error with stderr.
func runNode(ctx context.Context, tb testing.TB, dir string, args ...string) ([]byte, error) {
	tb.Helper()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, node22(tb), args...)
	cmd.Dir = dir
	cmd.Env = childEnv(tb)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr testenv.LockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%v: %w\n%s", args, err, stderr.String())
	}
	return out, nil
}
