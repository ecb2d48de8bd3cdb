package runcmd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/mcpwarden/mcpwarden/hostconfig"
	"github.com/mcpwarden/mcpwarden/schema"
)

// LoadScope reads, parses and canonicalizes a scope file against base.
func LoadScope(file, base string) (*schema.CanonicalScope, error) {
	s, err := schema.ReadScopeFile(file)
	if err != nil {
		return nil, err
	}
	return schema.Canonicalize(s, base, time.Now())
}

// DiscoverDaemon reports whether a daemon's socket is at path. A socket
// this user may not even look for is a daemon it cannot reach: an error.
func DiscoverDaemon(path string) (bool, error) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case errors.Is(err, fs.ErrPermission):
		return false, fmt.Errorf("a daemon's socket directory %s exists but this user may not reach it: ask for its socket group, or set daemon_socket to %q to run unobserved", filepath.Dir(path), hostconfig.Off)
	}
	return false, fmt.Errorf("look for the daemon's socket %s: %w", path, err)
}
