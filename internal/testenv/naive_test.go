package testenv

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNaiveDriver drives the real naive server directly: answers come back
// one per request, in order, a read of the tree's files returns their
// contents, and a path that needs JSON escaping reaches the server intact.
func TestNaiveDriver(t *testing.T) {
	tr := NewTree(t, ReadScope("driver"))
	for p, want := range map[string]string{tr.State: filepath.Join(tr.Root, "state"), tr.Socket: filepath.Join(tr.Root, "run", "daemon.sock"),
		tr.Inside: filepath.Join(tr.Base, "ws", "a.txt"), tr.Secret: filepath.Join(tr.Root, "outside", "secret.txt")} {
		if p != want {
			t.Errorf("tree path %s, want %s", p, want)
		}
	}
	naive := filepath.Join(tr.Root, "naiveserver")
	MustGoBuild(t, naive, "./internal/naiveserver")
	odd := filepath.Join(tr.WS, `quote" back\slash`)
	WriteFiles(t, map[string]string{odd: "odd"})

	r := StartNaive(t, exec.Command(naive))
	for path, want := range map[string]string{tr.Inside: "inside", tr.Secret: "OUTSIDE-SECRET", odd: "odd"} {
		var resp struct {
			OK   bool   `json:"ok"`
			Data string `json:"data"`
		}
		got := r.Do(NaiveRead(path))
		if err := json.Unmarshal([]byte(got), &resp); err != nil || !resp.OK || resp.Data != want {
			t.Errorf("read %s: %s", path, got)
		}
	}
	r.Finish()

	answers, _ := RunNaive(t, exec.Command(naive), `{"op":"ping"}`, NaiveRead(filepath.Join(tr.Root, "missing")))
	if len(answers) != 2 || !strings.Contains(answers[0], `"ok":true`) || !strings.Contains(answers[1], "ENOENT") {
		t.Fatalf("answers %q", answers)
	}
	var scope map[string]any
	if err := json.Unmarshal([]byte(ReadScope("driver")), &scope); err != nil || scope["scope_id"] != "driver" {
		t.Fatalf("ReadScope: %v %v", scope, err)
	}
}
