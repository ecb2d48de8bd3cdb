// Package auditlog is the local, append-only JSONL record of a host's runs:
// one schema.Event per line. Every batch is written with a single write(2)
// on an O_APPEND descriptor and fsync'd before Publish returns, so
// concurrent runs never interleave lines and an acknowledged record survives
// a crash.
package auditlog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Log is an open audit log. It is safe for concurrent use.
type Log struct {
	mu   sync.Mutex
	f    *os.File
	path string
	buf  []byte // the encoding buffer, reused from batch to batch (under mu)
	// dirty: records were written by PublishDeferSync and not synced yet.
	dirty bool
}

// maxKeptBuffer bounds the encoding buffer kept between batches.
const maxKeptBuffer = 1 << 20

// DefaultStateDir is /var/lib/mcpwarden for root, else
// $XDG_STATE_HOME/mcpwarden (default ~/.local/state/mcpwarden).
func DefaultStateDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/lib/mcpwarden", nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "mcpwarden"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no state directory: set XDG_STATE_HOME or HOME, or pass --state-dir: %w", err)
	}
	return filepath.Join(home, ".local", "state", "mcpwarden"), nil
}

// DefaultPath is the audit log inside stateDir.
func DefaultPath(stateDir string) string { return filepath.Join(stateDir, "audit.jsonl") }

// Open opens (creating with mode 0600, parent 0700) the log at path.
func Open(path string) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create audit log directory: %w; pass --audit-log FILE or --state-dir DIR somewhere writable", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w; pass --audit-log FILE somewhere writable", err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, errors.New("audit log is not a regular file; pass --audit-log FILE")
	}
	return &Log{f: f, path: path}, nil
}

// Path is where the log is.
func (l *Log) Path() string { return l.path }

// Publish appends events, one JSON object per line, and syncs them to disk
// (with every record written before them).
func (l *Log) Publish(ctx context.Context, events []schema.Event) error {
	return l.publish(ctx, events, true)
}

// PublishDeferSync appends events as Publish does but leaves their sync to
// the next Publish or to Close, which sync every record written before
// them: for a last batch that is always followed by another record (the
// proxy's last decisions, then the run's exit record), one sync instead of
// two in a row at the end of a run.
func (l *Log) PublishDeferSync(ctx context.Context, events []schema.Event) error {
	return l.publish(ctx, events, false)
}

func (l *Log) publish(ctx context.Context, events []schema.Event, sync bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(events) == 0 && (!sync || !l.dirty) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.f == nil {
		return errors.New("audit log is closed")
	}
	buf := l.buf[:0]
	for i := range events {
		var err error
		if buf, err = appendEvent(buf, &events[i]); err != nil {
			return fmt.Errorf("encode audit record: %w", err)
		}
	}
	if cap(buf) <= maxKeptBuffer {
		l.buf = buf
	}
	if len(buf) > 0 {
		if _, err := l.f.Write(buf); err != nil {
			return fmt.Errorf("write audit log: %w", err)
		}
	}
	if !sync {
		l.dirty = true
		return nil
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync audit log: %w", err)
	}
	l.dirty = false
	return nil
}

// Close syncs what PublishDeferSync left unsynced, and closes the log.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	var err error
	if l.dirty {
		if err = l.f.Sync(); err != nil {
			err = fmt.Errorf("sync audit log: %w", err)
		}
		l.dirty = false
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}
