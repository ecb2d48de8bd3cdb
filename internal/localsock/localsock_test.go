package localsock

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// The test binary doubles as a client run under another uid: it sends one
// line to the socket and prints the answer.
const clientEnv = "LOCALSOCK_TEST_CLIENT"

func TestMain(m *testing.M) {
	if path := os.Getenv(clientEnv); path != "" {
		c, err := Dial(context.Background(), path)
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(0)
		}
		var resp map[string]any
		if err := c.Do(context.Background(), 5*time.Second, map[string]string{"ping": "1"}, &resp); err != nil {
			fmt.Println("do:", err)
			os.Exit(0)
		}
		b, _ := json.Marshal(resp)
		fmt.Println(string(b))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type echo struct {
	OK    bool   `json:"ok"`
	Line  string `json:"line,omitempty"`
	FDs   int    `json:"fds,omitempty"`
	PID   int    `json:"pid,omitempty"`
	Peer  bool   `json:"peer_pidfd,omitempty"`
	Error string `json:"error,omitempty"`
}

func serve(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Listen(cfg, func(_ context.Context, p *Peer, r Request) any {
		for _, f := range r.FDs {
			f.Close()
		}
		return echo{OK: true, Line: strings.TrimSpace(string(r.Line)), FDs: len(r.FDs), PID: p.PID, Peer: p.PIDFD != nil}
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

func mode(t *testing.T, path string) (os.FileMode, uint32) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Gid
}

func TestPermissions(t *testing.T) {
	for _, c := range []struct {
		name          string
		group         int
		dirMode, sock os.FileMode
	}{
		{"owner only", 0, 0o700, 0o600},
		{"with a group", 4242, 0o710, 0o660},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.group != 0 {
				testenv.RequireRoot(t)
			}
			path := filepath.Join(t.TempDir(), "d", "s.sock")
			serve(t, Config{Path: path, Group: c.group})
			dm, dg := mode(t, filepath.Dir(path))
			sm, sg := mode(t, path)
			if dm != c.dirMode || sm != c.sock {
				t.Errorf("dir %o socket %o, want %o %o", dm, sm, c.dirMode, c.sock)
			}
			if c.group != 0 && (dg != uint32(c.group) || sg != uint32(c.group)) {
				t.Errorf("dir group %d socket group %d, want %d", dg, sg, c.group)
			}
		})
	}
}

func TestExistingFiles(t *testing.T) {
	dir := t.TempDir()
	t.Run("stale socket is replaced", func(t *testing.T) {
		path := filepath.Join(dir, "stale.sock")
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		ln.Close()
		serve(t, Config{Path: path})
	})
	t.Run("live socket is refused", func(t *testing.T) {
		path := filepath.Join(dir, "live.sock")
		serve(t, Config{Path: path})
		if _, err := Listen(Config{Path: path}, nil); err == nil || !strings.Contains(err.Error(), "another process") {
			t.Fatalf("second listener on a live socket: %v", err)
		}
	})
	t.Run("a file that is not a socket is refused", func(t *testing.T) {
		path := filepath.Join(dir, "file")
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Listen(Config{Path: path}, nil); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("listen over a regular file: %v", err)
		}
	})
	t.Run("a directory of another user is refused", func(t *testing.T) {
		testenv.RequireRoot(t)
		sub := filepath.Join(dir, "theirs")
		if err := os.Mkdir(sub, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(sub, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Listen(Config{Path: filepath.Join(sub, "s.sock")}, nil); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Fatalf("listen in another user's directory: %v", err)
		}
	})
	t.Run("close removes only its own socket", func(t *testing.T) {
		path := filepath.Join(dir, "mine.sock")
		s, err := Listen(Config{Path: path}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		other, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		s.Close()
		if _, err := os.Lstat(path); err != nil {
			t.Fatalf("Close removed a socket another listener made: %v", err)
		}
	})
}

// TestLongPath: a socket whose path is over the 107 bytes a socket
// address holds (a daemon's --socket in a deep state directory, a test's
// under a long TMPDIR) is served and reached, a live one is still told
// from a stale one, and Close removes it. Before, Listen failed with
// "bind: invalid argument".
func TestLongPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), strings.Repeat("d", 150), "s.sock")
	serve(t, Config{Path: path})
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatalf("Dial over a path of %d bytes: %v", len(path), err)
	}
	var resp echo
	if err := c.Do(context.Background(), time.Minute, map[string]string{"ping": "1"}, &resp); err != nil || !resp.OK {
		t.Fatalf("a request over a path of %d bytes: %+v, %v", len(path), resp, err)
	}
	c.Close()
	if _, err := Listen(Config{Path: path}, nil); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("a second listener on the live long socket: %v", err)
	}
}

