package schema

import (
	"bytes"
	"os"
	"path/filepath"
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
