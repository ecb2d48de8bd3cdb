package compat_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/mcptest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher"
)

// server is one row of docs/compatibility.md.
type server struct {
	name      string // the package (the table's key)
	launch    string // how it is started, for the table
	command   func(e *env) []string
	flags     func(e *env) []string // extra `mcpwarden run` flags the server needs (none = starts as installed)
	write     bool                  // the scope grants write on ws
	network   bool                  // the scope grants TCP to the test's HTTP server
	clientEnv func(e *env) []string // the client's env block
	calls     []call
}

type call struct {
	tool  string
	args  func(e *env) map[string]any
	check func(e *env, text string) error
}

// env is one test's files.
type env struct {
	modules, online, root, base, ws, venv, gobin string
	httpPort                                     int
}

func contains(want string) func(*env, string) error {
	return func(_ *env, text string) error {
		if !strings.Contains(text, want) {
			return fmt.Errorf("result lacks %q: %.300s", want, text)
		}
		return nil
	}
}

func noArgs(*env) map[string]any { return map[string]any{} }

func (e *env) node(pkg, script string, args ...string) []string {
	return append([]string{"node", filepath.Join(e.modules, pkg, script)}, args...)
}

// onlineNode is node for a server of deploy/mcp-servers-online.
func (e *env) onlineNode(pkg, script string) []string {
	return []string{"node", filepath.Join(e.online, pkg, script)}
}

