package sandbox

import (
	"bufio"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// statusLines are the lines the C init and stage write on a run's way
// (execstage/init.c, stage.c) and the Go helper's ready.
var statusLines = []string{
	`{"stage":"ready"}`,
	`{"stage":"started","pid":2}`,
	`{"stage":"exit","code":0}`,
	`{"stage":"exit","code":127}`,
	`{"stage":"exit","signal":9}`,
	`{"stage":"refused"}`,
	`{"stage":"exec","errno":13}`,
}

// TestStatusLinesWithoutEncodingJSON: the lines of a run's steps are read
// without encoding/json (its decoder cost about 0.1 ms of CPU per
// launch), to the same Status. Fails before parseStatusLine.
func TestStatusLinesWithoutEncodingJSON(t *testing.T) {
	for _, l := range statusLines {
		for _, line := range []string{l, l + "\n"} {
			got, ok := parseStatusLine([]byte(line))
			if !ok {
				t.Errorf("%q goes to encoding/json", line)
				continue
			}
			var want Status
			if err := json.Unmarshal([]byte(line), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("%q: %+v, encoding/json %+v", line, *got, want)
			}
		}
	}
}

// TestReadStatusLeavesTheRestToEncodingJSON: what the short parser does
// not take is decided by encoding/json as before: read, or refused.
func TestReadStatusLeavesTheRestToEncodingJSON(t *testing.T) {
	cases := []struct {
		line string
		want *Status // nil: an error
	}{
		{`{"stage":"exec","errno":13,"path":"/bin/x","message":"exec: permission denied"}`, &Status{Stage: StageExec, Errno: 13, Path: "/bin/x", Message: "exec: permission denied"}},
		{`{"stage": "ready"}`, &Status{Stage: StageReady}},
		{`{"Stage":"ready"}`, &Status{Stage: StageReady}},
		{`{"stage":"exit","code":1,"code":2}`, &Status{Stage: StageExit, Code: 2}},
		{`{"stage":"exit","code":01}`, nil},
		{`{"stage":"exit","code":99999999999999999999}`, nil},
		{`{"stage":"exit","code":1.5}`, nil},
		{`{"stage":"ready"`, nil},
		{`{"stage":"ready"}}`, nil},
		{`not json`, nil},
	}
	for _, c := range cases {
		st, err := ReadStatus(bufio.NewReader(strings.NewReader(c.line + "\n")))
		if c.want == nil {
			if err == nil {
				t.Errorf("%q: read as %+v", c.line, *st)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(st, c.want) {
			t.Errorf("%q: %+v, %v; want %+v", c.line, st, err, *c.want)
		}
	}
}

func FuzzParseStatusLine(f *testing.F) {
	for _, l := range statusLines {
		f.Add([]byte(l))
	}
	for _, l := range []string{`{"stage":"exit","code":-0}`, `{"stage":"exit","code":-2147483648,"signal":1,"pid":3,"errno":4}`, `{"stage":"a_b","pid":999999999}`, `{"stage":"x","pid":1,"pid":2}`, `{"stage":""}`, "{\"stage\":\"ready\"}\r\n"} {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got, ok := parseStatusLine(line)
		if !ok {
			return
		}
		var want Status
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatalf("%q taken as %+v; encoding/json refuses it: %v", line, *got, err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("%q: %+v, encoding/json %+v", line, *got, want)
		}
	})
}
