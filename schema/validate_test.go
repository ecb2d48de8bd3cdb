package schema

import (
	"strings"
	"testing"
)

func TestIsLabel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"tools/call", true},
		{"a", true},
		{"notifications/roots/list_changed", true},
		{"", false},
		{"/tools", false},
		{"tools/", false},
		{"tools//call", false},
		{"a/../b", false},
		{"..", false},
		{"tools/ca ll", false},
		{"tools/cäll", false},
		{strings.Repeat("a", maxTokenLen), true},
		{strings.Repeat("a", maxTokenLen+1), false},
	} {
		if got := IsLabel(tc.in); got != tc.want {
			t.Errorf("IsLabel(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = IsLabel("notifications/roots/list_changed") }); n != 0 {
		t.Errorf("IsLabel: %v allocations, budget 0", n)
	}
}
