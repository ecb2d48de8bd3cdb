package schema

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// PathKeySize is the length in bytes of a deployment's path-hash key.
const PathKeySize = 32

// PathHasher turns canonical paths into keyed hashes. The key is per deployment,
// so a hash can be matched across hosts of one fleet but not reversed by
// guessing common paths without the key.
type PathHasher struct {
	key  []byte
	macs sync.Pool // of *keyedMAC: Reset between uses
}

// keyedMAC is a keyed HMAC with the buffers it hashes from and into, kept
// across uses: a path and a sum passed through the hash.Hash interface
// would each be copied to the heap on every call.
type keyedMAC struct {
	m   hash.Hash
	in  []byte
	sum []byte
}

// NewPathHasher returns a hasher for key, which must be PathKeySize bytes.
func NewPathHasher(key []byte) (*PathHasher, error) {
	if len(key) != PathKeySize {
		return nil, fmt.Errorf("path hash key is %d bytes, want %d: regenerate it with 'head -c %d /dev/urandom > KEYFILE'", len(key), PathKeySize, PathKeySize)
	}
	return &PathHasher{key: append([]byte(nil), key...)}, nil
}

// maxKeptPath bounds the path buffer a keyedMAC keeps for its next use.
const maxKeptPath = 4096

// Hash returns the keyed hash of path.
// It is on every decided call's path: the keyed HMAC and its buffers are
// reused (Reset leaves the key in place) rather than set up per path; the
// hash's text is the one allocation.
func (h *PathHasher) Hash(path string) PathHash {
	k, _ := h.macs.Get().(*keyedMAC)
	if k == nil {
		k = &keyedMAC{m: hmac.New(sha256.New, h.key), sum: make([]byte, 0, sha256.Size)}
	}
	k.m.Reset()
	k.in = append(k.in[:0], path...)
	_, _ = k.m.Write(k.in)
	k.sum = k.m.Sum(k.sum[:0])
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], k.sum)
	if cap(k.in) > maxKeptPath {
		k.in = nil
	}
	h.macs.Put(k)
	return PathHash(out[:])
}

// KeyID names the key without revealing it: the first 16 hex digits of
// its HMAC over a fixed label with a NUL in it, which no path can hold, so
// the id is no path's hash. The daemon reports it, and a launcher whose
// key differs refuses to run (their hashes of the same path would never
// match, and the cross-check would see every path as unexplained).
func (h *PathHasher) KeyID() string {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte("mcpwarden\x00path key id v1"))
	return "pk1-" + hex.EncodeToString(m.Sum(nil))[:16]
}

// LoadOrCreatePathKey reads the key at file, creating it (mode 0600, parent
// 0700) with random bytes when it does not exist yet.
func LoadOrCreatePathKey(file string) ([]byte, error) {
	key, err := readPathKey(file)
	if err == nil {
		if len(key) != PathKeySize {
			return nil, fmt.Errorf("path hash key %s is %d bytes, want %d: restore it from backup or delete it to start a new key (old hashes will no longer match)", filepath.Base(file), len(key), PathKeySize)
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read path hash key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return nil, fmt.Errorf("create state dir for path hash key: %w", err)
	}
	key = make([]byte, PathKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate path hash key: %w", err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return LoadOrCreatePathKey(file) // another process won the race; use its key
	}
	if err != nil {
		return nil, fmt.Errorf("create path hash key: %w", err)
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		return nil, fmt.Errorf("write path hash key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write path hash key: %w", err)
	}
	return key, nil
}

// readPathKey reads an existing key, refusing one that someone else could
// have planted or could change: owned by a user other than this process's
// or root, or writable by group or others (whoever wrote the key can
// reverse every path hash by guessing). A key shared read-only with a
// group (the daemon's, for the launchers of --socket-group) is fine.
func readPathKey(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("path hash key %s is owned by uid %d, not by this user or root: whoever wrote it can reverse the path hashes; delete it to start a new key, or name this user's key with --path-key", filepath.Base(file), st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("path hash key %s may be written by group or others (mode %#o): whoever wrote it can reverse the path hashes; chmod go-w it if it is yours, or delete it to start a new key", filepath.Base(file), fi.Mode().Perm())
	}
	return io.ReadAll(f)
}
