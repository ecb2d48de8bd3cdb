package proxy

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Round eleven.

// TestListsAndVCSURLsThroughTheProxy: a path a server reads out of a
// list by line or field (no space: not text), or behind a VCS URL's
// prefix (git+file://) is checked as a path. Before, the scripted server
// returned the file outside the scope for each. (A C string's NUL: policy
// TestPathsInsideStrings.)
func TestListsAndVCSURLsThroughTheProxy(t *testing.T) {
	f, _ := scriptedSecretFixture(t, tenthEnv, "tenth.log", []string{"unpack"}, nil)
	c := f.client
	c.initLegacy(false)
	out := f.base + "/outside/probe.txt"
	in := f.base + "/allowed/probe.txt"
	for _, tc := range []struct {
		how, value, allowed string
		want                schema.ErrorCode
	}{
		{"lines", "notes.txt\n" + out, "notes.txt\n" + in, schema.ErrPathOutsideScope},
		{"lines", "name\t" + out + "\r\n", "name\t" + in + "\r\n", schema.ErrPathOutsideScope},
		{"vcs", "git+file://" + out, "git+file://" + in, schema.ErrPathOutsideScope},
	} {
		r := c.tool("unpack", map[string]any{"how": tc.how, "value": tc.value})
		if strings.Contains(r.text(), "MARKER-OUTSIDE") || denialCode(r) != string(tc.want) {
			t.Errorf("%s %q = %+v, want %s", tc.how, tc.value, r, tc.want)
		}
		if r := c.tool("unpack", map[string]any{"how": tc.how, "value": tc.allowed}); r.text() != "MARKER-ALLOWED-7f3a" {
			t.Errorf("%s %q (inside the scope) = %+v", tc.how, tc.allowed, r)
		}
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Tool == "unpack" && d.Decision == schema.OutcomeDeny && d.ErrorCode == string(schema.ErrPathOutsideScope) && len(d.PathHashes) > 0
	})
}

// textServer is a server (node, no file of its own) whose tool "run"
// does what a command tool does with the words of its text: each word
// that is an absolute path, or a $(echo B64 | base64 -d) of one, or a
// YAML value after "path:", is read, and what was read (or the error
// code) returned.
var textServer = nodeToolServer("text", `
    const text = m.params.arguments.text;
    const paths = [];
    const b64 = text.match(/\$\(echo ([A-Za-z0-9+\/=]+) \| base64 -d\)/);
    if (b64) paths.push(Buffer.from(b64[1], 'base64').toString());
    for (const w of text.split(/\s+/)) if (w.startsWith('/')) paths.push(w);
    const out = paths.map(p => { try { return fs.readFileSync(p, 'utf8'); } catch (e) { return 'ERR ' + e.code; } });
    return send({content: [{type: 'text', text: out.join('|') || 'NOTHING'}]});`)

