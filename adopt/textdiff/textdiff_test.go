package textdiff

import (
	"strconv"
	"strings"
	"testing"
)

// patch applies a unified diff made by Unified to a.
func patch(t testing.TB, a, d string) string {
	t.Helper()
	if d == "" {
		return a
	}
	src := lines(a)
	var out []string
	pos := 0
	last := byte(0)
	dl := strings.SplitAfter(d, "\n")
	for i := 2; i < len(dl); i++ {
		l := dl[i]
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "@@ -") {
			f := strings.Fields(l)[1][1:]
			startS, _, _ := strings.Cut(f, ",")
			start, _ := strconv.Atoi(startS)
			if strings.Contains(f, ",0") && !strings.Contains(f, ",0,") {
				// "-N,0": insertion after line N
			} else {
				start--
			}
			out = append(out, src[pos:start]...)
			pos = start
			continue
		}
		if strings.HasPrefix(l, `\ No newline`) {
			if last != '-' {
				out[len(out)-1] = strings.TrimSuffix(out[len(out)-1], "\n")
			}
			continue
		}
		body := l[1:]
		last = l[0]
		switch l[0] {
		case ' ':
			out = append(out, body)
			pos++
		case '-':
			pos++
		case '+':
			out = append(out, body)
		}
	}
	out = append(out, src[pos:]...)
	return strings.Join(out, "")
}

func TestUnified(t *testing.T) {
	if Unified("a", "b", "x\n", "x\n") != "" {
		t.Error("equal texts differ")
	}
	a := "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n"
	b := "1\n2\nthree\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n"
	d := Unified("a", "b", a, b)
	want := "--- a\n+++ b\n@@ -1,6 +1,6 @@\n 1\n 2\n-3\n+three\n 4\n 5\n 6\n@@ -10,3 +10,4 @@\n 10\n 11\n 12\n+13\n"
	if d != want {
		t.Errorf("got\n%s\nwant\n%s", d, want)
	}
	for _, c := range [][2]string{{"", "a\n"}, {"a\n", ""}, {"a", "b"}, {"a\nb", "a\nb\n"}, {a, b}, {"x\ny\n", "y\nx\n"}} {
		if got := patch(t, c[0], Unified("a", "b", c[0], c[1])); got != c[1] {
			t.Errorf("patch(%q, diff) = %q, want %q", c[0], got, c[1])
		}
	}
}

func FuzzUnified(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\nd\n")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, a, b string) {
		if len(a) > 2000 || len(b) > 2000 {
			return
		}
		if got := patch(t, a, Unified("a", "b", a, b)); got != b {
			t.Fatalf("patch(%q, Unified) = %q, want %q\n%s", a, got, b, Unified("a", "b", a, b))
		}
	})
}
