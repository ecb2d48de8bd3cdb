package main

import (
	"bytes"
	"errors"
	"flag"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/cli"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/help")

// helpInvocations are the help screens with a golden file each: the
// command list, and every command's --help.
var helpInvocations = [][]string{
	{"help"},
	{"run", "--help"},
	{"scope", "--help"},
	{"scope", "check", "--help"},
	{"daemon", "--help"},
	{"events", "--help"},
	{"approve", "--help"},
	{"collect", "--help"},
	{"query", "--help"},
	{"why", "--help"},
	{"version", "--help"},
	{"config", "--help"},
	{"config", "show", "--help"},
	{"wrap", "--help"},
	{"unwrap", "--help"},
	{"profile", "--help"},
	{"profile", "learn", "--help"},
}

// cleanEnv is an environment in which no configuration file or variable of
// the machine running the test changes what a command does: an empty
// configuration file of its own.
func cleanEnv(t *testing.T) []string {
	home := t.TempDir()
	cfg := filepath.Join(home, "config.json")
	if err := os.WriteFile(cfg, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".state"), "MCPWARDEN_CONFIG=" + cfg}
}

func runBin(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(mcpwardenBin(t), args...)
	cmd.Env = env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%v: %v", args, err)
	}
	return o.String(), e.String(), code
}

func goldenName(args []string) string {
	var parts []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			parts = append(parts, a)
		}
	}
	return filepath.Join("testdata", "help", strings.Join(parts, "_")+".golden")
}

// TestHelpGolden: each help screen goes to stdout, exits 0, writes nothing
// to stderr, and is what its golden file says (go test -run TestHelpGolden
// -update rewrites them).
func TestHelpGolden(t *testing.T) {
	env := cleanEnv(t)
	for _, args := range helpInvocations {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, errOut, code := runBin(t, env, args...)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			golden := goldenName(args)
			if *update {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestHelpGolden -update)", err)
			}
			if out != string(want) {
				t.Errorf("help differs from %s (rerun with -update if intended):\n--- got\n%s\n--- want\n%s", golden, out, want)
			}
		})
	}
}

// TestEveryCommandHasHelp: a command added to the table without a golden
// help screen fails here, and so does a help screen that lists no flags
// although the command has them (scope check once printed none).
func TestEveryCommandHasHelp(t *testing.T) {
	names := slices.Collect(maps.Keys(commands))
	for _, p := range cli.PipelineCommands {
		names = append(names, p.Name)
	}
	for _, name := range names {
		if !slices.ContainsFunc(helpInvocations, func(a []string) bool { return a[0] == name }) {
			t.Errorf("command %q has no golden help screen in helpInvocations", name)
		}
	}
	flagLine := regexp.MustCompile(`(?m)^  -[a-z]`)
	for _, args := range helpInvocations {
		if args[0] == "help" || args[0] == "version" || ((args[0] == "scope" || args[0] == "config" || args[0] == "profile") && len(args) == 2) {
			continue
		}
		b, err := os.ReadFile(goldenName(args))
		if err != nil {
			t.Fatal(err)
		}
		if !flagLine.Match(b) || !strings.Contains(string(b), "\nflags:\n") {
			t.Errorf("%v: the help screen lists no flags", args)
		}
	}
}

// TestHelpForms: help, -h, --help and 'help COMMAND' print to stdout and
// exit 0; no arguments or an unknown command is a usage error on stderr.
func TestHelpForms(t *testing.T) {
	env := cleanEnv(t)
	top, _, _ := runBin(t, env, "help")
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}} {
		out, errOut, code := runBin(t, env, args...)
		if code != 0 || errOut != "" || out != top {
			t.Errorf("%v: exit %d stderr %q, stdout equal to 'help': %v", args, code, errOut, out == top)
		}
	}
	runHelp, _, _ := runBin(t, env, "run", "--help")
	for _, args := range [][]string{{"help", "run"}, {"run", "-h"}} {
		out, errOut, code := runBin(t, env, args...)
		if code != 0 || errOut != "" || out != runHelp {
			t.Errorf("%v: exit %d stderr %q, same as run --help: %v", args, code, errOut, out == runHelp)
		}
	}
	for _, args := range [][]string{{}, {"nope"}, {"help", "nope"}, {"run", "--nope"}, {"scope", "check", "--nope"}} {
		out, errOut, code := runBin(t, env, args...)
		if code != cli.ExitUsage || out != "" || errOut == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 64, nothing on stdout, a message on stderr", args, code, out, errOut)
		}
	}
}