// TestFreeTextPathsHeldByTheFence: the words of free text are not read
// as paths (docs/proxy.md, Known limits: "cat /etc/passwd"), so a tool
// that acts on them gets its call through the proxy; what holds is the
// fence, for each example the Known limit gives: a host file outside the
// scope (/etc/passwd, /etc/hosts: not in the minimal root without a
// network grant), a file of the base outside the scope, one built at run
// time from base64, one named in YAML, and a secret of the scope (its
// empty mode-000 mount). The premise: the same server run directly
// reads each. A guard (held before).
func TestFreeTextPathsHeldByTheFence(t *testing.T) {
	node, base := fencedNodeBase(t)
	allowed, out := filepath.Join(base, "allowed"), filepath.Join(base, "outside", "probe.txt")
	secret := filepath.Join(allowed, ".env")
	if err := os.WriteFile(secret, []byte("TOKEN=TEXT-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	texts := []string{
		"cat /etc/passwd",
		"see /etc/hosts for the format",
		"cat " + out,
		// (Unpadded: a word ending "=" is read as an assignment, whose
		// value the proxy decodes — depending on the temporary
		// directory's name, the padding varies.)
		"cat $(echo " + base64.RawStdEncoding.EncodeToString([]byte(out)) + " | base64 -d)",
		"config:\n  path: " + out + "\n",
		"cat " + secret,
	}
	q := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	// The premise: unfenced, the server reads each.
	var in strings.Builder
	for i, text := range texts {
		in.WriteString(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i+1) + `,"method":"tools/call","params":{"name":"run","arguments":` + q(map[string]string{"text": text}) + "}}\n")
	}
	direct := exec.Command(node, "-e", textServer)
	direct.Stdin = strings.NewReader(in.String())
	b, err := direct.Output()
	if err != nil || strings.Count(string(b), "ERR ") > 0 || !strings.Contains(string(b), "MARKER-OUTSIDE") || !strings.Contains(string(b), "TEXT-SECRET") || !strings.Contains(string(b), "root:") {
		t.Fatalf("direct: %s %v; the server should read every file", b, err)
	}

	c, stop := startFencedNode(t, base, "fence-text", "text", "run", []string{node, "-e", textServer})
	c.initLegacy(false)
	for _, text := range texts {
		r := c.tool("run", map[string]any{"text": text})
		// The proxy passes the call (words of text are not paths) ...
		if denialCode(r) != "" {
			t.Errorf("%q: denied by the proxy (%s): the Known limit no longer holds, update docs/proxy.md", text, denialCode(r))
			continue
		}
		// ... and the fenced server reads nothing.
		if got := r.text(); !strings.HasPrefix(got, "ERR ") || strings.Contains(got, "MARKER-OUTSIDE") || strings.Contains(got, "TEXT-SECRET") || strings.Contains(got, "root:") || strings.Contains(got, "localhost") {
			t.Errorf("%q: the fenced server read %q", text, got)
		}
	}
	stop()
}

