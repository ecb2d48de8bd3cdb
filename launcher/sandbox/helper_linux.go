package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Main is the helper's whole life: it reads the Spec, fences itself and
// execs the server (runPlain), for a run without namespaces. (A run with
// namespaces has the C init, execstage/init.c, cloned straight into them.)
// It returns only on failure or when the launcher refused the run, with
// the exit code to use; a failure has been reported on StatusFD.
func Main() int {
	runtime.LockOSThread() // never unlocked: the fence is per thread until execve
	if !launcherDescriptors() {
		fmt.Fprintln(os.Stderr, "mcpwarden-fence: this is the fence helper of 'mcpwarden run', which starts it with a spec on fd 3 and a status pipe on fd 4; it is not run by hand")
		return 2
	}
	status := os.NewFile(StatusFD, "status")
	in := bufio.NewReader(os.NewFile(SpecFD, "spec"))
	if os.Getpid() == 1 {
		return report(status, &Status{Stage: StageNamespaces, Message: "the Go helper was started as a run's init; with namespaces the run's init is " + ExecStageName})
	}
	return runPlain(in, status)
}

// runPlain fences this process and execs the server in its place: the
// helper started without namespaces (with them, the C init does it,
// execstage/).
func runPlain(in *bufio.Reader, status *os.File) int {
	spec, err := readSpec(in)
	if err != nil {
		return report(status, &Status{Stage: StageSpec, Message: err.Error()})
	}
	if spec.NS != nil {
		return report(status, &Status{Stage: StageNamespaces, Message: "the spec asks for namespaces, but the helper is not pid 1 of its own pid namespace"})
	}
	// The ruleset and the seccomp program are built while the launcher
	// finishes; nothing restricts this process before the go-ahead.
	pre, st := prepare(spec)
	if st != nil {
		return report(status, st)
	}
	if err := send(status, &Status{Stage: StageReady}); err != nil {
		return 127
	}
	if !waitGo(in) {
		return 0 // the launcher refused the run: exec nothing
	}
	if st := apply(spec, pre); st != nil {
		return report(status, st)
	}
	if err := dieWithLauncher(status); err != nil {
		return report(status, &Status{Stage: StagePrivs, Errno: errnoOf(err), Message: err.Error()})
	}
	// Everything but stdio is closed by execve, including the status pipe,
	// whose EOF tells the launcher that exec succeeded.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return report(status, &Status{Stage: StagePrivs, Errno: errnoOf(err), Message: "mark descriptors close-on-exec: " + err.Error()})
	}
	err = syscall.Exec(spec.Exe, spec.Argv, spec.Env)
	st = &Status{Stage: StageExec, Errno: errnoOf(err), Path: spec.Exe, Message: err.Error()}
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOENT) {
		// Find which file of the exec chain the fence (or the file system) refused.
		if p := deniedExecPath(spec.Exe); p != "" {
			st.Path = p
		}
	}
	return report(status, st)
}

// waitGo waits for GoByte on the spec descriptor. Anything else (EOF: the
// launcher exited or refused the run) means the server must not start.
func waitGo(in *bufio.Reader) bool {
	b, err := in.ReadByte()
	return err == nil && b == GoByte
}

// launcherDescriptors reports whether fds 3 and 4 are the pipes (or
// sockets) the launcher passes.
func launcherDescriptors() bool {
	for _, fd := range []int{SpecFD, StatusFD} {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return false
		}
		if t := st.Mode & unix.S_IFMT; t != unix.S_IFIFO && t != unix.S_IFSOCK {
			return false
		}
	}
	return true
}

// send writes one status line.
func send(w io.Writer, st *Status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// report sends a failure and closes the status descriptor.
func report(status *os.File, st *Status) int {
	_ = send(status, st)
	status.Close()
	return 127
}

// ReadStatus reads the next status line; io.EOF when the writer closed
// (a plain helper's exec succeeded) without one.
func ReadStatus(r *bufio.Reader) (*Status, error) {
	line, err := r.ReadSlice('\n')
	if len(line) == 0 && err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, errors.New("status line too long")
		}
		return nil, err
	}
	if st, ok := parseStatusLine(line); ok {
		return st, nil
	}
	var st Status
	if err := json.Unmarshal(line, &st); err != nil {
		return nil, fmt.Errorf("unreadable status from the fence helper: %w", err)
	}
	return &st, nil
}

// parseStatusLine reads the status lines a run's steps are made of
// without encoding/json: {"stage":"WORD"} with WORD in [a-z_], then any of
// "pid", "code", "signal" and "errno" once each, with a decimal int that
// fits 32 bits, in JSON's syntax, and nothing else (no space, no other
// key), ending in '\n' or not. That is every line the C init and stage
// write but failures with a message, and what the Go helper writes for
// ready; for those, encoding/json's decoder was built in every launch
// (about 0.1 ms of CPU). Anything else is not taken (ok false) and goes
// to encoding/json, which decides as before: FuzzParseStatusLine holds
// every line taken to what encoding/json makes of it.
func parseStatusLine(line []byte) (*Status, bool) {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	const head = `{"stage":"`
	if len(line) < len(head)+2 || string(line[:len(head)]) != head || line[len(line)-1] != '}' {
		return nil, false
	}
	rest := line[len(head) : len(line)-1]
	i := 0
	for i < len(rest) && i <= 32 && (rest[i] >= 'a' && rest[i] <= 'z' || rest[i] == '_') {
		i++
	}
	if i == 0 || i > 32 || i >= len(rest) || rest[i] != '"' {
		return nil, false
	}
	st := &Status{Stage: Stage(rest[:i])}
	rest = rest[i+1:]
	var seen [4]bool
	for len(rest) > 0 {
		if rest[0] != ',' || len(rest) < 2 || rest[1] != '"' {
			return nil, false
		}
		rest = rest[2:]
		k := 0
		var field *int
		switch {
		case hasPrefix(rest, `pid":`):
			k, field, rest = 0, &st.PID, rest[len(`pid":`):]
		case hasPrefix(rest, `code":`):
			k, field, rest = 1, &st.Code, rest[len(`code":`):]
		case hasPrefix(rest, `signal":`):
			k, field, rest = 2, &st.Signal, rest[len(`signal":`):]
		case hasPrefix(rest, `errno":`):
			k, field, rest = 3, &st.Errno, rest[len(`errno":`):]
		default:
			return nil, false
		}
		if seen[k] {
			return nil, false
		}
		seen[k] = true
		j := 0
		if j < len(rest) && rest[j] == '-' {
			j++
		}
		start := j
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		digits := j - start
		if digits == 0 || digits > 9 || (digits > 1 && rest[start] == '0') {
			return nil, false
		}
		v, err := strconv.Atoi(string(rest[:j]))
		if err != nil {
			return nil, false
		}
		*field = v
		rest = rest[j:]
	}
	return st, true
}

func hasPrefix(b []byte, p string) bool { return len(b) >= len(p) && string(b[:len(p)]) == p }

func errnoOf(err error) int {
	var e syscall.Errno
	if errors.As(err, &e) {
		return int(e)
	}
	return 0
}
