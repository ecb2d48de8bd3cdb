package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// daemonStateDir is where the daemon (root) keeps its state by default,
// among it the embedded NATS server's credentials (nats-auth/).
const daemonStateDir = "/var/lib/mcpwarden"

// defaultNATS is the embedded server's URL on this host.
const defaultNATS = "nats://127.0.0.1:4222"

// natsFlags is the one set of NATS connection flags every command that
// talks to NATS takes (daemon, events, why, collect, run): where, who
// (a .creds file, an nkey seed, or a user and a password file) and TLS.
type natsFlags struct {
	url, creds, nkey, user, passwordFile, ca, cert, key string
}

// addNATSFlags registers the flags; defaultURL is the command's default
// (empty: the command runs or needs no NATS unless --nats is given) and
// urlUsage says what --nats means for it.
func addNATSFlags(fs *flag.FlagSet, defaultURL, urlUsage string) *natsFlags {
	n := &natsFlags{}
	fs.StringVar(&n.url, "nats", defaultURL, urlUsage)
	fs.StringVar(&n.creds, "nats-creds", "", "NATS credentials `FILE` (.creds: JWT and nkey seed) for fleet accounts")
	fs.StringVar(&n.nkey, "nats-nkey", "", "NATS nkey seed `FILE` (default, for the daemon's embedded server on this host: STATE_DIR/nats-auth/ROLE.nk, root-only)")
	fs.StringVar(&n.user, "nats-user", "", "NATS user `NAME` (with --nats-password-file)")
	fs.StringVar(&n.passwordFile, "nats-password-file", "", "`FILE` holding the NATS user's password (not on the command line, where every local user could read it)")
	fs.StringVar(&n.ca, "nats-tls-ca", "", "CA `FILE` to verify the NATS server's TLS certificate")
	fs.StringVar(&n.cert, "nats-tls-cert", "", "client certificate `FILE` for NATS TLS")
	fs.StringVar(&n.key, "nats-tls-key", "", "client key `FILE` for NATS TLS")
	return n
}

// given reports whether a credential was named on the command line.
func (n *natsFlags) given() bool {
	return n.creds != "" || n.nkey != "" || n.user != "" || n.passwordFile != ""
}

// options are the connection options for role: the flags, the role's
// inbox prefix and, when no credential is given and every server of the
// URL is on this host, the embedded server's seed for the role from
// stateDir (readable by root only).
func (n *natsFlags) options(role stream.Role, host, name, stateDir string) (stream.ConnOptions, error) {
	o := stream.ConnOptions{URL: n.url, CredsFile: n.creds, NkeyFile: n.nkey, User: n.user,
		CAFile: n.ca, CertFile: n.cert, KeyFile: n.key, Name: name, InboxPrefix: role.Inbox(host)}
	if n.passwordFile != "" {
		b, err := os.ReadFile(n.passwordFile)
		if err != nil {
			return o, fmt.Errorf("--nats-password-file: %w", err)
		}
		o.Password = strings.TrimRight(string(b), "\r\n")
		if o.Password == "" {
			return o, errors.New("--nats-password-file: the file is empty")
		}
	}
	if n.given() || !loopbackURL(n.url) {
		return o, nil
	}
	if stateDir == "" {
		stateDir = daemonStateDir
	}
	seed := natsserver.SeedFile(natsserver.CredentialsDir(stateDir), role)
	f, err := os.Open(seed)
	switch {
	case err == nil:
		f.Close()
		o.NkeyFile = seed
	case errors.Is(err, fs.ErrPermission):
		return o, fmt.Errorf("the daemon's embedded NATS takes only its own users, whose keys are root-only: %s is not readable by this user; run this command as root (or pass --nats-nkey FILE)", seed)
	case !errors.Is(err, fs.ErrNotExist):
		return o, fmt.Errorf("NATS credentials %s: %w", seed, err)
	}
	return o, nil
}

// loopbackURL reports whether every server of a NATS URL list is on this
// host.
func loopbackURL(list string) bool {
	if list == "" {
		return false
	}
	for _, u := range strings.Split(list, ",") {
		u = strings.TrimSpace(u)
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		p, err := url.Parse(u)
		if err != nil {
			return false
		}
		h := p.Hostname()
		if ip := net.ParseIP(h); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return true
}

// authHint adds, to an error connecting to the embedded server on this
// host, what to do about it.
func authHint(err error, n *natsFlags) error {
	if err != nil && loopbackURL(n.url) && strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		return fmt.Errorf("%w: the daemon's embedded NATS takes only its own users; run this command as root on the daemon's host (the keys are in %s/nats-auth, or pass --state-dir) or pass --nats-nkey FILE", err, daemonStateDir)
	}
	return err
}
