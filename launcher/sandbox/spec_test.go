package sandbox

import (
	"strings"
	"testing"
)

func TestReadSpec(t *testing.T) {
	tests := []struct {
		in  string
		err bool
	}{
		{`{"exe":"/bin/true","argv":["true"]}`, false},
		{``, true},
		{`{"exe":"","argv":["x"]}`, true},
		{`{"exe":"/bin/true","argv":[]}`, true},
		{`not json`, true},
		{strings.Repeat(" ", maxSpecSize+1), true},
	}
	for _, tt := range tests {
		if _, err := ReadSpec(strings.NewReader(tt.in)); (err != nil) != tt.err {
			t.Errorf("ReadSpec(%.30q) err=%v", tt.in, err)
		}
	}
}

func TestNextInChain(t *testing.T) {
	if got := nextInChain([]byte("#!/usr/bin/env node\nx")); got != "/usr/bin/env" {
		t.Errorf("got %q", got)
	}
	if got := nextInChain([]byte("\x7fELF")); got != "" {
		t.Errorf("got %q", got)
	}
}

// FuzzReadSpec: any bytes on the spec pipe decode or fail cleanly, and an
// accepted spec always names an executable.
func FuzzReadSpec(f *testing.F) {
	f.Add([]byte(`{"exe":"/bin/true","argv":["true"],"enforce":true,"paths":[{"path":"/","access":4}]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"exe":"/x","argv":["x"],"ns":{"mount":true,"pid":true,"root":{"staging":"/tmp/s","mounts":[{"path":"/a","dir":true}],"links":[{"path":"/b","target":"a"}]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadSpec(strings.NewReader(string(data)))
		if err == nil && (s.Exe == "" || len(s.Argv) == 0) {
			t.Fatalf("accepted %q", data)
		}
	})
}

// TestReadSpecNamespaces: the helper refuses a namespace spec whose paths
// it would join under its staging directory unsafely, or a pid namespace
// without its mount namespace.
func TestReadSpecNamespaces(t *testing.T) {
	ok := `{"exe":"/bin/true","argv":["true"],"ns":{"mount":true,"pid":true,"root":{"staging":"/tmp/s","mounts":[{"path":"/usr/bin/true"}],"links":[{"path":"/bin","target":"usr/bin"}],"tmp":"/tmp/s"}}}`
	if _, err := ReadSpec(strings.NewReader(ok)); err != nil {
		t.Fatalf("valid spec refused: %v", err)
	}
	for name, bad := range map[string]string{
		"relative mount":      `{"exe":"/x","argv":["x"],"ns":{"mount":true,"root":{"staging":"/tmp/s","mounts":[{"path":"usr/bin"}]}}}`,
		"dot-dot mount":       `{"exe":"/x","argv":["x"],"ns":{"mount":true,"root":{"staging":"/tmp/s","mounts":[{"path":"/usr/../etc"}]}}}`,
		"root as a mount":     `{"exe":"/x","argv":["x"],"ns":{"mount":true,"root":{"staging":"/tmp/s","mounts":[{"path":"/"}]}}}`,
		"no staging":          `{"exe":"/x","argv":["x"],"ns":{"mount":true,"root":{}}}`,
		"link without target": `{"exe":"/x","argv":["x"],"ns":{"mount":true,"root":{"staging":"/tmp/s","links":[{"path":"/bin"}]}}}`,
		"pid without mount":   `{"exe":"/x","argv":["x"],"ns":{"pid":true}}`,
		"server as root":      `{"exe":"/x","argv":["x"],"ns":{"mount":true,"root":{"staging":"/tmp/s"},"server":{"inside":{"uid":0,"gid":0},"host":{"uid":0,"gid":0}}}}`,
	} {
		if _, err := ReadSpec(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
