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
	"syscall"

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
//
// The log must be this user's own: a root launcher may be pointed at a
// shared place (a sticky directory such as /tmp, where hosts may follow
// symlinks), and another user who prepared the path must not be able to
// redirect the records into a file of its choice (a symlink), keep or
// rewrite them (a file, or a hard link, of its own; a directory it owns or
// anyone may write to without the sticky bit, where it could swap the log
// afterwards) or hang the run (a FIFO). Each is refused, naming what is
// wrong and how to fix it; nothing is written.
func Open(path string) (*Log, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create audit log directory: %w; pass --audit-log FILE or --state-dir DIR somewhere writable", err)
	}
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSymlink != 0 {
		return nil, errSymlink
	}
	// O_NOFOLLOW: a symlink in the last component fails (ELOOP), should
	// one be put there after the check;
	// O_NONBLOCK: a FIFO opens (or fails) at once instead of waiting for a
	// reader, and is refused below.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, errSymlink
	}
	if errors.Is(err, syscall.ENXIO) {
		return nil, errors.New("audit log is not a regular file (a FIFO); remove it, or pass --audit-log FILE")
	}
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w; pass --audit-log FILE somewhere writable", err)
	}
	if err := checkFile(f); err != nil {
		f.Close()
		return nil, err
	}
	return &Log{f: f, path: path}, nil
}

var errSymlink = errors.New("audit log is a symlink (refused: whoever made it chose where the records go); remove it, or pass --audit-log FILE")

// checkFile refuses an open log that is not a regular file, not this
// user's, linked from elsewhere, or writable by group or others.
func checkFile(f *os.File) error {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return errors.New("audit log is not a regular file; pass --audit-log FILE")
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("audit log: cannot read its owner")
	}
	if int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("audit log is owned by uid %d, not by this user (uid %d): whoever owns it could rewrite or drop the records; remove it, or pass --audit-log FILE", sys.Uid, os.Geteuid())
	}
	if sys.Nlink != 1 {
		return fmt.Errorf("audit log has %d links (a hard link makes the records also another file's); remove the other names, or pass --audit-log FILE", sys.Nlink)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("audit log may be written by group or others (mode %v); fix it with 'chmod 600', or pass --audit-log FILE", st.Mode().Perm())
	}
	return nil
}

// checkDir refuses a log directory owned by another user than root or this
// one, or one group or others may write to without the sticky bit: its
// owner or writers could replace the log after the run opened it.
func checkDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("audit log directory: %w", err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("audit log directory: cannot read its owner")
	}
	if sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("audit log directory is owned by uid %d, neither root nor this user (uid %d): its owner could replace the log; pass --audit-log FILE in a directory of your own", sys.Uid, os.Geteuid())
	}
	if st.Mode().Perm()&0o022 != 0 && st.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("audit log directory may be written by group or others and is not sticky (mode %v): they could replace the log; pass --audit-log FILE in a directory of your own, or make it sticky (chmod +t)", st.Mode().Perm())
	}
	return nil
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
