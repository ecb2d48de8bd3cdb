package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Naive drives a process that speaks internal/naiveserver's protocol on its
// stdin and stdout, one JSON request per line and one answer per line:
// usually `mcpwarden run ... -- naiveserver`.
type Naive struct {
	Cmd *exec.Cmd
	// Log is the process's stderr.
	Log *LockedBuffer
	// Context, when set, is added to every failure message (a daemon's log).
	Context func() string

	tb    testing.TB
	stdin io.WriteCloser
	lines *bufio.Scanner
	done  bool
}

// StartNaive starts cmd with its stdin and stdout piped to the test and its
// stderr in Log. Unless Wait or Finish was called, its stdin is closed and
// it is waited for when the test ends.
func StartNaive(tb testing.TB, cmd *exec.Cmd) *Naive {
	tb.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	r := &Naive{Cmd: cmd, Log: &LockedBuffer{}, tb: tb, stdin: stdin, lines: bufio.NewScanner(stdout)}
	r.lines.Buffer(make([]byte, 64<<10), 1<<20)
	cmd.Stderr = r.Log
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if !r.done {
			_ = r.Wait()
		}
	})
	return r
}

// Do sends one request and returns its answer line; a failed send or a
// missing answer fails the test with the process's log.
func (r *Naive) Do(req string) string {
	r.tb.Helper()
	if _, err := io.WriteString(r.stdin, req+"\n"); err != nil {
		r.tb.Fatalf("send %s: %v (run log: %s)%s", req, err, r.Log.String(), r.context())
	}
	if !r.lines.Scan() {
		r.tb.Fatalf("no answer to %s (run log: %s)%s", req, r.Log.String(), r.context())
	}
	return r.lines.Text()
}

// Wait closes the process's stdin (the naive server exits at its end) and
// waits for it to exit.
func (r *Naive) Wait() error {
	r.done = true
	r.stdin.Close()
	return r.Cmd.Wait()
}

// Finish is Wait, failing the test unless the process exited 0.
func (r *Naive) Finish() {
	r.tb.Helper()
	if err := r.Wait(); err != nil {
		r.tb.Fatalf("%s %v: %v\n%s%s", filepath.Base(r.Cmd.Path), r.Cmd.Args[1:min(len(r.Cmd.Args), 4)], err, r.Log.String(), r.context())
	}
}

func (r *Naive) context() string {
	if r.Context == nil {
		return ""
	}
	return "\n" + r.Context()
}

// RunNaive starts cmd, sends it each request in turn and finishes it,
// returning the answers and the process's log.
func RunNaive(tb testing.TB, cmd *exec.Cmd, reqs ...string) (answers []string, log string) {
	tb.Helper()
	r := StartNaive(tb, cmd)
	for _, req := range reqs {
		answers = append(answers, r.Do(req))
	}
	r.Finish()
	return answers, r.Log.String()
}

// NaiveRead is the naive server's request to read path.
func NaiveRead(path string) string {
	b, _ := json.Marshal(map[string]string{"op": "read", "path": path})
	return string(b)
}

// Tree is the files the end-to-end tests lay out under the test's
// temporary directory (Root, symlinks resolved: the paths as Landlock and
// the daemon see them): the daemon's State dir and Socket, the run's Base
// with the scope's workspace WS holding Inside (ws/a.txt, "inside"), a
// Secret outside the base (outside/secret.txt, "OUTSIDE-SECRET"), and the
// Scope file.
type Tree struct {
	Root, State, Socket, Base, WS, Inside, Secret, Scope string
}

// NewTree writes a Tree under a new temporary directory whose scope file
// holds scope (ReadScope gives the usual one).
func NewTree(tb testing.TB, scope string) *Tree {
	tb.Helper()
	root, err := filepath.EvalSymlinks(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return NewTreeAt(tb, root, scope)
}

// NewTreeAt is NewTree under root, a directory the test made already
// (symlinks resolved).
func NewTreeAt(tb testing.TB, root, scope string) *Tree {
	tb.Helper()
	base := filepath.Join(root, "base")
	tr := &Tree{Root: root, State: filepath.Join(root, "state"), Socket: filepath.Join(root, "run", "daemon.sock"),
		Base: base, WS: filepath.Join(base, "ws"), Inside: filepath.Join(base, "ws", "a.txt"),
		Secret: filepath.Join(root, "outside", "secret.txt"), Scope: filepath.Join(root, "scope.json")}
	WriteFiles(tb, map[string]string{tr.Inside: "inside", tr.Secret: "OUTSIDE-SECRET", tr.Scope: scope})
	return tr
}

// ReadScope is a scope that grants reading the tree's workspace (ws) with
// read_text_file, without approval, for 30 minutes.
func ReadScope(id string) string {
	return `{"scope_id":"` + id + `","allowed_paths":["ws"],"resource_refs":[],"access_mode":"read","tool_allowlist":["read_text_file"],"approval":"none","expires_after_minutes":30}`
}

// Events reads every event `mcpwarden events --json` prints with args (the
// NATS URL and credentials).
func Events(tb testing.TB, bin string, args ...string) []schema.Event {
	tb.Helper()
	out, err := exec.Command(bin, append([]string{"events", "--json"}, args...)...).Output()
	if err != nil {
		tb.Fatalf("mcpwarden events: %v", err)
	}
	var evs []schema.Event
	for _, line := range bytes.Split(out, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e schema.Event
		if err := json.Unmarshal(line, &e); err != nil {
			tb.Fatalf("events --json printed %q: %v", line, err)
		}
		evs = append(evs, e)
	}
	return evs
}
