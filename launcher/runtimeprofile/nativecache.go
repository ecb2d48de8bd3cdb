package runtimeprofile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A walk of a package tree for native code (node_modules, site-packages)
// reads every directory of the tree and opens every candidate file: tens of
// milliseconds for a large node_modules, at every launch; resolving the
// libraries of a large executable (node's dynamic string table is
// megabytes) costs milliseconds more. Each result is cached in
// Options.NativeCache, one file per tree or executable, together with the
// identity (device, inode, mode, size, mtime and ctime) of every directory
// the walk read, of every ELF file it resolved, of every library it granted
// and of the directories those libraries were found in. A cached result is
// used only when every one of those identities is unchanged; anything else
// (a file added, removed or renamed anywhere in the tree changes its
// directory's mtime; an ELF rewritten or chmod'ed changes its ctime; a
// library upgraded changes its inode), and any doubt about the cache file
// itself (not ours, readable or writable by others, malformed, for another
// tree), walks the tree again. A result is not stored when anything it
// depends on changed in the last seconds before the walk: a change within
// the file system's timestamp granularity could go unnoticed.
//
// The cache never grants more than the walk would: the one change the
// identities above do not see is a file that was not an ELF executable
// becoming one in place (rewritten without a rename, as the same inode in a
// directory whose entries did not change), which the cache then does not
// grant: the server is denied it (fail closed).

// nativeCacheVersion changes whenever what a walk grants, or the file
// format, changes.
const nativeCacheVersion = 2

// maxNativeCacheBytes bounds a cache file read back.
const maxNativeCacheBytes = 32 << 20

// racyWindow: a result depending on anything changed this recently is not
// stored.
const racyWindow = 2 * time.Second

// fileID is the identity of a file or directory as lstat reports it.
type fileID struct {
	Path  string `json:"p"`
	Dev   uint64 `json:"d"`
	Ino   uint64 `json:"i"`
	Mode  uint32 `json:"m"`
	Size  int64  `json:"s"`
	Mtime int64  `json:"mt"` // ns
	Ctime int64  `json:"ct"` // ns
	// Absent: the path did not exist (a loader search directory this host
	// lacks); it must still not.
	Absent bool `json:"a,omitempty"`
}

func lstatID(p string) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fileID{}, false
	}
	return fileID{Path: p, Dev: uint64(st.Dev), Ino: st.Ino, Mode: st.Mode, Size: st.Size,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}, true
}

// nativeKey is what a walk's result depends on besides the files.
type nativeKey struct {
	Version     int      `json:"v"`
	Root        string   `json:"root"`
	Kind        string   `json:"kind"` // "node" or "python": which files are addons
	Executables bool     `json:"executables"`
	Search      []string `json:"search"` // the loader's search directories
	Class       int      `json:"class"`
	Machine     int      `json:"machine"`
}

func (k nativeKey) equal(o nativeKey) bool {
	return k.Version == o.Version && k.Root == o.Root && k.Kind == o.Kind && k.Executables == o.Executables &&
		slices.Equal(k.Search, o.Search) && k.Class == o.Class && k.Machine == o.Machine
}

func (k nativeKey) file(dir string) string {
	sum := sha256.Sum256(k.appendLine(nil))
	return filepath.Join(dir, "native-"+hex.EncodeToString(sum[:16])+".scan")
}

// appendLine writes k as the cache file's key line: "k", the version, 0
// or 1 for Executables, the class and the machine, then the kind, the
// root and each search directory Go-quoted, separated by single spaces.
// The file's name is the hash of this line.
func (k nativeKey) appendLine(b []byte) []byte {
	exe := 0
	if k.Executables {
		exe = 1
	}
	b = fmt.Appendf(b, "k %d %d %d %d ", k.Version, exe, k.Class, k.Machine)
	b = strconv.AppendQuote(b, k.Kind)
	b = strconv.AppendQuote(append(b, ' '), k.Root)
	for _, d := range k.Search {
		b = strconv.AppendQuote(append(b, ' '), d)
	}
	return b
}

