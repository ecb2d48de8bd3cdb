package unixsock

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestAnyLength: a socket is made and reached at paths of every length
// around the 107 bytes a socket address holds and far beyond (up to
// 3,000 bytes of directories), one line goes each way, no descriptor is
// left open, and closing the listener leaves the file to its owner. Before
// (net.ListenUnix on the path), every path over 107 bytes failed with
// EINVAL.
func TestAnyLength(t *testing.T) {
	// The runtime's network poller opens its descriptors on first use.
	warm, err := Listen(filepath.Join(t.TempDir(), "w.sock"))
	if err != nil {
		t.Fatal(err)
	}
	warm.Close()
	for _, n := range []int{1, 60, 107, 108, 200, 3000} {
		dir := t.TempDir()
		// Directories of at most 200 bytes each, down to a path of about n bytes.
		for len(dir)+len("/s.sock") < n {
			seg := min(200, n-len(dir)-len("/s.sock"))
			dir = filepath.Join(dir, strings.Repeat("d", max(seg-1, 1)))
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "s.sock")
		before := openFDs(t)
		ln, err := Listen(path)
		if err != nil {
			t.Fatalf("Listen(%d bytes): %v", len(path), err)
		}
		served := make(chan struct{})
		go func() {
			defer close(served)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Write([]byte("re " + line))
		}()
		c, err := Dial(context.Background(), path)
		if err != nil {
			t.Fatalf("Dial(%d bytes): %v", len(path), err)
		}
		c.Write([]byte("hello\n"))
		got, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || got != "re hello\n" {
			t.Fatalf("%d bytes: answer %q, %v", len(path), got, err)
		}
		c.Close()
		<-served // the server's end of the connection is closed
		ln.Close()
		if st, err := os.Lstat(path); err != nil || st.Mode()&os.ModeSocket == 0 {
			t.Errorf("%d bytes: the socket file after Close: %v", len(path), err)
		}
		if after := openFDs(t); after != before {
			t.Errorf("%d bytes: %d descriptors open before, %d after", len(path), before, after)
		}
	}
}

// TestLongNameIsRefused: in a long directory, the socket's own name must
// fit after /proc/self/fd/N/; a longer one is refused by name.
func TestLongNameIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ok := filepath.Join(dir, strings.Repeat("n", MaxName))
	ln, err := Listen(ok)
	if err != nil {
		t.Fatalf("a name of %d bytes: %v", MaxName, err)
	}
	ln.Close()
	bad := filepath.Join(dir, strings.Repeat("n", MaxName+1))
	if _, err := Listen(bad); err == nil || !strings.Contains(err.Error(), "over the") {
		t.Errorf("a name of %d bytes: %v, want a refusal", MaxName+1, err)
	}
	if _, err := Dial(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "over the") {
		t.Errorf("Dial, a name of %d bytes: %v, want a refusal", MaxName+1, err)
	}
}
