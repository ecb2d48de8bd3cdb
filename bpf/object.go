package bpf

import (
	"crypto/sha256"
	"encoding/hex"
)

// ObjectHash identifies the embedded eBPF object: pinned programs and maps
// of another object (another mcpwarden version) are not reused as they are.
func ObjectHash() string {
	sum := sha256.Sum256(_WatchBytes)
	return hex.EncodeToString(sum[:8])
}
