// Package scripts holds the tests of the repository's scripts: `make
// demo` (scripts/demo.sh) run as it is, as root and as an ordinary user.
package scripts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

const secret = "sk-DEMO-SECRET-0000" // scripts/demo.sh's private/credentials.txt

// demo runs scripts/demo.sh with the binaries under test (cmd, a prefix
// such as setpriv, before it) and its temporary directory in tmp; it
// returns the output, failing the test when the demo fails.
func demo(t *testing.T, tmp string, prefix ...string) string {
	t.Helper()
	root := testenv.RepoRoot()
	testenv.RequireCommand(t, "node")
	testenv.RequireFile(t, filepath.Join(root, "deploy/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"), "run scripts/test-env.sh install-npm")
	argv := append(prefix, "env", "MCPWARDEN_BIN="+testenv.Mcpwarden(t), "TMPDIR="+tmp, "MCPWARDEN_DEMO_PROBE_TIMEOUT=5m", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME="+tmp, filepath.Join(root, "scripts/demo.sh"))
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out.String())
	}
	// Everything it made is gone.
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		if strings.HasPrefix(e.Name(), "mcpwarden-demo.") {
			t.Errorf("the demo left %s behind", e.Name())
		}
	}
	s := out.String()
	if strings.Contains(s, secret) {
		t.Errorf("the secret outside the scope reached the output:\n%s", s)
	}
	return s
}

// shortTempDir is a temporary directory with a short path: the demo's
// runs put unix sockets (at most 107 bytes of path) under it, and
// t.TempDir's names are long.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "mwdemo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// wantInOrder fails unless every want occurs in s, in this order.
func wantInOrder(t *testing.T, s string, wants ...string) {
	t.Helper()
	rest := s
	for _, w := range wants {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("the demo's output lacks %q (after the ones before it):\n%s", w, s)
		}
		rest = rest[i+len(w):]
	}
}

// The part every user sees: wrap, the allowed read, the escape denied by
// the proxy and, with the proxy off, by the kernel.
var common = []string{
	"1) mcpwarden wrap",
	`+      "args": ["run", "--scope"`,
	"A reviewer narrows it to the project",
	`[allowed] read project/docs/plan.txt -> "Quarterly plan: ship the fence."`,
	"[denied]  read private/credentials.txt -> refused by the proxy",
	"PATH_OUTSIDE_SCOPE",
	"--proxy=false",
	`[allowed] read project/docs/plan.txt -> "Quarterly plan: ship the fence."`,
	"[denied]  read private/credentials.txt -> the server tried",
}

// TestDemoAsRoot runs `make demo`'s script as root: the daemon with its
// embedded NATS, the wrapped real server, and the audit-mode canary whose
// escape becomes an ESCAPE finding in `mcpwarden events`; with the test
// ClickHouse (scripts/test-env.sh up, 127.0.0.1:9000) it must end with
// `query runs` and `query findings` showing the canary's run and finding.
func TestDemoAsRoot(t *testing.T) {
	testenv.RequireRoot(t)
	out := demo(t, shortTempDir(t))
	wantInOrder(t, out, append([]string{"mcpwarden demo (as root)", "0) The daemon", "answering; runs register there"}, common...)...)
	wantInOrder(t, out,
		"3) A canary",
		"[escape]  read private/credentials.txt -> the canary read it",
		"mcpwarden events --kind finding",
		" ESCAPE ",
		"reason=succeeded_outside_scope",
	)
	if !strings.Contains(out, "A ClickHouse answers at") {
		if testenv.InCI() {
			t.Fatalf("CI: the demo found no ClickHouse at 127.0.0.1:9000 (scripts/test-env.sh up starts it):\n%s", out)
		}
		t.Logf("no ClickHouse: the demo ended with events\n%s", out)
		return
	}
	wantInOrder(t, out,
		"4) In ClickHouse",
		"RUN_ID", "VERDICT", "audit", "ESCAPE",
		"SEVERITY", "FINDING_TYPE", "high", "ESCAPE",
		"in events and in ClickHouse.",
	)
}

// TestDemoAsUser runs it as nobody: no daemon, and the demo says what root
// adds.
func TestDemoAsUser(t *testing.T) {
	testenv.RequireRoot(t) // to become nobody
	setpriv := testenv.RequireCommand(t, "setpriv")
	as := []string{setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"}
	root := testenv.RepoRoot()
	// nobody must reach the checkout and the binaries; a checkout under a
	// private home is not a missing dependency but where CI put it.
	check := exec.Command(as[0], append(as[1:], "test", "-r", filepath.Join(root, "scripts/demo-client.mjs"), "-a", "-x", testenv.Mcpwarden(t))...)
	if err := check.Run(); err != nil {
		t.Skipf("nobody cannot read %s or run %s (%v): the checkout is private", root, testenv.Mcpwarden(t), err)
	}
	tmp := shortTempDir(t)
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	out := demo(t, tmp, as...)
	wantInOrder(t, out, append([]string{"mcpwarden demo (as nobody, not root)"}, common...)...)
	wantInOrder(t, out,
		"The proxy's decision records",
		"read_text_file read allow path=",
		"read_text_file read deny PATH_OUTSIDE_SCOPE path=",
		"As root, 'make demo' also runs the daemon",
	)
	for _, never := range []string{"0) The daemon", "3) A canary", "4) In ClickHouse"} {
		if strings.Contains(out, never) {
			t.Errorf("as nobody the demo claims %q:\n%s", never, out)
		}
	}
}
