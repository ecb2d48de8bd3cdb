package mcptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// InstallVenvServer makes a virtual environment at venv with python's venv
// module (no pip: PyPI is not reachable) and installs the repository's
// standard-library MCP server (deploy/mcp-servers/python) into it the way
// pip does: the package in site-packages, and a console script whose "#!"
// line names the venv's interpreter. It returns the console script.
func InstallVenvServer(tb testing.TB, python, venv string) string {
	tb.Helper()
	if out, err := exec.Command(python, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		testenv.Missing(tb, "python3 -m venv (python3-venv): "+string(out))
	}
	out, err := exec.Command(python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		tb.Fatal(err)
	}
	pkg := filepath.Join(testenv.RepoRoot(), "deploy", "mcp-servers", "python", "mcp_stdlib_server")
	site := filepath.Join(venv, "lib", "python"+strings.TrimSpace(string(out)), "site-packages", filepath.Base(pkg))
	files, err := filepath.Glob(filepath.Join(pkg, "*.py"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("python server package %s: %v", pkg, err)
	}
	script := filepath.Join(venv, "bin", "mcp-stdlib-server")
	m := map[string]string{
		script: "#!" + filepath.Join(venv, "bin", "python3") + "\nimport sys\nfrom mcp_stdlib_server.server import main\nif __name__ == '__main__':\n    sys.exit(main())\n",
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		m[filepath.Join(site, filepath.Base(f))] = string(b)
	}
	testenv.WriteFiles(tb, m)
	if err := os.Chmod(script, 0o755); err != nil {
		tb.Fatal(err)
	}
	return script
}