// TestVersion: --version and 'version' print the same line.
func TestVersion(t *testing.T) {
	env := cleanEnv(t)
	a, _, c1 := runBin(t, env, "--version")
	b, _, c2 := runBin(t, env, "version")
	if c1 != 0 || c2 != 0 || a != b || !regexp.MustCompile(`^mcpwarden \S+\n$`).MatchString(a) {
		t.Errorf("--version %q (exit %d), version %q (exit %d)", a, c1, b, c2)
	}
}

// TestPipelineCommandsExecTheSecondProgram: daemon, collect, query, events
// and why are mcpwarden-pipeline's; through mcpwarden their usage errors
// keep their exit status and stream, and without mcpwarden-pipeline next
// to mcpwarden each fails with a message naming where it looked and how to
// fix it (no fallback, no search of $PATH).
func TestPipelineCommandsExecTheSecondProgram(t *testing.T) {
	env := cleanEnv(t)
	for _, p := range cli.PipelineCommands {
		name := p.Name
		if name == "profile" {
			name = "profile learn" // its one subcommand holds the flags
		}
		out, errOut, code := runBin(t, env, append(strings.Fields(name), "--no-such-flag")...)
		if code != cli.ExitUsage || out != "" || !strings.Contains(errOut, "mcpwarden "+name+" --help") {
			t.Errorf("%s --no-such-flag: exit %d, stdout %q, stderr %q; want 64 and a pointer to its --help on stderr", p.Name, code, out, errOut)
		}
	}

	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(dir, "mcpwarden")
	b, err := os.ReadFile(mcpwardenBin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	// A mcpwarden-pipeline on $PATH must not be used in its place.
	pathDir := filepath.Dir(mcpwardenBin(t))
	env = append(env[1:], "PATH="+pathDir+":"+os.Getenv("PATH"))
	missing := filepath.Join(dir, cli.PipelineName)
	// A run whose records go to NATS is the second program's too; nothing
	// starts without it.
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	scope := filepath.Join(t.TempDir(), "scope.json")
	if err := os.WriteFile(scope, []byte(`{"scope_id":"nats","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["x"],"approval":"none","expires_after_minutes":5}`), 0o600); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(base, "started")
	natsRun := []string{"run", "--nats", "nats://127.0.0.1:1", "--daemon-socket", "off", "--state-dir", filepath.Join(t.TempDir(), "state"), "--scope", scope, "--base", base, "--", "/bin/sh", "-c", "touch " + marker}
	for _, args := range [][]string{{"daemon"}, {"why", "run-1"}, {"help", "query"}, {"collect", "--help"}, {"profile", "learn", "--", "true"}, natsRun} {
		cmd := exec.Command(lone, args...)
		cmd.Env = env
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitInternal || o.Len() != 0 ||
			!strings.Contains(e.String(), missing) || !strings.Contains(e.String(), "make build") {
			t.Errorf("%v without %s: %v, stdout %q, stderr %q; want exit 71 naming %s and 'make build'", args, cli.PipelineName, err, o.String(), e.String(), missing)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("run --nats without %s started the server", cli.PipelineName)
	}
	cmd := exec.Command(lone, "help")
	cmd.Env = env
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "daemon") {
		t.Errorf("help without %s: %v, %q: the command list must not need it", cli.PipelineName, err, out)
	}
}
