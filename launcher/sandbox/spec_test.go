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
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadSpec(strings.NewReader(string(data)))
		if err == nil && (s.Exe == "" || len(s.Argv) == 0) {
			t.Fatalf("accepted %q", data)
		}
	})
}