func TestRequests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	serve(t, Config{Path: path, MaxLine: 1024, MaxFDs: 1})
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	t.Run("lines on one connection", func(t *testing.T) {
		for i := range 3 {
			var r echo
			if err := c.Do(ctx, time.Second, map[string]int{"n": i}, &r); err != nil {
				t.Fatal(err)
			}
			if !r.OK || r.Line != fmt.Sprintf(`{"n":%d}`, i) || r.PID != os.Getpid() {
				t.Fatalf("answer %+v", r)
			}
		}
	})
	t.Run("a descriptor travels with its line", func(t *testing.T) {
		pfd, err := unix.PidfdOpen(os.Getpid(), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(pfd)
		var r echo
		if err := c.Do(ctx, time.Second, "with-fd", &r, pfd); err != nil {
			t.Fatal(err)
		}
		if r.FDs != 1 || !r.Peer {
			t.Fatalf("answer %+v", r)
		}
		var r2 echo
		if err := c.Do(ctx, time.Second, "without", &r2); err != nil || r2.FDs != 0 {
			t.Fatalf("the next line got descriptors: %+v %v", r2, err)
		}
	})
	t.Run("too many descriptors refuse the line", func(t *testing.T) {
		c2, err := Dial(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		var r echo
		if err := c2.Do(ctx, time.Second, "two-fds", &r, 0, 1); err != nil {
			t.Fatal(err)
		}
		if r.OK || !strings.Contains(r.Error, "file descriptors") {
			t.Fatalf("answer %+v", r)
		}
	})
	t.Run("an oversized line is refused", func(t *testing.T) {
		c2, err := Dial(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		var r echo
		if err := c2.Do(ctx, time.Second, strings.Repeat("x", 2000), &r); err != nil {
			t.Fatal(err)
		}
		if r.OK || !strings.Contains(r.Error, "larger than 1024") {
			t.Fatalf("answer %+v", r)
		}
	})
	t.Run("an idle connection is closed without an answer", func(t *testing.T) {
		idle := filepath.Join(t.TempDir(), "idle.sock")
		serve(t, Config{Path: idle, Timeout: 100 * time.Millisecond})
		nc, err := net.Dial("unix", idle)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		b, err := io.ReadAll(nc) // returns once the server closes
		if err != nil || len(b) != 0 {
			t.Fatalf("idle connection got %q, %v", b, err)
		}
		// The server is still there for the next client.
		c2, err := Dial(ctx, idle)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		var r echo
		if err := c2.Do(ctx, time.Second, "after", &r); err != nil || !r.OK {
			t.Fatalf("after an idle timeout: %+v %v", r, err)
		}
	})
	t.Run("a line left unfinished past the timeout is refused", func(t *testing.T) {
		slow := filepath.Join(t.TempDir(), "slow.sock")
		serve(t, Config{Path: slow, Timeout: 100 * time.Millisecond})
		nc, err := net.Dial("unix", slow)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		io.WriteString(nc, `{"half":`)
		b, _ := io.ReadAll(nc)
		if !strings.Contains(string(b), "timeout") || strings.Contains(string(b), `"ok":true`) {
			t.Fatalf("slow line: %q", b)
		}
	})
	t.Run("an unfinished line at close is not served", func(t *testing.T) {
		nc, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(nc, `{"half":`)
		nc.(*net.UnixConn).CloseWrite()
		b, _ := io.ReadAll(nc)
		nc.Close()
		if strings.Contains(string(b), `"ok":true`) {
			t.Fatalf("half a line was served: %s", b)
		}
	})
}

// TestPeers runs clients as another user: refused without a group; with
// the group, its members are admitted and others still refused.
func TestPeers(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "client")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	const group = 4243
	client := func(path string, uid, gid uint32, groups ...uint32) string {
		cmd := exec.Command(bin)
		cmd.Env = []string{clientEnv + "=" + path}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("client as %d:%d: %v %s", uid, gid, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	t.Run("no group", func(t *testing.T) {
		path := filepath.Join(dir, "a", "s.sock")
		serve(t, Config{Path: path})
		// The directory keeps the user out before the socket is reached.
		if out := client(path, 65534, 65534); !strings.Contains(out, "permission denied") {
			t.Fatalf("another user got in: %s", out)
		}
	})
	t.Run("group", func(t *testing.T) {
		path := filepath.Join(dir, "b", "s.sock")
		serve(t, Config{Path: path, Group: group})
		if out := client(path, 65534, group); !strings.Contains(out, `"ok":true`) {
			t.Fatalf("member by primary group refused: %s", out)
		}
		if out := client(path, 65534, 65534, group); !strings.Contains(out, `"ok":true`) {
			t.Fatalf("member by supplementary group refused: %s", out)
		}
		if out := client(path, 65534, 65534); !strings.Contains(out, "permission denied") {
			t.Fatalf("non-member got in: %s", out)
		}
	})
	t.Run("group check holds behind a permissive socket", func(t *testing.T) {
		// Should the file modes be loosened, the credential check still refuses.
		path := filepath.Join(dir, "c", "s.sock")
		serve(t, Config{Path: path, Group: group})
		if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o777); err != nil {
			t.Fatal(err)
		}
		out := client(path, 65534, 65534)
		if !strings.Contains(out, "permission denied: uid 65534") {
			t.Fatalf("non-member behind a 0777 socket: %s", out)
		}
	})
}

// FuzzLineReader feeds arbitrary bytes through a socket: every line the
// reader returns is complete and within the bound.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n{\"b\":2}\n"))
	f.Add([]byte("no newline"))
	f.Add([]byte("\n\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		w := os.NewFile(uintptr(fds[0]), "w")
		rf := os.NewFile(uintptr(fds[1]), "r")
		fc, err := net.FileConn(rf)
		rf.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer fc.Close()
		go func() { w.Write(data); w.Close() }()
		r := &lineReader{c: fc.(*net.UnixConn), max: 64}
		defer r.closeFDs()
		for {
			line, _, err := r.next()
			if err != nil {
				return
			}
			if len(line) > 64 || line[len(line)-1] != '\n' {
				t.Fatalf("line %q", line)
			}
		}
	})
}
