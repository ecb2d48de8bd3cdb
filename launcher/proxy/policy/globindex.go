package policy

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// A glob's check needs the secrets under the effective scope. Listing them
// is a walk of the scope: done on every call, a text argument such as
// "**bold**" to a tool the proxy does not know (taken for a glob) cost one
// walk per call. The listing is kept instead (globIndex), with the stamp
// of every directory it read: the inode and the change time (ctime, which
// no process can set: it moves whenever an entry is created, removed or
// renamed in the directory, or the directory itself changes). A later
// call reuses the listing only when every directory still has its stamp,
// one lstat each, no read of any directory; any change re-walks. A
// directory that changed within racyWindow before the walk began, or
// during it, makes the listing untrusted (a change in the same clock tick
// as the read would leave the stamp as it was): such a listing serves
// only its own call, as before. A walk past maxGlobWalk is never kept.

// racyWindow: a directory stamped within this of the walk's start leaves
// the listing untrusted (file system clocks are coarse: a tick of a few
// milliseconds; one second leaves room for a clock step too).
const racyWindow = time.Second

type dirStamp struct {
	path  string
	ino   uint64
	ctime int64 // ns
}

// globIndex is the last trusted listing of the secrets under a set of
// effective directories.
type globIndex struct {
	mu      sync.Mutex
	key     string
	secrets []scopeSecret
	dirs    []dirStamp
	walks   int // walks made (tests)
}

func stampOf(path string) (dirStamp, bool) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return dirStamp{}, false
	}
	return dirStamp{path: path, ino: st.Ino, ctime: st.Ctim.Nano()}, true
}

// fresh reports whether every directory of the listing still has its
// stamp.
func (x *globIndex) fresh() bool {
	for _, d := range x.dirs {
		if s, ok := stampOf(d.path); !ok || s != d {
			return false
		}
	}
	return true
}

// secretsOf lists the secrets under dirs (bounded by maxGlobWalk), from
// the kept listing when no directory under them changed since it was
// made.
func (p *Policy) secretsOf(dirs []string) ([]scopeSecret, *Denial) {
	x := p.globs
	key := strings.Join(dirs, "\x00")
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.key == key && x.dirs != nil && x.fresh() {
		return x.secrets, nil
	}
	x.key, x.secrets, x.dirs = "", nil, nil
	x.walks++
	start := time.Now().Add(-racyWindow).UnixNano()
	trusted := true
	var secrets []scopeSecret
	var stamps []dirStamp
	walked := 0
	for _, dir := range dirs {
		found, ds, d := p.walkSecrets(dir, &walked)
		if d != nil {
			return nil, d
		}
		secrets = append(secrets, found...)
		for _, s := range ds {
			if s.ctime >= start {
				trusted = false
			}
		}
		stamps = append(stamps, ds...)
	}
	if trusted {
		x.key, x.secrets, x.dirs = key, secrets, stamps
		if x.dirs == nil {
			x.dirs = []dirStamp{}
		}
	}
	return secrets, nil
}

// walkSecrets lists the secrets under dir (no symlinks followed),
// relative to dir, and the stamps of the directories read (each taken
// before the directory is read); walked counts the entries against
// maxGlobWalk.
func (p *Policy) walkSecrets(dir string, walked *int) ([]scopeSecret, []dirStamp, *Denial) {
	var out []scopeSecret
	var stamps []dirStamp
	if s, ok := stampOf(dir); ok {
		stamps = append(stamps, s)
	}
	errBound := errors.New("bound")
	err := filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: the server cannot read it either
		}
		if *walked++; *walked > maxGlobWalk {
			return errBound
		}
		if path != dir && de.IsDir() {
			// Stamped before WalkDir reads it (it reads a directory
			// after this call).
			if s, ok := stampOf(path); ok {
				stamps = append(stamps, s)
			}
		}
		if path != dir && p.secrets.Match(path) {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, scopeSecret{abs: path, rel: strings.Split(rel, "/")})
		}
		return nil
	})
	if errors.Is(err, errBound) {
		return nil, nil, deny(schema.ErrMalformedRequest, "the directory holds more than %d entries, too many to check a glob against its secrets: name the files, or search a narrower directory", maxGlobWalk)
	}
	return out, stamps, nil
}