// nativeScan is what a walk (or an executable's resolution) found: the
// entries to grant, in order, the literal names its files are opened by,
// and the identities they depend on.
type nativeScan struct {
	Key       nativeKey
	Entries   []Entry
	Names     []string
	Depends   []fileID
	truncated bool
}

// The cache file: a magic line, the key line (nativeKey.appendLine), one
// line per entry ("e", the class, the path and the reason Go-quoted), one
// per literal name ("n" and the name Go-quoted), then one line per
// dependency, "dev ino mode size mtime ctime absent path" with the path
// Go-quoted: fast to read back, since a large tree has thousands of
// directories, and without encoding/json, whose encoder and decoder of
// these types cost every launch about a tenth of a millisecond to build.
const nativeCacheMagic = "mcpwarden-native-cache"

func (s *nativeScan) encode() ([]byte, error) {
	buf := make([]byte, 0, 256+len(s.Entries)*96+len(s.Depends)*96)
	buf = append(buf, nativeCacheMagic+" "+strconv.Itoa(nativeCacheVersion)+"\n"...)
	buf = append(s.Key.appendLine(buf), '\n')
	for _, e := range s.Entries {
		buf = strconv.AppendQuote(append(buf, "e "...), string(e.Class))
		buf = strconv.AppendQuote(append(buf, ' '), e.Path)
		buf = strconv.AppendQuote(append(buf, ' '), e.Reason)
		buf = append(buf, '\n')
	}
	for _, n := range s.Names {
		buf = append(strconv.AppendQuote(append(buf, "n "...), n), '\n')
	}
	for _, d := range s.Depends {
		abs := 0
		if d.Absent {
			abs = 1
		}
		buf = fmt.Appendf(buf, "%d %d %d %d %d %d %d %s\n", d.Dev, d.Ino, d.Mode, d.Size, d.Mtime, d.Ctime, abs, strconv.Quote(d.Path))
	}
	return buf, nil
}

// quotedFields reads l as Go-quoted strings separated by single spaces
// (nothing before the first, after the last or between them).
func quotedFields(l string) ([]string, bool) {
	var out []string
	for {
		q, err := strconv.QuotedPrefix(l)
		if err != nil || q[0] != '"' {
			return nil, false
		}
		v, err := strconv.Unquote(q)
		if err != nil {
			return nil, false
		}
		out = append(out, v)
		l = l[len(q):]
		if l == "" {
			return out, true
		}
		if l[0] != ' ' {
			return nil, false
		}
		l = l[1:]
	}
}

// decodeKeyLine reads a key line (nativeKey.appendLine).
func decodeKeyLine(l string) (nativeKey, bool) {
	f := strings.SplitN(l, " ", 6)
	if len(f) != 6 || f[0] != "k" {
		return nativeKey{}, false
	}
	var n [4]int
	for i := range n {
		v, err := strconv.Atoi(f[i+1])
		if err != nil {
			return nativeKey{}, false
		}
		n[i] = v
	}
	q, ok := quotedFields(f[5])
	if !ok || len(q) < 2 || n[1] < 0 || n[1] > 1 {
		return nativeKey{}, false
	}
	k := nativeKey{Version: n[0], Executables: n[1] == 1, Class: n[2], Machine: n[3], Kind: q[0], Root: q[1]}
	if len(q) > 2 {
		k.Search = q[2:]
	}
	return k, true
}

