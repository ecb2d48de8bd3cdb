package approval

import (
	"regexp"
	"strings"
	"testing"
)

// idRegexp is what validID replaced; the two must agree on every input.
var idRegexp = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func TestValidID(t *testing.T) {
	for _, c := range []struct {
		id   string
		want bool
	}{
		{"", false},
		{"a", true},
		{"0123456789abcdef0123456789abcdef", true},
		{"run.id_with:all-kinds", true},
		{strings.Repeat("x", 128), true},
		{strings.Repeat("x", 129), false},
		{"../etc", false},
		{"a/b", false},
		{"a b", false},
		{"a\x00", false},
		{"a\n", false},
		{"é", false},
		{"run\u200b", false},
	} {
		if got := validID(c.id); got != c.want {
			t.Errorf("validID(%q) = %v, want %v", c.id, got, c.want)
		}
		if re := idRegexp.MatchString(c.id); re != c.want {
			t.Errorf("the old pattern says %v for %q; the table is wrong", re, c.id)
		}
	}
}

func FuzzValidID(f *testing.F) {
	for _, s := range []string{"", "a", "../x", strings.Repeat("y", 128), strings.Repeat("y", 129), "a:b-c_d.e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := validID(id), idRegexp.MatchString(id); got != want {
			t.Fatalf("validID(%q) = %v, the pattern says %v", id, got, want)
		}
	})
}
