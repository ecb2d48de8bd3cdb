package policy

import (
	"fmt"
	"strings"
	"testing"
)

// visits records what a walk reports, in order; stopAt > 0 makes the
// stopAt-th visit return a denial (the walk must stop there).
func visits(walker func([]byte, func([]string, byte, string) *Denial) (*Denial, error), raw []byte, stopAt int) string {
	var b strings.Builder
	n := 0
	d, err := walker(raw, func(ptr []string, kind byte, s string) *Denial {
		n++
		fmt.Fprintf(&b, "%q %c %q\n", ptr, kind, s)
		if n == stopAt {
			return &Denial{Reason: "stop"}
		}
		return nil
	})
	fmt.Fprintf(&b, "denial=%v err=%v", d != nil, err != nil)
	return b.String()
}

// The walk over plain JSON reports exactly what the decoder's walk
// reports, and takes the plain path for the arguments calls carry.
func TestWalkPlainAgreesWithTheDecoder(t *testing.T) {
	for _, c := range []struct {
		raw   string
		plain bool
	}{
		{`{"text":"hello"}`, true},
		{`{"path":"/srv/a/b.txt","n":-1.5e3,"ok":true,"no":false,"z":null}`, true},
		{` { "a" : [ 1 , "x" , { "b" : [ ] , "c" : { } } ] } `, true},
		{`{"a":[[["deep"]]],"b":{"c":{"d":"/etc/passwd"}}}`, true},
		{`"top"`, true},
		{`[]`, true},
		{`{"a":1,"a":2}`, false},          // duplicate: the decoder refuses it
		{`{"a":1,"A":2}`, true},           // exact names differ: both accept
		{`{"p":"caf\u00e9"}`, false},      // an escape
		{`{"p":"café"}`, false},           // not ASCII
		{`{"a":01}`, false},               // invalid number
		{`{"a":1,}`, false},               // trailing comma
		{`{"a":"x"} {}`, false},           // data after the value
		{`{"a":"` + "\x01" + `"}`, false}, // a control character
		{"", false},                       // nothing
		{`{"a":tru}`, false},              // bad literal
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), false}, // beyond the plain depth: the decoder walks it
	} {
		_, ok := scanPlain([]byte(c.raw), nil)
		if ok != c.plain {
			t.Errorf("scanPlain(%q) ok = %v, want %v", c.raw, ok, c.plain)
		}
		for stop := 0; stop < 4; stop++ {
			if got, want := visits(walk, []byte(c.raw), stop), visits(walkDecoder, []byte(c.raw), stop); got != want {
				t.Errorf("walk(%q), stop at %d:\n%s\nthe decoder's walk:\n%s", c.raw, stop, got, want)
			}
		}
	}
}

// FuzzWalkAgreesWithTheDecoder: whatever the input, walk (plain when
// scanPlain accepts it) reports the decoder's visits and errors; and what
// scanPlain accepts, the decoder accepts.
func FuzzWalkAgreesWithTheDecoder(f *testing.F) {
	for _, s := range []string{`{"text":"hello"}`, `{"a":[1,{"b":"/x"}],"c":null}`, `{"a":1,"a":2}`, `[1,2,"3"]`, `"s"`, `{"a":-0.5E+2}`, `{"k":"a\"b"}`, `{}`} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, raw []byte, stop uint8) {
		got := visits(walk, raw, int(stop%8))
		want := visits(walkDecoder, raw, int(stop%8))
		if got != want {
			t.Fatalf("walk(%q):\n%s\nthe decoder's walk:\n%s", raw, got, want)
		}
		if _, ok := scanPlain(raw, nil); ok && strings.Contains(want, "err=true") {
			t.Fatalf("scanPlain accepted %q, which the decoder refuses", raw)
		}
	})
}

// The walk of a call's arguments allocates only the strings it reports.
func TestWalkPlainAllocations(t *testing.T) {
	raw := []byte(`{"text":"hello","n":1}`)
	allocs := testing.AllocsPerRun(200, func() {
		_, _ = walk(raw, func([]string, byte, string) *Denial { return nil })
	})
	// "text", "hello", "n", and the pointer's backing array (it escapes to
	// visit): 4; the decoder's walk took 12.
	if allocs > 4 {
		t.Errorf("walk of a plain call allocates %.0f times, want at most 4", allocs)
	}
}
