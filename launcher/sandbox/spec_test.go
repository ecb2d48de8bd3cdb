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