var servers = []server{
	{
		name: "@modelcontextprotocol/server-filesystem", launch: "node dist/index.js DIR",
		command: func(e *env) []string { return e.node("@modelcontextprotocol/server-filesystem", "dist/index.js", e.ws) },
		calls:   []call{{tool: "read_text_file", args: func(e *env) map[string]any { return map[string]any{"path": filepath.Join(e.ws, "a.txt")} }, check: contains("hello compat")}},
	},
	{
		name: "@modelcontextprotocol/server-everything", launch: "node dist/index.js",
		command: func(e *env) []string { return e.node("@modelcontextprotocol/server-everything", "dist/index.js") },
		calls: []call{
			{tool: "echo", args: func(*env) map[string]any { return map[string]any{"message": "compat-echo"} }, check: contains("compat-echo")},
			{tool: "get-sum", args: func(*env) map[string]any { return map[string]any{"a": 2, "b": 40} }, check: contains("42")},
		},
	},
	{
		name: "@modelcontextprotocol/server-memory", launch: "node dist/index.js, MEMORY_FILE_PATH in the client's env",
		command:   func(e *env) []string { return e.node("@modelcontextprotocol/server-memory", "dist/index.js") },
		write:     true,
		clientEnv: func(e *env) []string { return []string{"MEMORY_FILE_PATH=" + filepath.Join(e.ws, "memory.jsonl")} },
		calls: []call{
			{tool: "create_entities", args: func(*env) map[string]any {
				return map[string]any{"entities": []any{map[string]any{"name": "mcpwarden", "entityType": "project", "observations": []string{"fenced"}}}}
			}, check: contains("mcpwarden")},
			{tool: "read_graph", args: noArgs, check: func(e *env, text string) error {
				if !strings.Contains(text, "fenced") {
					return fmt.Errorf("graph lacks the entity: %.300s", text)
				}
				if b, err := os.ReadFile(filepath.Join(e.ws, "memory.jsonl")); err != nil || !bytes.Contains(b, []byte("mcpwarden")) {
					return fmt.Errorf("MEMORY_FILE_PATH was not used: %v", err)
				}
				return nil
			}},
		},
	},
	{
		name: "npx @modelcontextprotocol/server-memory", launch: "npx -y PKG, the package in npm's npx cache",
		command: func(e *env) []string { return []string{"npx", "-y", "@modelcontextprotocol/server-memory"} },
		write:   true,
		clientEnv: func(e *env) []string {
			return []string{"MEMORY_FILE_PATH=" + filepath.Join(e.ws, "npx-memory.jsonl"), "npm_config_cache=" + filepath.Join(e.root, "npm-cache")}
		},
		calls: []call{{tool: "read_graph", args: noArgs, check: contains("entities")}},
	},
	{
		name: "@modelcontextprotocol/server-sequential-thinking", launch: "node dist/index.js",
		command: func(e *env) []string {
			return e.node("@modelcontextprotocol/server-sequential-thinking", "dist/index.js")
		},
		calls: []call{{tool: "sequentialthinking", args: func(*env) map[string]any {
			return map[string]any{"thought": "one step", "nextThoughtNeeded": false, "thoughtNumber": 1, "totalThoughts": 1}
		}, check: contains("thoughtNumber")}},
	},
	{
		name: "@cyanheads/git-mcp-server", launch: "node dist/index.js, runs git",
		command: func(e *env) []string { return e.node("@cyanheads/git-mcp-server", "dist/index.js") },
		flags:   func(*env) []string { return []string{"--allow-exec", "git", "--unmask", ".git"} }, // .git is a secret pattern the fence masks otherwise
		calls: []call{
			{tool: "git_status", args: func(e *env) map[string]any { return map[string]any{"path": e.ws} }, check: contains("master")},
			{tool: "git_log", args: func(e *env) map[string]any { return map[string]any{"path": e.ws, "maxCount": 1} }, check: contains("initial")},
		},
	},
	{
		name: "time-mcp", launch: "node dist/index.js",
		command: func(e *env) []string { return e.node("time-mcp", "dist/index.js") },
		calls: []call{{tool: "current_time", args: func(*env) map[string]any {
			return map[string]any{"format": "YYYY-MM-DD", "timezone": "Europe/Paris"}
		}, check: contains(strconv.Itoa(time.Now().Year()))}},
	},
	{
		name: "@negokaz/excel-mcp-server", launch: "node dist/launcher.js, which runs its Go binary",
		command: func(e *env) []string { return e.node("@negokaz/excel-mcp-server", "dist/launcher.js") },
		write:   true,
		calls: []call{
			{tool: "excel_write_to_sheet", args: func(e *env) map[string]any {
				return map[string]any{"fileAbsolutePath": filepath.Join(e.ws, "book.xlsx"), "sheetName": "Sheet1", "newSheet": false, "range": "A1:B1", "values": [][]any{{"fenced", 42}}}
			}, check: func(*env, string) error { return nil }},
			{tool: "excel_read_sheet", args: func(e *env) map[string]any {
				return map[string]any{"fileAbsolutePath": filepath.Join(e.ws, "book.xlsx"), "sheetName": "Sheet1"}
			}, check: contains("fenced")},
		},
	},
	{
		name: "@sylphlab/pdf-reader-mcp", launch: "node dist/src/index.js",
		command: func(e *env) []string { return e.node("@sylphlab/pdf-reader-mcp", "dist/src/index.js") },
		calls: []call{{tool: "read_pdf", args: func(e *env) map[string]any {
			// This version takes paths relative to its working directory (the base).
			return map[string]any{"sources": []any{map[string]any{"path": "ws/hello.pdf"}}, "include_full_text": true}
		}, check: contains("Fenced PDF")}},
	},
	{
		name: "mcp-fetch-server", launch: "node dist/index.js, network to one port",
		command: func(e *env) []string { return e.node("mcp-fetch-server", "dist/index.js") },
		network: true,
		calls: []call{{tool: "fetch_txt", args: func(e *env) map[string]any {
			return map[string]any{"url": fmt.Sprintf("http://localhost:%d/page", e.httpPort)}
		}, check: contains("served locally")}},
	},
	{
		name: "@itseasy21/mcp-knowledge-graph", launch: "node dist/index.js --memory-path FILE",
		command: func(e *env) []string {
			return e.node("@itseasy21/mcp-knowledge-graph", "dist/index.js", "--memory-path", filepath.Join(e.ws, "kg.jsonl"))
		},
		write: true,
		calls: []call{
			{tool: "create_entities", args: func(*env) map[string]any {
				return map[string]any{"entities": []any{map[string]any{"name": "fence", "entityType": "thing", "observations": []string{"holds"}}}}
			}, check: contains("fence")},
			{tool: "read_graph", args: noArgs, check: contains("holds")},
		},
	},
	{
		name: "@antv/mcp-server-chart", launch: "node build/index.js",
		command: func(e *env) []string { return e.node("@antv/mcp-server-chart", "build/index.js") },
		calls: []call{{tool: "generate_pie_chart", args: func(*env) map[string]any {
			return map[string]any{"data": []any{map[string]any{"category": "a", "value": 1}, map[string]any{"category": "b", "value": 2}}}
		}, check: contains("http")}},
	},
	// Servers of online services: none can reach its service here (no
	// public host, no account), so each row checks that the server starts
	// and lists its tools under the fence, and that a call fails the way it
	// fails without mcpwarden. The ones that refuse to start without a token
	// get a placeholder one through the client's env block; credentials reach
	// the server only with --env NAME (docs/launcher.md).
	{
		name: "@modelcontextprotocol/server-github", launch: "node dist/index.js, no token",
		command: func(e *env) []string { return e.onlineNode("@modelcontextprotocol/server-github", "dist/index.js") },
		calls: []call{{tool: "search_repositories", args: func(*env) map[string]any {
			return map[string]any{"query": "mcpwarden"}
		}, check: contains("mcpwarden")}},
	},
	{
		name: "@modelcontextprotocol/server-gitlab", launch: "node dist/index.js, GITLAB_PERSONAL_ACCESS_TOKEN in the client's env",
		command:   func(e *env) []string { return e.onlineNode("@modelcontextprotocol/server-gitlab", "dist/index.js") },
		flags:     func(*env) []string { return []string{"--env", "GITLAB_PERSONAL_ACCESS_TOKEN"} },
		clientEnv: func(*env) []string { return []string{"GITLAB_PERSONAL_ACCESS_TOKEN=placeholder"} },
		calls: []call{{tool: "search_repositories", args: func(*env) map[string]any {
			return map[string]any{"search": "mcpwarden"}
		}, check: contains("mcpwarden")}},
	},
	{
		name: "@modelcontextprotocol/server-slack", launch: "node dist/index.js, SLACK_BOT_TOKEN and SLACK_TEAM_ID in the client's env",
		command:   func(e *env) []string { return e.onlineNode("@modelcontextprotocol/server-slack", "dist/index.js") },
		flags:     func(*env) []string { return []string{"--env", "SLACK_BOT_TOKEN", "--env", "SLACK_TEAM_ID"} },
		clientEnv: func(*env) []string { return []string{"SLACK_BOT_TOKEN=placeholder", "SLACK_TEAM_ID=placeholder"} },
		calls:     []call{{tool: "slack_list_channels", args: noArgs, check: contains("channels")}},
	},
	{
		name: "@modelcontextprotocol/server-brave-search", launch: "node dist/index.js, BRAVE_API_KEY in the client's env",
		command: func(e *env) []string {
			return e.onlineNode("@modelcontextprotocol/server-brave-search", "dist/index.js")
		},
		flags:     func(*env) []string { return []string{"--env", "BRAVE_API_KEY"} },
		clientEnv: func(*env) []string { return []string{"BRAVE_API_KEY=placeholder"} },
		calls: []call{{tool: "brave_web_search", args: func(*env) map[string]any {
			return map[string]any{"query": "mcpwarden"}
		}, check: contains("mcpwarden")}},
	},
	{
		name: "@upstash/context7-mcp", launch: "node dist/index.js, no key",
		command: func(e *env) []string { return e.onlineNode("@upstash/context7-mcp", "dist/index.js") },
		calls: []call{{tool: "resolve-library-id", args: func(*env) map[string]any {
			return map[string]any{"libraryName": "react", "query": "hooks"}
		}, check: contains("/")}},
	},
	{
		name: "tavily-mcp", launch: "node build/index.js, no key",
		command: func(e *env) []string { return e.onlineNode("tavily-mcp", "build/index.js") },
		calls: []call{{tool: "tavily_search", args: func(*env) map[string]any {
			return map[string]any{"query": "mcpwarden"}
		}, check: contains("mcpwarden")}},
	},
	{
		name: "@notionhq/notion-mcp-server", launch: "node bin/cli.mjs, no token",
		command: func(e *env) []string { return e.onlineNode("@notionhq/notion-mcp-server", "bin/cli.mjs") },
		calls:   []call{{tool: "API-get-self", args: noArgs, check: contains("bot")}},
	},
	{
		name: "@playwright/mcp", launch: "node cli.js, no browser installed",
		command: func(e *env) []string { return e.onlineNode("@playwright/mcp", "cli.js") },
		calls: []call{{tool: "browser_navigate", args: func(e *env) map[string]any {
			return map[string]any{"url": fmt.Sprintf("http://localhost:%d/page", e.httpPort)}
		}, check: contains("served locally")}},
	},
	{
		name: "go-sdk everything-server", launch: "Go binary (go install)",
		command: func(e *env) []string { return []string{e.gobin} },
		calls:   []call{{tool: "test_simple_text", args: noArgs, check: contains("simple text")}},
	},
	{
		name: "mcp-stdlib-server (venv)", launch: "a venv's console script, network to one port",
		command: func(e *env) []string { return []string{filepath.Join(e.venv, "bin", "mcp-stdlib-server")} },
		network: true,
		calls: []call{
			{tool: "fetch", args: func(e *env) map[string]any {
				return map[string]any{"url": fmt.Sprintf("http://localhost:%d/page", e.httpPort)}
			}, check: contains("served locally")},
			{tool: "echo", args: func(*env) map[string]any { return map[string]any{"text": "from python"} }, check: contains("from python")},
			{tool: "now", args: func(*env) map[string]any { return map[string]any{"tz": "Asia/Tokyo"} }, check: contains("+09:00")},
			{tool: "read_text_file", args: func(e *env) map[string]any { return map[string]any{"path": filepath.Join(e.ws, "a.txt")} }, check: contains("hello compat")},
		},
	},
}

