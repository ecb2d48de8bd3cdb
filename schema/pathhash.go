package schema

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"sync"
)

// PathKeySize is the length in bytes of a deployment's path-hash key.
const PathKeySize = 32

// PathHasher turns canonical paths into keyed hashes. The key is per deployment,
// so a hash can be matched across hosts of one fleet but not reversed by
// guessing common paths without the key.
type PathHasher struct {
	key  []byte
	macs sync.Pool // of hash.Hash: keyed HMACs, Reset between uses
}

// NewPathHasher returns a hasher for key, which must be PathKeySize bytes.
func NewPathHasher(key []byte) (*PathHasher, error) {
	if len(key) != PathKeySize {
		return nil, fmt.Errorf("path hash key is %d bytes, want %d: regenerate it with 'head -c %d /dev/urandom > KEYFILE'", len(key), PathKeySize, PathKeySize)
	}
	return &PathHasher{key: append([]byte(nil), key...)}, nil
}

// Hash returns the keyed hash of path.
// It is on every decided call's path: the keyed HMAC is reused (Reset
// leaves the key in place) rather than set up per path.
func (h *PathHasher) Hash(path string) PathHash {
	m, _ := h.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, h.key)
	}
	m.Reset()
	_, _ = m.Write([]byte(path))
	var sum [sha256.Size]byte
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], m.Sum(sum[:0]))
	h.macs.Put(m)
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
	key, err := os.ReadFile(file)
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
