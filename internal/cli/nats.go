package cli

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// DaemonStateDir is where the daemon (root) keeps its state by default,
// among it the embedded NATS server's credentials (nats-auth/).
const DaemonStateDir = "/var/lib/mcpwarden"

// DefaultNATS is the embedded server's URL on this host.
const DefaultNATS = "nats://127.0.0.1:4222"

// NATSFlags is the one set of NATS connection flags every command that
// talks to NATS takes (daemon, events, why, collect, run): where, who
// (a .creds file, an nkey seed, or a user and a password file) and TLS.
type NATSFlags struct {
	URL, Creds, NKey, User, PasswordFile, CA, Cert, Key string
}

// AddNATSFlags registers the flags; defaultURL is the command's default
// (empty: the command runs or needs no NATS unless --nats is given) and
// urlUsage says what --nats means for it.
func AddNATSFlags(fs *flag.FlagSet, defaultURL, urlUsage string) *NATSFlags {
	n := &NATSFlags{}
	fs.StringVar(&n.URL, "nats", defaultURL, urlUsage)
	fs.StringVar(&n.Creds, "nats-creds", "", "NATS credentials `FILE` (.creds: JWT and nkey seed) for fleet accounts")
	fs.StringVar(&n.NKey, "nats-nkey", "", "NATS nkey seed `FILE` (default, for the daemon's embedded server on this host: STATE_DIR/nats-auth/ROLE.nk, root-only)")
	fs.StringVar(&n.User, "nats-user", "", "NATS user `NAME` (with --nats-password-file)")
	fs.StringVar(&n.PasswordFile, "nats-password-file", "", "`FILE` holding the NATS user's password (not on the command line, where every local user could read it)")
	fs.StringVar(&n.CA, "nats-tls-ca", "", "CA `FILE` to verify the NATS server's TLS certificate")
	fs.StringVar(&n.Cert, "nats-tls-cert", "", "client certificate `FILE` for NATS TLS")
	fs.StringVar(&n.Key, "nats-tls-key", "", "client key `FILE` for NATS TLS")
	return n
}

// Given reports whether a credential was named on the command line.
func (n *NATSFlags) Given() bool {
	return n.Creds != "" || n.NKey != "" || n.User != "" || n.PasswordFile != ""
}

// LoopbackURL reports whether every server of a NATS URL list is on this
// host.
func LoopbackURL(list string) bool {
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

// AuthHint adds, to an error connecting to the embedded server on this
// host, what to do about it.
func AuthHint(err error, n *NATSFlags) error {
	if err != nil && LoopbackURL(n.URL) && strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		return fmt.Errorf("%w: the daemon's embedded NATS takes only its own users; run this command as root on the daemon's host (the keys are in %s/nats-auth, or pass --state-dir) or pass --nats-nkey FILE", err, DaemonStateDir)
	}
	return err
}
