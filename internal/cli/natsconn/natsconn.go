// Package natsconn turns the NATS flags of internal/cli into connection
// options. It is apart from internal/cli because it links the NATS client
// (transport/stream), which mcpwarden, the program every server start
// runs, does not: only mcpwarden-pipeline's commands connect to NATS.
package natsconn

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// Options are the connection options for role: the flags n, the role's
// inbox prefix and, when no credential is given and every server of the
// URL is on this host, the embedded server's seed for the role from
// stateDir (readable by root only).
func Options(n *cli.NATSFlags, role stream.Role, host, name, stateDir string) (stream.ConnOptions, error) {
	o := stream.ConnOptions{URL: n.URL, CredsFile: n.Creds, NkeyFile: n.NKey, User: n.User,
		CAFile: n.CA, CertFile: n.Cert, KeyFile: n.Key, Name: name, InboxPrefix: role.Inbox(host)}
	if n.PasswordFile != "" {
		b, err := os.ReadFile(n.PasswordFile)
		if err != nil {
			return o, fmt.Errorf("--nats-password-file: %w", err)
		}
		o.Password = strings.TrimRight(string(b), "\r\n")
		if o.Password == "" {
			return o, errors.New("--nats-password-file: the file is empty")
		}
	}
	if n.Given() || !cli.LoopbackURL(n.URL) {
		return o, nil
	}
	if stateDir == "" {
		stateDir = cli.DaemonStateDir
	}
	seed := stream.SeedFile(stream.CredentialsDir(stateDir), role)
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
