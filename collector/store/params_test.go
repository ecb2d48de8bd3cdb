package store

import (
	"strconv"
	"strings"
	"testing"
)

func TestBindQuotesAndRefuses(t *testing.T) {
	for _, tc := range []struct {
		sql, want string
		vals      map[string]string
		bad       bool
	}{
		{"x = {host:String}", `x = 'a\'b\\c'`, map[string]string{"host": `a'b\c`}, false},
		{"t >= {from:Int64}", "t >= -5", map[string]string{"from": "-5"}, false},
		{"t >= {from:Int64}", "", map[string]string{"from": "1 OR 1=1"}, true},
		{"l {limit:UInt32}", "", map[string]string{"limit": "-1"}, true},
		{"{missing:String}", "", map[string]string{}, true},
		{"{x:Array}", "", map[string]string{"x": "1"}, true},
	} {
		got, err := Bind(tc.sql, tc.vals)
		if tc.bad != (err != nil) || (!tc.bad && got != tc.want) {
			t.Errorf("Bind(%q, %v) = %q, %v", tc.sql, tc.vals, got, err)
		}
	}
}

// FuzzBind: whatever a flag value holds, a String parameter becomes one
// quoted literal that decodes back to exactly that value, and an integer
// parameter is either a plain integer or refused.
func FuzzBind(f *testing.F) {
	f.Add(`a'b\c`, "12")
	f.Add(`'); DROP TABLE events; --`, "1 OR 1")
	f.Add("\x00\n\r", "-9223372036854775808")
	f.Fuzz(func(t *testing.T, s, n string) {
		got, err := Bind("{v:String}", map[string]string{"v": s})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) < 2 || got[0] != '\'' || got[len(got)-1] != '\'' {
			t.Fatalf("not one literal: %q", got)
		}
		var dec strings.Builder
		body := got[1 : len(got)-1]
		for i := 0; i < len(body); i++ {
			c := body[i]
			if c == '\'' {
				t.Fatalf("unescaped quote in %q", got)
			}
			if c != '\\' {
				dec.WriteByte(c)
				continue
			}
			i++
			if i >= len(body) {
				t.Fatalf("dangling backslash in %q", got)
			}
			switch body[i] {
			case '0':
				dec.WriteByte(0)
			case 'n':
				dec.WriteByte('\n')
			case 'r':
				dec.WriteByte('\r')
			default:
				dec.WriteByte(body[i])
			}
		}
		if dec.String() != s {
			t.Fatalf("round trip: %q -> %q -> %q", s, got, dec.String())
		}
		if out, err := Bind("{n:Int64}", map[string]string{"n": n}); err == nil {
			if _, perr := strconv.ParseInt(out, 10, 64); perr != nil {
				t.Fatalf("accepted %q as Int64: %q", n, out)
			}
		}
	})
}
