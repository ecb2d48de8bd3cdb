package stream

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/localpeer"
)

// ErrForeignLocalServer is the refusal of a NATS server on this host whose
// socket belongs to another user than root or this client's.
var ErrForeignLocalServer = errors.New("NATS server on this host run by another user")

// ownerCheckDialer dials NATS and, for a server on this host (its socket is
// in this network namespace's TCP tables), checks who owns the server's
// end of the connection before the client says anything: root, or the
// client's own user. The embedded server listens on a loopback port above
// 1024 and speaks no TLS, so without this any local user who takes the
// port while the daemon is down (a restart, a crash) is the server: it
// takes every nkey signature as it comes, acknowledges what publishers
// send (the records leave their spool and are lost) and feeds collectors
// and readers forged events in any host's name. Every dial is checked,
// reconnections too. With a CA (--nats-tls-ca) TLS authenticates the
// server instead and this dialer is not used.
type ownerCheckDialer struct {
	d net.Dialer
}

func (o *ownerCheckDialer) Dial(network, address string) (net.Conn, error) {
	c, err := o.d.Dial(network, address)
	if err != nil {
		return nil, err
	}
	if err := checkLocalServer(c, os.Geteuid()); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// checkLocalServer refuses c when its other end is a socket of this host
// owned by neither root nor uid.
func checkLocalServer(c net.Conn, uid int) error {
	owner, local, err := localpeer.Owner(c)
	if err != nil {
		return fmt.Errorf("NATS at %s: cannot tell who runs the server on this host: %w (a server on this host without TLS must be root's or this user's; give --nats-tls-ca to authenticate it by certificate)", c.RemoteAddr(), err)
	}
	if local && owner != 0 && owner != uid {
		return fmt.Errorf("%w: the server at %s is run by uid %d, not root or this user (uid %d): another local user may have taken the port while mcpwarden's server was down; stop it, or give --nats-tls-ca to authenticate a server run by a user of its own", ErrForeignLocalServer, c.RemoteAddr(), owner, uid)
	}
	return nil
}

// dialTimeout is nats.go's default connect timeout, which a custom dialer
// must set itself.
const dialTimeout = 2 * time.Second