func decodeScanBytes(b []byte) (*nativeScan, bool) {
	line := func() ([]byte, bool) {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil, false
		}
		l := b[:i]
		b = b[i+1:]
		return l, true
	}
	magic, ok := line()
	if !ok || string(magic) != nativeCacheMagic+" "+strconv.Itoa(nativeCacheVersion) {
		return nil, false
	}
	kl, ok := line()
	if !ok {
		return nil, false
	}
	key, ok := decodeKeyLine(string(kl))
	if !ok {
		return nil, false
	}
	s := &nativeScan{Key: key}
	for len(b) > 0 {
		l, ok := line()
		if !ok {
			return nil, false
		}
		if rest, isEntry := bytes.CutPrefix(l, []byte("e ")); isEntry {
			q, ok := quotedFields(string(rest))
			if !ok || len(q) != 3 || len(s.Names) > 0 || len(s.Depends) > 0 {
				return nil, false
			}
			s.Entries = append(s.Entries, Entry{Class: Class(q[0]), Path: q[1], Reason: q[2]})
			continue
		}
		if rest, isName := bytes.CutPrefix(l, []byte("n ")); isName {
			q, ok := quotedFields(string(rest))
			if !ok || len(q) != 1 || len(s.Depends) > 0 {
				return nil, false
			}
			s.Names = append(s.Names, q[0])
			continue
		}
		f := strings.SplitN(string(l), " ", 8)
		if len(f) != 8 {
			return nil, false
		}
		var n [7]int64
		for i := range 7 {
			v, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return nil, false
			}
			n[i] = v
		}
		p, err := strconv.Unquote(f[7])
		if err != nil || n[6] < 0 || n[6] > 1 {
			return nil, false
		}
		s.Depends = append(s.Depends, fileID{Path: p, Dev: uint64(n[0]), Ino: uint64(n[1]), Mode: uint32(n[2]), Size: n[3],
			Mtime: n[4], Ctime: n[5], Absent: n[6] == 1})
	}
	return s, true
}

// valid reports whether everything s depends on is unchanged. A large
// tree has thousands of directories: they are checked on every CPU.
func (s *nativeScan) valid() bool {
	if len(s.Depends) == 0 {
		return false // at least the tree's root
	}
	workers := min(runtime.GOMAXPROCS(0), 1+len(s.Depends)/512)
	var bad atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(s.Depends) && !bad.Load(); i += workers {
				if !unchanged(s.Depends[i]) {
					bad.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return !bad.Load()
}

func unchanged(want fileID) bool {
	got, ok := lstatID(want.Path)
	if want.Absent {
		_, err := os.Lstat(want.Path)
		return errors.Is(err, fs.ErrNotExist)
	}
	return ok && got == want
}

// racy reports whether anything s depends on changed after cutoff.
func (s *nativeScan) racy(cutoff int64) bool {
	for _, d := range s.Depends {
		if d.Mtime >= cutoff || d.Ctime >= cutoff {
			return true
		}
	}
	return false
}

// cacheDirOK reports whether dir is a directory of this user that nobody
// else may write to or read.
func cacheDirOK(dir string) bool {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return false
	}
	return st.Mode&syscall.S_IFMT == syscall.S_IFDIR && int(st.Uid) == os.Geteuid() && st.Mode&0o077 == 0
}

// loadNativeScan reads the cached scan for key from dir, or returns false.
func loadNativeScan(dir string, key nativeKey) (*nativeScan, bool) {
	if !cacheDirOK(dir) {
		return nil, false
	}
	f, err := os.OpenFile(key.file(dir), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG ||
		int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 || st.Size > maxNativeCacheBytes {
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxNativeCacheBytes+1))
	if err != nil {
		return nil, false
	}
	return decodeNativeScan(b, key)
}

// decodeNativeScan parses a cache file for key and checks what it depends
// on.
func decodeNativeScan(b []byte, key nativeKey) (*nativeScan, bool) {
	s, ok := decodeScanBytes(b)
	if !ok || !s.Key.equal(key) {
		return nil, false
	}
	// Only what a walk itself grants: files and libraries, never a tree
	// or a device; every path absolute and clean.
	for i, e := range s.Entries {
		if (e.Class != ClassExec && e.Class != ClassRead) || !cleanAbs(e.Path) {
			return nil, false
		}
		if key.Kind == "elf" && e.Class == ClassExec && i > 0 {
			return nil, false // an executable's only exec entry is its interpreter, first
		}
	}
	for _, n := range s.Names {
		if !cleanAbs(n) {
			return nil, false
		}
	}
	if !s.valid() {
		return nil, false
	}
	return s, true
}

func cleanAbs(p string) bool { return filepath.IsAbs(p) && filepath.Clean(p) == p }

// storeNativeScan writes s to dir (created 0700), replacing the file
// atomically. Failing to store costs the next launch a walk, nothing else.
func storeNativeScan(dir string, s *nativeScan) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if !cacheDirOK(dir) {
		return fmt.Errorf("%s is not a directory of this user closed to others", dir)
	}
	b, err := s.encode()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".native-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), s.Key.file(dir))
	}
	if werr != nil {
		os.Remove(f.Name())
	}
	return werr
}