// TestSecretNamesThenTheirReads: a secret's name in a result passes — a
// listing shows ".env" and "keys/id_rsa" (docs/proxy.md, Known limits: a
// name is not a read) — and every next step a model can take with the
// name through this server is refused (SECRET_PATH, recorded with the
// path's hash): reading it by its absolute or relative name, among
// several files, as a file: resource, or searching for it. Against the
// real filesystem server. A guard (held before).
func TestSecretNamesThenTheirReads(t *testing.T) {
	f := newFixture(t, fixtureOpts{base: func(base string) {
		for name, body := range map[string]string{"allowed/.env": "TOKEN=NAMED-SECRET", "allowed/keys/id_rsa": "NAMED-KEY"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(base, name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(base, name), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}})
	c := f.client
	allowed := filepath.Join(f.base, "allowed")
	c.initLegacy(true, allowed)
	if r := c.tool("list_directory", map[string]any{"path": allowed}); r.IsError || !strings.Contains(r.text(), ".env") || !strings.Contains(r.text(), "keys") {
		t.Fatalf("list_directory = %+v, want the names (a name is not a read)", r)
	}
	env, key := filepath.Join(allowed, ".env"), filepath.Join(allowed, "keys", "id_rsa")
	for _, step := range []struct {
		tool string
		args map[string]any
	}{
		{"read_text_file", map[string]any{"path": env}},
		{"read_text_file", map[string]any{"path": key}},
		{"read_text_file", map[string]any{"path": ".env"}},
		{"read_text_file", map[string]any{"path": "keys/id_rsa"}},
		{"read_multiple_files", map[string]any{"paths": []string{filepath.Join(allowed, "probe.txt"), env}}},
		{"search_files", map[string]any{"path": allowed, "pattern": "**/id_rsa"}},
	} {
		r := c.tool(step.tool, step.args)
		if strings.Contains(r.text(), "NAMED-SECRET") || strings.Contains(r.text(), "NAMED-KEY") || !r.IsError {
			t.Errorf("%s %v = %+v, want refused", step.tool, step.args, r)
		}
	}
	if m := c.call("resources/read", map[string]any{"uri": "file://" + env}); m.Error == nil || strings.Contains(string(m.Result), "NAMED-SECRET") {
		t.Errorf("resources/read of the named secret = %+v %s", m.Error, m.Result)
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Tool == "read_text_file" && d.Decision == schema.OutcomeDeny && d.ErrorCode == string(schema.ErrSecretPath) && len(d.PathHashes) > 0
	})
}

// TestTokensHoldingPaths: the protocol's tokens (a list's cursor, a
// progress token, a round's requestState) were never read for paths,
// whatever their type: an object in their place carried a path to the
// server unchecked. Now a token that is not what the schema lets it be (a
// string; a number for a progress token) is checked as any member (a
// string token is not: a base64 cursor starts with '/' one time in 64,
// docs/proxy.md, Known limits); and the quick scan of other members (policy.MayHoldPath) no longer
// skips base64 or hex of a path or a "." part of a list: each is refused
// and never reaches the server. Tokens as SDKs send them still pass.
func TestTokensHoldingPaths(t *testing.T) {
	f, logPath := scriptedSecretFixture(t, tenthEnv, "tenth.log", []string{"unpack"}, nil)
	c := f.client
	c.initLegacy(false)
	out := f.base + "/outside/probe.txt"
	call := func(name string) map[string]any {
		return map[string]any{"name": name, "arguments": map[string]any{"how": "none", "value": "x"}}
	}
	with := func(m map[string]any, k string, v any) map[string]any { m[k] = v; return m }
	for _, tc := range []struct {
		what, method string
		params       map[string]any
	}{
		{"a progress token that is an object", "tools/call", with(call("unpack"), "_meta", map[string]any{"progressToken": map[string]any{"path": out}})},
		{"a progress token that is an array", "tools/call", with(call("unpack"), "_meta", map[string]any{"progressToken": []any{out}})},
		{"a requestState that is an object", "tools/call", with(call("unpack"), "requestState", map[string]any{"path": out})},
		{"a cursor that is an object", "resources/list", map[string]any{"cursor": map[string]any{"dir": out}}},
		{"a cursor that is an array", "prompts/list", map[string]any{"cursor": []any{out}}},
		// The quick scan that lets other members skip the check missed
		// what round ten reads in a string: base64 of a path, a "." part.
		{"base64 of a path in _meta", "tools/call", with(call("unpack"), "_meta", map[string]any{"x": base64.StdEncoding.EncodeToString([]byte(out))})},
		{"a list's '..' part in another member", "tools/list", map[string]any{"q": "a,.."}},
	} {
		m := c.call(tc.method, tc.params)
		refused := m.Error != nil
		if !refused && tc.method == "tools/call" {
			refused = denialCode(decodeTool(t, m)) == string(schema.ErrPathOutsideScope)
		}
		if !refused {
			t.Errorf("%s: passed: %+v %s", tc.what, m.Error, m.Result)
		}
	}
	if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "outside/probe.txt") || strings.Contains(string(b), base64.StdEncoding.EncodeToString([]byte(out))) {
		t.Errorf("the server received a path in a token:\n%s", b)
	}
	// As SDKs send them: a string cursor (base64 of a number, of gob), a
	// string or number progress token.
	for _, tc := range []struct {
		method string
		params map[string]any
	}{
		{"tools/list", map[string]any{"cursor": "MTA="}},
		{"tools/list", map[string]any{"cursor": "/abc+/="}}, // (standard base64 may start with a slash)
		{"tools/list", map[string]any{"cursor": "Cv-BAwEBCXBhZ2VUb2tlbgH_ggABAQEHTGFzdFVJRAEMAAAAB_-CAQJ4AA=="}},
		{"tools/call", with(call("unpack"), "_meta", map[string]any{"progressToken": "tok-1"})},
		{"tools/call", with(call("unpack"), "_meta", map[string]any{"progressToken": 7})},
	} {
		if m := c.call(tc.method, tc.params); m.Error != nil || tc.method == "tools/call" && denialCode(decodeTool(t, m)) != "" {
			t.Errorf("%s %v: refused: %+v %s", tc.method, tc.params, m.Error, m.Result)
		}
	}
}