// result is what one server did.
type result struct {
	starts, tools bool
	detail        string
}

func TestCompatibility(t *testing.T) {
	if launcher.KernelABI() < 7 {
		testenv.Missing(t, "the fence needs Landlock ABI 7")
	}
	repo := testenv.RepoRoot()
	e := &env{modules: filepath.Join(repo, "deploy", "mcp-servers", "node_modules")}
	e.online = filepath.Join(repo, "deploy", "mcp-servers-online", "node_modules")
	for _, m := range []string{e.modules, e.online} {
		testenv.RequireFile(t, filepath.Join(m, ".mcpwarden-installed"), "run scripts/test-env.sh install-npm")
	}
	testenv.RequireCommand(t, "node")
	testenv.RequireCommand(t, "git")
	python := testenv.RequireCommand(t, "/usr/bin/python3")
	e.gobin = testenv.GoTool(t, "everything-server")
	bin := os.Getenv("MCPWARDEN_BIN")
	dir := t.TempDir()
	e.root, _ = filepath.EvalSymlinks(dir)
	if bin == "" {
		bin = filepath.Join(e.root, "mcpwarden")
		testenv.MustGoBuild(t, bin, "./cmd/mcpwarden")
		testenv.MustGoBuild(t, filepath.Join(e.root, "mcpwarden-fence"), "./cmd/mcpwarden-fence")
	}
	e.base = filepath.Join(e.root, "base")
	e.ws = filepath.Join(e.base, "ws")
	// A .env the fence masks: every server must work beside it.
	testenv.WriteFiles(t, map[string]string{filepath.Join(e.ws, "a.txt"): "hello compat\n", filepath.Join(e.ws, ".env"): "TOKEN=compat\n"})
	if err := os.WriteFile(filepath.Join(e.ws, "hello.pdf"), minimalPDF("Fenced PDF"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.ws, "book.xlsx"), minimalXLSX(t), 0o644); err != nil {
		t.Fatal(err)
	}
	// The branch is named, not left to the machine's git configuration
	// (init.defaultBranch=main failed git_status's check for "master"),
	// and no signing a machine's configuration may ask for.
	for _, args := range [][]string{{"init", "-q", "-b", "master"}, {"add", "a.txt"}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", "commit", "-qm", "initial"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = e.ws
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	// npx finds the package in its cache, as an earlier `npx -y` would have
	// left it; the pinned install stands in for it.
	npx := filepath.Join(e.root, "npm-cache", "_npx", npxKey("@modelcontextprotocol/server-memory"))
	if err := os.MkdirAll(npx, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.modules, filepath.Join(npx, "node_modules")); err != nil {
		t.Fatal(err)
	}
	e.venv = filepath.Join(e.root, "venv")
	mcptest.InstallVenvServer(t, python, e.venv)
	e.httpPort = serveHTTP(t)

	results := map[string]result{}
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			r := runServer(t, bin, e, s)
			results[s.name] = r
			t.Logf("%s: starts=%v tools=%v %s", s.name, r.starts, r.tools, r.detail)
		})
	}
	checkTable(t, filepath.Join(repo, "docs", "compatibility.md"), results)
}

