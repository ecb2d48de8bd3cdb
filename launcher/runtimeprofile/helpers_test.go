package runtimeprofile

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

func TestScriptCommands(t *testing.T) {
	script := `#!/bin/sh
# git log is only a comment
set -eu
DIR=$(dirname "$0")
export FOO=1
if [ -n "$X" ]; then jq -r . file | sort -u; fi
exec env LANG=C nice -n 5 python3 "$DIR/server.py" "$@"
"$DIR"/local-helper --x
./relative-tool
for f in a b; do cat "$f"; done
timeout 5 git status && echo ok || true
`
	got := scriptCommands(script)
	want := []string{"dirname", "jq", "sort", "python3", "cat", "git"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("scriptCommands = %q, want %q", got, want)
	}
}

// TestResolveShellScript: a shell script server gets its interpreter and
// the programs it runs; --allow-exec adds a helper with its data files.
func TestResolveShellScript(t *testing.T) {
	dir := t.TempDir()
	s := filepath.Join(dir, "server.sh")
	testenv.WriteFiles(t, map[string]string{s: "#!/bin/sh\nwhile read -r line; do printf '%s\\n' \"$line\" | tr a-z A-Z; done\n"})
	if err := os.Chmod(s, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := Resolve([]string{s}, Options{PATH: "/usr/bin:/bin", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	m := entryPaths(p)
	tr, _ := filepath.EvalSymlinks("/usr/bin/tr")
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	if p.Kind != KindShell || m[tr] != ClassExec || m[sh] != ClassExec {
		t.Errorf("kind %s entries %v", p.Kind, m)
	}
	gitPath, err := filepath.EvalSymlinks("/usr/bin/git")
	if err != nil {
		testenv.Missing(t, "git is not installed")
	}
	p, err = Resolve([]string{s}, Options{PATH: "/usr/bin:/bin", Dir: dir, Exec: []string{"git"}})
	if err != nil {
		t.Fatal(err)
	}
	m = entryPaths(p)
	if m[gitPath] != ClassExec || p.Kind != KindShell {
		t.Errorf("--allow-exec git: kind %s, entries %v", p.Kind, m)
	}
	if st, err := os.Stat("/usr/lib/git-core"); err == nil && st.IsDir() && m["/usr/lib/git-core"] != ClassExecTree {
		t.Errorf("git's programs not granted: %v", m)
	}
	if _, err := Resolve([]string{s}, Options{PATH: "/usr/bin:/bin", Dir: dir, Exec: []string{"no-such-helper-xyz"}}); err == nil || !strings.Contains(err.Error(), "--allow-exec") {
		t.Errorf("unknown helper: %v", err)
	}
}

// FuzzScriptCommands: only bare program names come out.
func FuzzScriptCommands(f *testing.F) {
	f.Add("a | b; c && d\nexec env X=1 e\n")
	f.Add("$(x) `y` \"z\" ../w")
	f.Fuzz(func(t *testing.T, text string) {
		cmds := scriptCommands(text)
		if len(cmds) > maxHelpers {
			t.Fatalf("%d commands", len(cmds))
		}
		for _, c := range cmds {
			if !isProgramName(c) || strings.ContainsAny(c, "/$`\"' ") {
				t.Fatalf("command %q", c)
			}
		}
	})
}

// FuzzScriptCodeWords (review, session 12): the words of the commands a
// shell script of the server runs or sources — the script may lie where
// the server wrote it, and is read before any refusal — come out bounded,
// each a source with its operand or a bare program name with arguments.
func FuzzScriptCodeWords(f *testing.F) {
	f.Add("#!/bin/sh\n. ./lib.sh\nsource lib2.sh # c\nFOO=1 exec env NODE_ENV=x node srv.js \"$@\"\n")
	f.Add("perl tool.pl 2>/dev/null; awk -f x.awk | sh inner.sh && python3 -m x\n")
	f.Fuzz(func(t *testing.T, text string) {
		out := scriptCodeWords(text)
		if len(out) > maxHelpers {
			t.Fatalf("%d commands", len(out))
		}
		for _, w := range out {
			if len(w) < 2 || w[0] != "." && w[0] != "source" && !isProgramName(w[0]) {
				t.Fatalf("words %q", w)
			}
		}
	})
}
