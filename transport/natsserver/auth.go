package natsserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// Credentials are the embedded server's users: one nkey per role, kept as
// seed files (0600) in a directory (0700) that only the daemon's user may
// read. Clients authenticate by signing the server's challenge with the
// seed (stream.ConnOptions.NkeyFile); the seed never crosses the wire.
type Credentials struct {
	Dir    string
	public map[stream.Role]string
}

// LoadOrCreateCredentials reads the role seeds in dir, creating the
// directory and any missing seed (first start). It refuses a directory or
// file that another user owns or that group or others may access: a seed
// anyone can read is a credential anyone holds.
func LoadOrCreateCredentials(dir string) (*Credentials, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded NATS credentials: create %s: %w", dir, err)
	}
	if err := checkPrivate(dir, true); err != nil {
		return nil, err
	}
	c := &Credentials{Dir: dir, public: map[stream.Role]string{}}
	for _, r := range stream.Roles {
		file := stream.SeedFile(dir, r)
		seed, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			if seed, err = createSeed(file); err != nil {
				return nil, err
			}
		} else if err != nil {
			return nil, fmt.Errorf("embedded NATS credentials: read %s: %w", file, err)
		}
		if err := checkPrivate(file, false); err != nil {
			return nil, err
		}
		pub, err := publicKey(seed)
		if err != nil {
			return nil, fmt.Errorf("embedded NATS credentials: %s: %w; delete it to generate a new one (clients holding the old one must be given the new file)", file, err)
		}
		c.public[r] = pub
	}
	return c, nil
}

// PublicKey is role r's nkey public key.
func (c *Credentials) PublicKey(r stream.Role) string { return c.public[r] }

// createSeed writes a new user seed to file; a concurrent creator's seed wins.
func createSeed(file string) ([]byte, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("embedded NATS credentials: generate a key: %w", err)
	}
	defer kp.Wipe()
	raw, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("embedded NATS credentials: %w", err)
	}
	seed := append([]byte(nil), raw...) // Wipe clears the key pair's own copy
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("embedded NATS credentials: create %s: %w", file, err)
	}
	_, werr := f.Write(append(seed, '\n'))
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		os.Remove(file)
		return nil, fmt.Errorf("embedded NATS credentials: write %s: %w", file, err)
	}
	return seed, nil
}

// publicKey parses a seed file's content (the seed alone, or decorated as
// the nk tool writes it) and returns its user public key.
func publicKey(content []byte) (string, error) {
	var seed []byte
	for _, line := range strings.Split(string(content), "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "SU") {
			seed = []byte(l)
			break
		}
	}
	if seed == nil {
		return "", errors.New("holds no nkey user seed")
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return "", err
	}
	defer kp.Wipe()
	return kp.PublicKey()
}

// checkPrivate refuses a path that is not owned by this process's user or
// that group or others may read, write or enter.
func checkPrivate(path string, dir bool) error {
	st, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("embedded NATS credentials: %w", err)
	}
	what, want := "file", "chmod 600"
	if dir {
		what, want = "directory", "chmod 700"
	}
	switch {
	case dir && !st.IsDir(), !dir && !st.Mode().IsRegular():
		return fmt.Errorf("embedded NATS credentials: %s is not a regular %s (a symlink is refused)", path, what)
	case st.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("embedded NATS credentials: %s %s is accessible to group or others (mode %v): anyone who can read it can publish or read events; fix it with '%s %s'", what, path, st.Mode().Perm(), want, path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("embedded NATS credentials: %s %s is owned by uid %d, not by this user (uid %d): refusing to trust it", what, path, sys.Uid, os.Geteuid())
	}
	return nil
}

// nkeyUsers are the server's users: each role's public key with its
// permissions. host is the only host whose subjects the daemon may publish.
func (c *Credentials) nkeyUsers(host string) []*server.NkeyUser {
	perms := map[stream.Role]stream.Permissions{
		stream.RoleDaemon:    stream.HostPermissions(host, true),
		stream.RoleCollector: stream.CollectorPermissions(),
		stream.RoleReader:    stream.ReaderPermissions(stream.CrossCheckConsumer(host)),
	}
	users := make([]*server.NkeyUser, 0, len(stream.Roles))
	for _, r := range stream.Roles {
		users = append(users, &server.NkeyUser{Nkey: c.public[r], Permissions: ServerPermissions(perms[r])})
	}
	return users
}

// ServerPermissions turns a role's permissions into nats-server's.
func ServerPermissions(p stream.Permissions) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.PublishAllow, Deny: p.PublishDeny},
		Subscribe: &server.SubjectPermission{Allow: p.SubscribeAllow},
	}
}

// ClientOptions are the connection options for role r with the embedded
// server at url whose credentials are in dir: its seed and its inbox prefix.
func ClientOptions(url, dir string, r stream.Role, host, name string) stream.ConnOptions {
	return stream.ConnOptions{URL: url, NkeyFile: stream.SeedFile(dir, r), Name: name, InboxPrefix: r.Inbox(host)}
}
