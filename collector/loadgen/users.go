package loadgen

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// SeedFile is where host's nkey seed lives in a loadgen credentials
// directory: DIR/<host token>.nk.
func SeedFile(dir, host string) string {
	return filepath.Join(dir, stream.HostToken(host)+".nk")
}

// HostSeeds makes sure every host has a user nkey seed in dir (0600 files
// in a 0700 directory, created when missing) and returns each host's
// public key, for the NATS server's users (each with
// stream.HostPermissions of its own host).
func HostSeeds(dir string, hosts []string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("loadgen credentials: %w", err)
	}
	out := make(map[string]string, len(hosts))
	for _, h := range hosts {
		file := SeedFile(dir, h)
		seed, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			kp, err := nkeys.CreateUser()
			if err != nil {
				return nil, fmt.Errorf("loadgen credentials: %w", err)
			}
			seed, err = kp.Seed()
			if err != nil {
				return nil, fmt.Errorf("loadgen credentials: %w", err)
			}
			if err := os.WriteFile(file, append(seed, '\n'), 0o600); err != nil {
				return nil, fmt.Errorf("loadgen credentials: %w", err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("loadgen credentials: %w", err)
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
		if err != nil {
			return nil, fmt.Errorf("loadgen credentials: %s: %w", file, err)
		}
		pub, err := kp.PublicKey()
		kp.Wipe()
		if err != nil {
			return nil, fmt.Errorf("loadgen credentials: %s: %w", file, err)
		}
		out[h] = pub
	}
	return out, nil
}

// HostNames are n host names with prefix: PREFIX-0001, PREFIX-0002, ...
func HostNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i+1)
	}
	return out
}

// Hosts are the hosts of names, each connecting to url with its seed in
// dir and its own inbox prefix.
func Hosts(url, dir string, names []string) []Host {
	out := make([]Host, len(names))
	for i, h := range names {
		out[i] = Host{Name: h, NATS: stream.ConnOptions{URL: url, NkeyFile: SeedFile(dir, h), Name: "mcpwarden-loadgen@" + h, InboxPrefix: stream.HostInbox(h)}}
	}
	return out
}
