package launcher_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// Session 12's attacks on the fence: what leaked (each fails on the code
// before) and the guards that held.

// TestFenceOtherInterpreterScriptOutsideTheWriteScope: a server started as
// "perl server.pl" or "awk -f server.awk" whose script lay in its write
// scope rewrote the script, and the next run ran the new code: the runtime
// profile knew the operands of sh, bash, node and python only. Now the
// operand of perl, ruby, php, lua, Rscript, awk -f and tclsh is the
// server's code, granted for reading and refused in a write scope (exit
// 70, naming it); a script outside the scope runs. Both layerings.
func TestFenceOtherInterpreterScriptOutsideTheWriteScope(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceOtherInterpreterScript)
}

func testFenceOtherInterpreterScript(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	cases := []struct {
		name string
		// command runs script; source is a script that answers "v1" to
		// its first line and rewrites itself (at path) to answer "v2".
		command func(interp, script string) []string
		interp  string
		source  func(path string) string
	}{
		{
			name:    "perl server.pl",
			interp:  "perl",
			command: func(interp, script string) []string { return []string{interp, script} },
			source: func(path string) string {
				return fmt.Sprintf(`$| = 1; my $l = <STDIN>;
if (open(my $f, '>', %q)) { print $f "\$| = 1; my \$l = <STDIN>; print \"v2\\n\";\n"; close $f; }
print "v1\n";
`, path)
			},
		},
		{
			name:    "awk -f server.awk",
			interp:  "awk",
			command: func(interp, script string) []string { return []string{interp, "-f", script} },
			// mawk reads its input in blocks until EOF: the program
			// answers at once, without reading the line sent, and then
			// rewrites itself (awk ends on a refused write).
			source: func(path string) string {
				return fmt.Sprintf(`BEGIN { print "v1"; fflush(); printf "BEGIN { print \"v2\"; fflush() }\n" > %q; close(%q) }
`, path, path)
			},
		},
	}
	for _, c := range cases {
		interp := testenv.RequireCommand(t, c.interp)
		for _, inScope := range []bool{true, false} {
			name := c.name + " in its write scope"
			if !inScope {
				name = c.name + " outside the scope (runs)"
			}
			t.Run(name, func(t *testing.T) {
				w := newWorkspace(t)
				dir := w.allowed
				if !inScope {
					dir = t.TempDir()
				}
				script := filepath.Join(dir, "server.code")
				testenv.WriteFiles(t, map[string]string{script: c.source(script)})
				scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
				o := fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS, Command: c.command(interp, script)}
				if !inScope {
					first, s := answerOnce(t, b, o)
					s.Close()
					next, s2 := answerOnce(t, b, o)
					s2.Close()
					if first != "v1" || next != "v1" {
						t.Fatalf("answers %q, %q, want v1 twice (the script read, its rewrite refused): %s", first, next, s.Stderr()+s2.Stderr())
					}
					return
				}
				checkPlantedCodeRefused(t, b, o, plantedCode{want: []string{"code the server runs", "writable paths"}, naming: "the script", planted: "planted", withStderr: true})
			})
		}
	}
}
