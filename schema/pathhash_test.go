package schema

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
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
