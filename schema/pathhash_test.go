package schema

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestPathHasher(t *testing.T) {
	key := bytes.Repeat([]byte{1}, PathKeySize)
	h, err := NewPathHasher(key)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewPathHasher(bytes.Repeat([]byte{2}, PathKeySize))
	a, b := h.Hash("/srv/ws/a"), h.Hash("/srv/ws/b")
	if a == b || a != h.Hash("/srv/ws/a") || a == other.Hash("/srv/ws/a") {
		t.Fatal("hash must be deterministic, path-sensitive and key-sensitive")
	}
	if len(a) != 64 {
		t.Fatalf("hash %q is not 64 hex chars", a)
	}
	if _, err := NewPathHasher([]byte("short")); err == nil {
		t.Fatal("short key accepted")
	}
}

func TestLoadOrCreatePathKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state", "path.key")
	k1, err := LoadOrCreatePathKey(file)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreatePathKey(file)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("second load: %v, equal=%v", err, bytes.Equal(k1, k2))
	}
	st, _ := os.Stat(file)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v, want 0600", st.Mode().Perm())
	}
	if err := os.WriteFile(file, []byte("truncated"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreatePathKey(file); err == nil {
		t.Fatal("corrupt key accepted")
	}
}

// TestKeyID: the id depends on the key, is stable, and is not a hash any
// path could produce.
func TestKeyID(t *testing.T) {
	a, _ := NewPathHasher(make([]byte, PathKeySize))
	k := make([]byte, PathKeySize)
	k[0] = 1
	b, _ := NewPathHasher(k)
	if a.KeyID() == b.KeyID() || !strings.HasPrefix(a.KeyID(), "pk1-") || len(a.KeyID()) != 20 {
		t.Errorf("key ids %q %q", a.KeyID(), b.KeyID())
	}
	for _, p := range []string{"mcpwarden path key id v1", "mcpwarden", "/mcpwarden/path key id v1"} { // a path holds no NUL
		if strings.HasPrefix(string(a.Hash(p)), strings.TrimPrefix(a.KeyID(), "pk1-")) {
			t.Errorf("the key id is the hash of %q", p)
		}
	}
}

// The reused HMAC gives every path the hash a fresh one gives it, from any
// number of goroutines at once, and costs three allocations (the path's
// bytes, the sum and the hash's text; a fresh HMAC took about eight).
func TestPathHasherReuseMatchesAFreshHMAC(t *testing.T) {
	key := bytes.Repeat([]byte{7}, PathKeySize)
	h, err := NewPathHasher(key)
	if err != nil {
		t.Fatal(err)
	}
	fresh := func(p string) PathHash {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(p))
		return PathHash(hex.EncodeToString(m.Sum(nil)))
	}
	paths := []string{"", "/", "/srv/base/allowed/probe.txt", "/srv/base/.env", strings.Repeat("/a", 300), "/été/ünïcode", strings.Repeat("/b", 2100)}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				p := paths[(g+i)%len(paths)]
				if got, want := h.Hash(p), fresh(p); got != want {
					t.Errorf("Hash(%q) = %s, want %s", p, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	if raceEnabled {
		return
	}
	h.Hash(paths[2]) // the pool holds one
	// One: the hash's text (the path and the sum went through hash.Hash
	// to the heap on every call too until session 8: 3).
	if n := testing.AllocsPerRun(200, func() { _ = h.Hash(paths[2]) }); n > 1 {
		t.Errorf("Hash: %v allocations, budget 1", n)
	}
}

// TestPlantedPathKeyIsRefused: a key someone else wrote (another user's, or
// one group or others may write) is refused, naming the file and the fix;
// this user's key, root's, and one shared read-only with a group are used.
func TestPlantedPathKeyIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  os.FileMode
		owner int // -1: this user
		ok    bool
	}{
		{"this user's, private", 0o600, -1, true},
		{"shared read-only with a group", 0o640, -1, true},
		{"writable by the group", 0o620, -1, false},
		{"writable by others", 0o602, -1, false},
		{"another user's", 0o600, 65534, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "path.key")
			if err := os.WriteFile(file, bytes.Repeat([]byte{7}, PathKeySize), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(file, tc.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			if tc.owner >= 0 {
				if os.Geteuid() != 0 {
					if os.Getenv("CI") == "true" {
						t.Fatal("this case needs root (chown)")
					}
					t.Skip("needs root (chown)")
				}
				if err := os.Chown(file, tc.owner, tc.owner); err != nil {
					t.Fatal(err)
				}
			}
			key, err := LoadOrCreatePathKey(file)
			if tc.ok {
				if err != nil || !bytes.Equal(key, bytes.Repeat([]byte{7}, PathKeySize)) {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "path.key") || !strings.Contains(err.Error(), "reverse the path hashes") {
				t.Fatalf("a planted key was used or refused without saying why: %v", err)
			}
		})
	}
}
