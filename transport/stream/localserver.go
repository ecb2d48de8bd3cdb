package stream

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
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
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return nil
	}
	l, r := local.AddrPort(), remote.AddrPort()
	owner, found, err := socketOwner(r, l)
	if err != nil {
		return fmt.Errorf("NATS at %s: cannot tell who runs the server on this host: %w (a server on this host without TLS must be root's or this user's; give --nats-tls-ca to authenticate it by certificate)", remote, err)
	}
	if !found {
		if unmap(r.Addr()).IsLoopback() {
			return fmt.Errorf("NATS at %s: the server's end of the connection is not in this host's TCP tables; refusing a loopback server that cannot be identified", remote)
		}
		return nil // another host: its identity is TLS's business
	}
	if owner != 0 && owner != uid {
		return fmt.Errorf("%w: the server at %s is run by uid %d, not root or this user (uid %d): another local user may have taken the port while mcpwarden's server was down; stop it, or give --nats-tls-ca to authenticate a server run by a user of its own", ErrForeignLocalServer, remote, owner, uid)
	}
	return nil
}

// socketOwner finds the TCP socket of this network namespace whose local
// address is local and remote address remote, and returns its owner's uid.
func socketOwner(local, remote netip.AddrPort) (uid int, found bool, err error) {
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		uid, found, err := socketOwnerIn(file, local, remote)
		if err != nil && !(errors.Is(err, os.ErrNotExist) && file == "/proc/net/tcp6") {
			return 0, false, err
		}
		if found {
			return uid, true, nil
		}
	}
	return 0, false, nil
}

func socketOwnerIn(file string, local, remote netip.AddrPort) (int, bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		uid, ok := matchTCPLine(sc.Text(), local, remote)
		if ok {
			return uid, true, nil
		}
	}
	return 0, false, sc.Err()
}

// matchTCPLine reads one line of /proc/net/tcp{,6}:
//
//	sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
//
// and reports its uid when its addresses are local and remote.
func matchTCPLine(line string, local, remote netip.AddrPort) (int, bool) {
	f := strings.Fields(line)
	if len(f) < 8 {
		return 0, false
	}
	la, ok1 := parseProcAddr(f[1])
	ra, ok2 := parseProcAddr(f[2])
	if !ok1 || !ok2 || !sameAddrPort(la, local) || !sameAddrPort(ra, remote) {
		return 0, false
	}
	uid, err := strconv.ParseUint(f[7], 10, 32)
	if err != nil {
		return 0, false
	}
	return int(uid), true
}

// parseProcAddr decodes "0100007F:1092" (IPv4) or 32 hex digits ":port"
// (IPv6): the address as 32-bit words in the host's byte order, the port
// in hex.
func parseProcAddr(s string) (netip.AddrPort, bool) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(a, uint16(port)), true
}

func unmap(a netip.Addr) netip.Addr { return a.Unmap() }

func sameAddrPort(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && unmap(a.Addr()) == unmap(b.Addr())
}

// dialTimeout is nats.go's default connect timeout, which a custom dialer
// must set itself.
const dialTimeout = 2 * time.Second
