package clientconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/adopt/jsonedit"
)

type want struct {
	name      string
	transport Transport
	command   string
	args      []string
	env       []EnvVar
}

// TestRealFormats reads a file of each client's real shape.
func TestRealFormats(t *testing.T) {
	for _, c := range []struct {
		file    string
		format  Format
		ws      string
		entries []want
	}{
		{"testdata/claude-desktop/claude_desktop_config.json", ClaudeDesktop, "", []want{
			{"filesystem", Stdio, "npx", []string{"-y", "@modelcontextprotocol/server-filesystem", "/Users/alice/Desktop", "/Users/alice/Downloads"}, nil},
			{"memory", Stdio, "npx", []string{"-y", "@modelcontextprotocol/server-memory"}, []EnvVar{{"MEMORY_FILE_PATH", "/Users/alice/.memory/graph.json", true}}},
			{"github", Stdio, "docker", []string{"run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"}, []EnvVar{{"GITHUB_PERSONAL_ACCESS_TOKEN", "<YOUR_TOKEN>", true}}},
		}},
		{"testdata/claude-code/.mcp.json", ClaudeCode, "testdata/claude-code", []want{
			{"project-files", Stdio, "node", []string{"${NODE_MODULES:-/usr/lib/node_modules}/@modelcontextprotocol/server-filesystem/dist/index.js", "."}, nil},
			{"sentry", Remote, "", nil, nil},
			{"db", Stdio, "/usr/local/bin/db-mcp", []string{"--dsn", "${DATABASE_URL}"}, []EnvVar{{"DB_READONLY", "1", true}}},
		}},
		{"testdata/cursor/.cursor/mcp.json", Cursor, "testdata/cursor", []want{
			{"docs", Stdio, "uvx", []string{"mcp-server-docs", "--root", "${workspaceFolder}/docs"}, []EnvVar{{"API_KEY", "${env:DOCS_API_KEY}", true}}},
			{"linear", Remote, "", nil, nil},
		}},
		{"testdata/vscode/.vscode/mcp.json", VSCode, "testdata/vscode", []want{
			{"files", Stdio, "node", []string{"${userHome}/.local/lib/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "${workspaceFolder}"}, nil},
			{"brave", Stdio, "npx", []string{"-y", "@modelcontextprotocol/server-brave-search"}, []EnvVar{{"BRAVE_API_KEY", "${input:brave-key}", true}, {"UNSET_ME", "", false}}},
			{"github", Remote, "", nil, nil},
		}},
	} {
		t.Run(string(c.format), func(t *testing.T) {
			cfg, err := Read(c.file, "")
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Format != c.format {
				t.Fatalf("format %s, want %s", cfg.Format, c.format)
			}
			if ws := cfg.WorkspaceFolder(); (c.ws == "") != (ws == "") || (c.ws != "" && !strings.HasSuffix(ws, c.ws)) {
				t.Errorf("workspace folder %q, want …%q", ws, c.ws)
			}
			if len(cfg.Entries) != len(c.entries) {
				t.Fatalf("%d entries, want %d", len(cfg.Entries), len(c.entries))
			}
			for i, w := range c.entries {
				e := cfg.Entries[i]
				if e.Name != w.name || e.Transport != w.transport || e.Command != w.command || !reflect.DeepEqual(e.Args, w.args) || !reflect.DeepEqual(e.Env, w.env) {
					t.Errorf("entry %d: %+v\nwant %+v", i, e, w)
				}
				if e.Wrapped != nil {
					t.Errorf("%s reads as wrapped", e.Name)
				}
			}
		})
	}
}

// TestHostile: files that mean two things, or that mcpwarden would read
// differently from the client, are refused with what is wrong.
func TestHostile(t *testing.T) {
	for file, msg := range map[string]string{
		"dup-server.json":      `server "fs" is defined twice`,
		"dup-command.json":     `"command" appears 2 times`,
		"dup-servers-key.json": `"mcpServers" appears 2 times`,
		"surrogate-name.json":  "lone UTF-16 surrogate",
		"surrogate-arg.json":   "args[0] escapes a lone UTF-16 surrogate",
		"args-object.json":     `"args" is a object`,
		"args-number.json":     "args[1] is a number",
		"no-command.json":      `neither "command" nor "url"`,
		"servers-array.json":   `"mcpServers" is a array`,
		"../claude-code/nope":  "no such file",
		"../claude-desktop":    "not a regular file",
		"unicode-names.json":   "",
	} {
		t.Run(file, func(t *testing.T) {
			_, err := Read(filepath.Join("testdata/hostile", file), ClaudeDesktop)
			if msg == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), msg) {
				t.Fatalf("got %v, want an error naming %q", err, msg)
			}
		})
	}
	c, err := Read("testdata/hostile/unicode-names.json", ClaudeDesktop)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range c.Entries {
		names = append(names, e.Name)
	}
	if want := []string{"файлы 📁", "\u202etxt.exe", "e\u0301cole", "ﬁle/../.."}; !reflect.DeepEqual(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
}

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		path, content string
		want          Format
	}{
		{"/h/.config/Claude/claude_desktop_config.json", `{}`, ClaudeDesktop},
		{"/p/.mcp.json", `{}`, ClaudeCode},
		{"/h/.cursor/mcp.json", `{"mcpServers":{}}`, Cursor},
		{"/p/.vscode/mcp.json", `{}`, VSCode},
		{"/h/.config/Code/User/mcp.json", `{"servers":{}}`, VSCode},
		{"/h/servers.json", `{"mcpServers":{}}`, ""},
		{"/h/mcp.json", `{"mcpServers":{}}`, ""},
	} {
		d, _ := jsonedit.Parse([]byte(c.content))
		got, err := Detect(c.path, d)
		if got != c.want || (c.want == "") != (err != nil) {
			t.Errorf("Detect(%s) = %q, %v; want %q", c.path, got, err, c.want)
		}
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"HOME": "/h", "A": "x", "EMPTY": ""}
	vars := Vars{Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, Home: "/h", WorkspaceFolder: "/ws/proj"}
	user := vars
	user.WorkspaceFolder = ""
	for _, c := range []struct {
		f       Format
		v       Vars
		in, out string
		err     string
	}{
		{ClaudeCode, vars, "${A}/b", "x/b", ""},
		{ClaudeCode, vars, "${NOPE:-/d}", "/d", ""},
		{ClaudeCode, vars, "${EMPTY:-d}", "", ""},
		{ClaudeCode, vars, "${NOPE}", "", "not set"},
		{ClaudeCode, vars, "$A ${workspaceFolder:-w}", "$A w", ""},
		{VSCode, vars, "${workspaceFolder}/x", "/ws/proj/x", ""},
		{VSCode, vars, "${workspaceFolderBasename}", "proj", ""},
		{VSCode, vars, "${userHome}${/}y${pathSeparator}z", "/h/y/z", ""},
		{VSCode, vars, "${env:A}${env:NOPE}", "x", ""},
		{VSCode, vars, "${input:key}", "", "asked of the user"},
		{VSCode, vars, "${command:pick}", "", "does not know"},
		{VSCode, user, "${workspaceFolder}", "", "no workspace"},
		{Cursor, vars, "${env:A}", "x", ""},
		{ClaudeDesktop, vars, "${A}", "${A}", ""},
	} {
		got, err := c.f.Expand(c.in, c.v)
		if got != c.out && err == nil || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s Expand(%q) = %q, %v; want %q, error %q", c.f, c.in, got, err, c.out, c.err)
		}
	}
}