// runServer runs s under `mcpwarden run` and drives initialize, tools/list
// and its calls.
func runServer(t *testing.T, bin string, e *env, s server) result {
	scope := map[string]any{
		"scope_id": "compat", "allowed_paths": []string{"ws"}, "resource_refs": []string{}, "access_mode": "read",
		"tool_allowlist": []string{}, "approval": "none", "expires_after_minutes": 30,
	}
	// Tools missing from the proxy's table count as destructive; the scope
	// says what each called tool does, as an operator's scope would.
	classes := map[string]string{}
	class := "read"
	if s.write {
		scope["access_mode"] = "write"
		class = "write"
	}
	for _, c := range s.calls {
		scope["tool_allowlist"] = append(scope["tool_allowlist"].([]string), c.tool)
		classes[c.tool] = class
	}
	scope["tool_classes"] = classes
	if s.network {
		scope["network"] = map[string]any{"connect_tcp": []int{e.httpPort}}
	}
	scopeFile := filepath.Join(t.TempDir(), "scope.json")
	b, _ := json.Marshal(scope)
	if err := os.WriteFile(scopeFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--scope", scopeFile, "--base", e.base, "--audit-log", filepath.Join(t.TempDir(), "audit.jsonl")}
	if s.flags != nil {
		args = append(args, s.flags(e)...)
	}
	args = append(append(args, "--"), s.command(e)...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = e.base
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(e.root, "home"))
	if s.clientEnv != nil {
		cmd.Env = append(cmd.Env, s.clientEnv(e)...)
	}
	stderr := &testenv.LockedBuffer{}
	cmd.Stderr = stderr
	c, err := mcptest.Start(cmd, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(10 * time.Second) }()
	var r result
	fail := func(format string, a ...any) result {
		r.detail = fmt.Sprintf(format, a...)
		t.Errorf("%s\nstderr:\n%s", r.detail, tail(stderr.String(), 3000))
		return r
	}
	if _, err := c.Initialize(); err != nil {
		return fail("initialize: %v", err)
	}
	tools, err := c.ListTools()
	if err != nil || len(tools) == 0 {
		return fail("tools/list: %v (%d tools)", err, len(tools))
	}
	r.starts = s.flags == nil
	for _, call := range s.calls {
		text, err := c.CallTool(call.tool, call.args(e))
		if err != nil && !errors.Is(err, mcptest.ErrTool) {
			return fail("%s: %v", call.tool, err) // the session broke
		}
		if err == nil {
			err = call.check(e, text)
		}
		if err != nil {
			// A tool that fails or answers wrongly is the table's "tools
			// work: no"; whether the table says so is checked at the end.
			r.detail = fmt.Sprintf("%s: %v", call.tool, err)
			t.Logf("%s (stderr: %s)", r.detail, tail(stderr.String(), 1500))
			return r
		}
	}
	r.tools = true
	return r
}

// checkTable compares the table in docs/compatibility.md with results: the
// "starts" and "tools work" columns must say what was measured.
func checkTable(t *testing.T, doc string, results map[string]result) {
	t.Helper()
	f, err := os.Open(doc)
	if err != nil {
		t.Fatalf("the compatibility table: %v", err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "<!-- compat:begin -->"):
			in = true
			continue
		case strings.Contains(line, "<!-- compat:end -->"):
			in = false
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cols := strings.Split(strings.Trim(line, "|"), "|")
		if len(cols) < 6 {
			t.Errorf("table row with %d columns: %s", len(cols), line)
			continue
		}
		name := strings.Trim(strings.TrimSpace(cols[0]), "`")
		r, ok := results[name]
		if !ok {
			t.Errorf("docs/compatibility.md lists %q, which the test does not run", name)
			continue
		}
		seen[name] = true
		yes := func(s string) bool { return strings.HasPrefix(strings.TrimSpace(s), "yes") }
		if yes(cols[3]) != r.starts || yes(cols[4]) != r.tools {
			t.Errorf("docs/compatibility.md says %s starts=%q tools=%q; measured starts=%v tools=%v (%s)", name, strings.TrimSpace(cols[3]), strings.TrimSpace(cols[4]), r.starts, r.tools, r.detail)
		}
	}
	for name := range results {
		if !seen[name] {
			t.Errorf("docs/compatibility.md has no row for %s", name)
		}
	}
}

// serveHTTP serves one page on 127.0.0.1 for the fetch server.
func serveHTTP(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body><p>served locally</p></body></html>")
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// minimalPDF is a one-page PDF showing text.
func minimalPDF(text string) []byte {
	content := fmt.Sprintf("BT /F1 24 Tf 72 720 Td (%s) Tj ET", text)
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(content), content),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

// minimalXLSX is a workbook with one empty sheet, Sheet1.
func minimalXLSX(t *testing.T) []byte {
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	for name, body := range map[string]string{
		"[Content_Types].xml":        `<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>`,
		"_rels/.rels":                `<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>`,
		"xl/workbook.xml":            `<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>`,
		"xl/_rels/workbook.xml.rels": `<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>`,
		"xl/worksheets/sheet1.xml":   `<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><dimension ref="A1"/><sheetData/></worksheet>`,
	} {
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// npxKey is npm's npx cache directory name for one package spec.
func npxKey(spec string) string {
	out := must(exec.Command("node", "-e", "process.stdout.write(require('crypto').createHash('sha512').update(process.argv[1]).digest('hex').slice(0,16))", spec).Output())
	return string(out)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
