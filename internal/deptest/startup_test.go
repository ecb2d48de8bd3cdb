package deptest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoStartupWorkInMcpwarden: every package `mcpwarden` links runs its
// package initialisers at every server launch, so none of ours may compile
// a regular expression or build a table in a package-level variable (use
// sync.OnceValue and compile on first use).
func TestNoStartupWorkInMcpwarden(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-test=false", "-f", `{{if and .Module (eq .Module.Path "`+module+`")}}{{.Dir}}|{{join .GoFiles "|"}}{{end}}`, "./cmd/mcpwarden")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	expensive := map[string]bool{"regexp.MustCompile": true, "regexp.Compile": true, "crc32.MakeTable": true, "template.Must": true}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		parts := strings.Split(line, "|")
		dir := parts[0]
		for _, name := range parts[1:] {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.VAR {
					continue
				}
				// Calls in a package-level initialiser, outside function literals.
				ast.Inspect(gd, func(n ast.Node) bool {
					if _, ok := n.(*ast.FuncLit); ok {
						return false
					}
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
						if x, ok := sel.X.(*ast.Ident); ok && expensive[x.Name+"."+sel.Sel.Name] {
							t.Errorf("%s: %s.%s in a package-level variable runs at every launch; compile it on first use", fset.Position(call.Pos()), x.Name, sel.Sel.Name)
						}
					}
					return true
				})
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d files", checked)
	}
}