// TestSetCommand: the new command line keeps the file's layout, and the
// result parses with the entry read as wrapped.
func TestSetCommand(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
	}{
		{"multi-line args",
			"{\n  \"mcpServers\": {\n    \"fs\": {\n      \"command\": \"node\",\n      \"args\": [\n        \"a.js\"\n      ]\n    }\n  }\n}\n",
			"{\n  \"mcpServers\": {\n    \"fs\": {\n      \"command\": \"/bin/mcpwarden\",\n      \"args\": [\n        \"run\",\n        \"--\",\n        \"node\",\n        \"a.js\"\n      ]\n    }\n  }\n}\n"},
		{"one-line args",
			`{"mcpServers": {"fs": {"command": "node", "args": ["a.js"], "env": {"X": "1"}}}}`,
			`{"mcpServers": {"fs": {"command": "/bin/mcpwarden", "args": ["run", "--", "node", "a.js"], "env": {"X": "1"}}}}`},
		{"no args, one line",
			`{"mcpServers": {"fs": {"command": "node"}}}`,
			`{"mcpServers": {"fs": {"command": "/bin/mcpwarden", "args": ["run", "--", "node"]}}}`},
		{"no args, CRLF, comment after",
			"{\r\n  \"servers\": {\r\n    \"fs\": {\r\n      \"type\": \"stdio\",\r\n      \"command\": \"srv\", // the server\r\n    },\r\n  },\r\n}\r\n",
			"{\r\n  \"servers\": {\r\n    \"fs\": {\r\n      \"type\": \"stdio\",\r\n      \"command\": \"/bin/mcpwarden\",\r\n      \"args\": [\"run\", \"--\", \"srv\"], // the server\r\n    },\r\n  },\r\n}\r\n"},
		{"escapes kept",
			`{"mcpServers": {"fs": {"command": "no\u0064e", "args": ["\/srv\/x"]}}}`,
			`{"mcpServers": {"fs": {"command": "/bin/mcpwarden", "args": ["run", "--", "no\u0064e", "\/srv\/x"]}}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			format := ClaudeDesktop
			if strings.Contains(c.in, `"servers"`) {
				format = VSCode
			}
			cfg, err := Parse([]byte(c.in), "x.json", format)
			if err != nil {
				t.Fatal(err)
			}
			e := cfg.Entries[0]
			args := []string{jsonedit.Quote("run"), jsonedit.Quote("--"), cfg.CommandRaw(e)}
			for i := range e.Args {
				args = append(args, cfg.ArgRaw(e, i))
			}
			out, err := jsonedit.Apply(cfg.Doc.Src, cfg.SetCommand(e, jsonedit.Quote("/bin/mcpwarden"), args))
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != c.want {
				t.Errorf("got\n%s\nwant\n%s", out, c.want)
			}
			back, err := Parse(out, "x.json", format)
			if err != nil {
				t.Fatal(err)
			}
			w := back.Entries[0].Wrapped
			if w == nil || w.Command != e.Command || !slices.Equal(w.Args, e.Args) {
				t.Errorf("reads back as %+v", w)
			}
		})
	}
}

// TestHugeFile: a file of many megabytes (Claude Code keeps history next
// to its servers) is read in one pass; one past the limit is refused.
func TestHugeFile(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`{"projects": {`)
	for i := 0; b.Len() < 20<<20; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"/home/a/p` + strings.Repeat("x", 10) + string(rune('a'+i%26)) + `-` + itoa(i) + `": {"history": ["` + strings.Repeat("é", 200) + `"]}`)
	}
	b.WriteString(`}, "mcpServers": {"fs": {"command": "node", "args": ["a.js"]}}}`)
	dir := t.TempDir()
	p := filepath.Join(dir, "claude_desktop_config.json")
	os.WriteFile(p, b.Bytes(), 0o600)
	c, err := Read(p, "")
	if err != nil || len(c.Entries) != 1 {
		t.Fatalf("20 MiB file: %v", err)
	}
	big := filepath.Join(dir, "big.json")
	f, _ := os.Create(big)
	f.Truncate(MaxFileSize + 1)
	f.Close()
	if _, err := Read(big, ClaudeDesktop); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized file: %v", err)
	}
}