// cachedScan is the scan for key from the cache in dir, else compute's
// result, stored for next time unless it depends on something changed
// within racyWindow before now (dir "" caches nothing).
func cachedScan(dir string, key nativeKey, now func() time.Time, compute func() (*nativeScan, error)) (*nativeScan, error) {
	if dir != "" {
		if s, ok := loadNativeScan(dir, key); ok {
			return s, nil
		}
	}
	if now == nil {
		now = time.Now
	}
	cutoff := now().Add(-racyWindow).UnixNano()
	s, err := compute()
	if err != nil {
		return nil, err
	}
	s.Key = key
	if dir != "" && !s.truncated && !s.racy(cutoff) {
		_ = storeNativeScan(dir, s)
	}
	return s, nil
}

// depSet collects what a scan depends on, each path once.
type depSet struct {
	s    *nativeScan
	seen map[string]bool
}

func newDepSet(s *nativeScan) *depSet { return &depSet{s: s, seen: map[string]bool{}} }

// add records p's identity now. A search directory this host lacks
// (mayBeAbsent) must stay absent; any other file gone while we looked
// matches no identity, so the result is not reused.
func (d *depSet) add(p string, mayBeAbsent bool) {
	if d.seen[p] {
		return
	}
	d.seen[p] = true
	if id, ok := lstatID(p); ok {
		d.s.Depends = append(d.s.Depends, id)
	} else if _, err := os.Lstat(p); mayBeAbsent && errors.Is(err, fs.ErrNotExist) {
		d.s.Depends = append(d.s.Depends, fileID{Path: p, Absent: true})
	} else {
		d.s.Depends = append(d.s.Depends, fileID{Path: p})
	}
}

// search records the loader's search directories: a library found in a
// later one moves when one of the same name appears in an earlier one.
func (d *depSet) search(search LibSearch) {
	for _, dir := range search.Dirs {
		d.add(dir, true)
	}
}

// cachedELF is ResolveELF(exe), from the cache when nothing it depends on
// changed: exe, its interpreter, every library and the directory it was
// found in, every name opened on the way, and the search directories.
func (b *builder) cachedELF(exe string) (ELFDeps, error) {
	key := nativeKey{Version: nativeCacheVersion, Root: exe, Kind: "elf",
		Search: b.opt.Search.Dirs, Class: int(nativeClass()), Machine: int(nativeMachine())}
	s, err := cachedScan(b.opt.NativeCache, key, b.opt.now, func() (*nativeScan, error) {
		s := &nativeScan{}
		d := newDepSet(s)
		d.add(exe, false) // before reading it: a later rewrite moves its ctime
		deps, err := ResolveELF(exe, b.opt.Search)
		if err != nil {
			return nil, err
		}
		if deps.Interp != "" {
			d.add(deps.Interp, false)
			s.Entries = append(s.Entries, Entry{Path: deps.Interp, Class: ClassExec, Reason: "ELF program interpreter"})
		}
		for _, l := range deps.Libs {
			d.add(l, false)
			d.add(filepath.Dir(l), false)
			s.Entries = append(s.Entries, Entry{Path: l, Class: ClassRead, Reason: "shared library (DT_NEEDED)"})
		}
		for _, n := range deps.Names {
			d.add(n, false)
			d.add(filepath.Dir(n), false)
		}
		s.Names = deps.Names
		d.search(b.opt.Search)
		return s, nil
	})
	if err != nil {
		return ELFDeps{}, err
	}
	var deps ELFDeps
	for _, e := range s.Entries {
		if e.Class == ClassExec {
			deps.Interp = e.Path
		} else {
			deps.Libs = append(deps.Libs, e.Path)
		}
	}
	deps.Names = s.Names
	return deps, nil
}
