package loadgen

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestLoadgenExitStatus runs the mcpwarden-loadgen binary as docs/fleet.md
// shows it (its hosts' seeds, a NATS server whose users they are, a
// ClickHouse DSN): exit 1 and "ok": false with every event counted lost
// when what it produced is not in the database it checks (the collector
// stores into another one), exit 0 and "ok": true when it is.
func TestLoadgenExitStatus(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "mcpwarden-loadgen")
	testenv.MustGoBuild(t, bin, "./cmd/mcpwarden-loadgen")
	for _, tc := range []struct {
		name      string
		elsewhere bool // the collector stores into another database
		wait      string
		code      int
		ok        bool
	}{
		{"nothing stored", true, "5s", 1, false},
		{"stored exactly", false, "5m", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := "lx-" + schema.NewID()[:6]
			f := startFleetNATS(t, HostNames(prefix, 2))
			dsn := chtest.Database(t)
			into := dsn
			if tc.elsewhere {
				into = chtest.Database(t)
				f.startCollectors(t, dsn, 0) // migrated, and nothing goes there
			}
			f.startCollectors(t, into, 1)
			out, err := exec.Command(bin, "--nats", f.url, "--seeds", f.seeds, "--host-prefix", prefix, "--hosts", "2",
				"--runs", "2", "--duration", "0", "--clickhouse", dsn, "--wait", tc.wait, "--json").Output()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			var s struct {
				Runs     int    `json:"runs"`
				Produced uint64 `json:"produced"`
				Stored   *struct {
					Distinct uint64 `json:"distinct"`
					Lost     int64  `json:"lost"`
					OK       bool   `json:"ok"`
				} `json:"stored"`
			}
			if jerr := json.Unmarshal(out, &s); jerr != nil {
				t.Fatalf("exit %d, summary %q: %v (stderr: %s)", code, out, jerr, stderrOf(err))
			}
			if code != tc.code || s.Stored == nil || s.Stored.OK != tc.ok || s.Runs != 4 || s.Produced == 0 {
				t.Fatalf("exit %d, want %d; summary %s (stderr: %s)", code, tc.code, out, stderrOf(err))
			}
			if !tc.ok && (s.Stored.Distinct != 0 || s.Stored.Lost != int64(s.Produced)) {
				t.Fatalf("with no collector: %s, want everything lost", out)
			}
			if tc.ok && (s.Stored.Distinct != s.Produced || s.Stored.Lost != 0) {
				t.Fatalf("with a collector: %s, want everything stored", out)
			}
		})
	}
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}
