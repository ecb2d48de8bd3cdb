package schema

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// hostileStrings are what a compromised host puts in string fields: NUL,
// terminal escapes, bidi and zero-width characters, invalid UTF-8, spaces,
// a path, a credential, an over-long name, non-ASCII letters.
var hostileStrings = []string{
	"\x00", "a\x00b", "\x1b[2J\x1b[31mCLEAN", "\u202eedis", "a\u200bb", "\xff\xfe", "\xc0\xaf",
	"a b", "a\tb", "a\nb", "/etc/shadow", "../../etc", "Bearer abc", strings.Repeat("a", 300), "é", "a\"b", "a'b", "a\\b",
}

// stringFields visits every string field of v (strings and string-kinded
// enums, the elements of string lists, and the fields of the structs v
// points to or lists), with its path and a setter.
func stringFields(v reflect.Value, path string, visit func(path string, set func(string))) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			stringFields(v.Elem(), path, visit)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				stringFields(v.Field(i), path+"."+v.Type().Field(i).Name, visit)
			}
		}
	case reflect.String:
		visit(path, func(s string) { v.SetString(s) })
	case reflect.Slice:
		switch v.Type().Elem().Kind() {
		case reflect.String:
			visit(path+"[]", func(s string) {
				l := reflect.MakeSlice(v.Type(), 1, 1)
				l.Index(0).SetString(s)
				v.Set(l)
			})
		case reflect.Struct:
			for i := 0; i < v.Len(); i++ {
				stringFields(v.Index(i), fmt.Sprintf("%s[%d]", path, i), visit)
			}
		}
	}
}

// TestHostileStringsInEveryField: every string field of every kind of
// event (envelope and body, lists included) refuses every hostile string,
// so none can be stored, shown by a query or reach a terminal.
func TestHostileStringsInEveryField(t *testing.T) {
	fields := 0
	for _, base := range validEvents() {
		raw, _ := json.Marshal(base)
		var paths []string
		var probe Event
		_ = json.Unmarshal(raw, &probe)
		stringFields(reflect.ValueOf(&probe), string(base.Kind), func(p string, _ func(string)) { paths = append(paths, p) })
		for _, p := range paths {
			fields++
			for _, bad := range hostileStrings {
				var e Event
				if err := json.Unmarshal(raw, &e); err != nil {
					t.Fatal(err)
				}
				stringFields(reflect.ValueOf(&e), string(base.Kind), func(q string, set func(string)) {
					if q == p {
						set(bad)
					}
				})
				if err := e.Validate(); err == nil {
					t.Errorf("%s = %q accepted", p, bad)
				}
			}
		}
	}
	if fields < 60 {
		t.Fatalf("only %d string fields visited: the walk missed the bodies", fields)
	}
}

// TestDeeplyNestedLines: a line nested deep in a member this release does
// not know is rejected, whether within the JSON decoder's depth limit
// (10,000) or beyond it; the message's other lines are kept, and nothing
// crashes.
func TestDeeplyNestedLines(t *testing.T) {
	ev := validEvents()[2]
	good, _ := json.Marshal(ev)
	for _, depth := range []int{1000, 20000} {
		deep := `{"unknown":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `,` + string(good[1:])
		second := ev
		second.EventID = NewID()
		line2, _ := json.Marshal(second)
		evs, rejected, err := DecodeBatch([]byte(deep + "\n" + string(line2) + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		if rejected != 1 || len(evs) != 1 || evs[0].EventID != second.EventID {
			t.Fatalf("depth %d: %d kept, %d rejected, want the deep line rejected and the other kept", depth, len(evs), rejected)
		}
	}
}
