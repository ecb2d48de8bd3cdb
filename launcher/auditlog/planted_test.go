package auditlog

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestPlantedLogIsRefused: a root launcher's audit log in a place another
// user can write to (a sticky shared directory such as /tmp, this host
// following symlinks there: fs.protected_symlinks=0) must not be one that
// user prepared: a symlink made root append its records to any file (here
// a root-owned victim), a file or hard link of the planter's let it rewrite
// or drop the records after the run, a FIFO hung the run in open(2) for
// ever. A parent directory the planter owns, or any user may write to
// without the sticky bit, lets it swap the log after the run starts. Each is
// refused now, naming what is wrong, and nothing is written anywhere; the
// planter is uid 65534 (its entries are made and chowned by the test).
func TestPlantedLogIsRefused(t *testing.T) {
	testenv.RequireRoot(t)
	const planter = 65534
	base := t.TempDir()
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(base, "victim")
	if err := os.WriteFile(victim, []byte("root's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mkdir := func(t *testing.T, mode os.FileMode, uid int) string {
		d, err := os.MkdirTemp(base, "d")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
		return d
	}
	shared := func(t *testing.T) string { return mkdir(t, 0o777|os.ModeSticky, 0) }
	own := func(t *testing.T, p string) {
		if err := os.Lchown(p, planter, planter); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		plant func(t *testing.T) string // returns the log's path
		want  string                    // in the error; "" = accepted
	}{
		{"a new log in root's directory", func(t *testing.T) string {
			return filepath.Join(mkdir(t, 0o700, 0), "audit.jsonl")
		}, ""},
		{"a new log in a shared sticky directory", func(t *testing.T) string {
			return filepath.Join(shared(t), "audit.jsonl")
		}, ""},
		{"root's own log again", func(t *testing.T) string {
			p := filepath.Join(mkdir(t, 0o700, 0), "audit.jsonl")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, ""},
		{"a symlink to a root file", func(t *testing.T) string {
			p := filepath.Join(shared(t), "audit.jsonl")
			if err := os.Symlink(victim, p); err != nil {
				t.Fatal(err)
			}
			own(t, p)
			return p
		}, "symlink"},
		{"a file of the planter's", func(t *testing.T) string {
			p := filepath.Join(shared(t), "audit.jsonl")
			if err := os.WriteFile(p, nil, 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o666); err != nil {
				t.Fatal(err)
			}
			own(t, p)
			return p
		}, "owned by uid 65534"},
		{"a hard link to a file of the planter's", func(t *testing.T) string {
			d := shared(t)
			mine := filepath.Join(d, "mine")
			if err := os.WriteFile(mine, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			own(t, mine)
			p := filepath.Join(d, "audit.jsonl")
			if err := os.Link(mine, p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "owned by uid 65534"},
		{"a hard link to a root file", func(t *testing.T) string {
			d := mkdir(t, 0o700, 0)
			p := filepath.Join(d, "audit.jsonl")
			if err := os.Link(victim, p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "links"},
		{"a group-writable log", func(t *testing.T) string {
			p := filepath.Join(mkdir(t, 0o700, 0), "audit.jsonl")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o620); err != nil {
				t.Fatal(err)
			}
			return p
		}, "written by group or others"},
		{"a FIFO with no reader", func(t *testing.T) string {
			p := filepath.Join(shared(t), "audit.jsonl")
			if err := syscall.Mkfifo(p, 0o666); err != nil {
				t.Fatal(err)
			}
			own(t, p)
			return p
		}, "not a regular file"},
		{"a directory of the planter's", func(t *testing.T) string {
			return filepath.Join(mkdir(t, 0o755, planter), "audit.jsonl")
		}, "owned by uid 65534"},
		{"a directory anyone may write to, not sticky", func(t *testing.T) string {
			return filepath.Join(mkdir(t, 0o777, 0), "audit.jsonl")
		}, "sticky"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.plant(t)
			type result struct {
				l   *Log
				err error
			}
			done := make(chan result, 1)
			go func() {
				l, err := Open(p)
				done <- result{l, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(time.Minute):
				t.Fatal("Open hung for a minute")
			}
			if c.want == "" {
				if r.err != nil {
					t.Fatalf("refused: %v", r.err)
				}
				if err := r.l.Publish(context.Background(), []schema.Event{}); err != nil {
					t.Fatal(err)
				}
				r.l.Close()
				return
			}
			if r.err == nil {
				_ = r.l.Publish(context.Background(), []schema.Event{decisionEvent(fullDecision())})
				r.l.Close()
				t.Fatalf("opened; want a refusal naming %q", c.want)
			}
			if !strings.Contains(r.err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", r.err, c.want)
			}
			if b, _ := os.ReadFile(victim); string(b) != "root's\n" {
				t.Fatalf("the victim was written: %q", b)
			}
		})
	}
}