func itoa(i int) string { return fmtInt(i) }

func fmtInt(i int) string {
	if i == 0 {
		return "0"
	}
	var d []byte
	for ; i > 0; i /= 10 {
		d = append([]byte{byte('0' + i%10)}, d...)
	}
	return string(d)
}

// FuzzParse: no input panics, and for every file that parses, wrapping
// each stdio entry yields a file that parses to the same servers, wrapped.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/claude-desktop/claude_desktop_config.json", "testdata/vscode/.vscode/mcp.json", "testdata/claude-code/.mcp.json", "testdata/hostile/unicode-names.json"} {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, format := range []Format{ClaudeDesktop, VSCode} {
			c, err := Parse(data, "x.json", format)
			if err != nil {
				continue
			}
			var edits []jsonedit.Edit
			for _, e := range c.Entries {
				if e.Transport != Stdio {
					continue
				}
				args := []string{jsonedit.Quote("run"), jsonedit.Quote("--"), c.CommandRaw(e)}
				for i := range e.Args {
					args = append(args, c.ArgRaw(e, i))
				}
				edits = append(edits, c.SetCommand(e, jsonedit.Quote("/bin/mcpwarden"), args)...)
			}
			out, err := jsonedit.Apply(c.Doc.Src, edits)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse(out, "x.json", format)
			if err != nil {
				t.Fatalf("wrapped file does not parse: %v\n%s", err, out)
			}
			for i, e := range c.Entries {
				be := back.Entries[i]
				if be.Name != e.Name || be.Transport != e.Transport {
					t.Fatalf("entry %d changed: %q %s -> %q %s", i, e.Name, e.Transport, be.Name, be.Transport)
				}
				if e.Transport == Stdio && e.Wrapped == nil && (be.Wrapped == nil || be.Wrapped.Command != e.Command || !slices.Equal(be.Wrapped.Args, e.Args)) {
					t.Fatalf("entry %q does not read back wrapped: %+v", e.Name, be.Wrapped)
				}
			}
		}
	})
}
