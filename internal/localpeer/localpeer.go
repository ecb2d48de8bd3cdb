// Package localpeer tells who runs the server at the other end of a TCP
// connection when that server is on this host: the kernel's TCP tables
// name the owner of every socket of this network namespace. Clients of a
// loopback service without TLS (the embedded NATS, a local ClickHouse)
// authenticate the server by it: any local user may listen on a port above
// 1024 while the real server is down.
package localpeer

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
)

// Owner reports the uid owning the server's end of c, and whether that
// end is on this host (in this network namespace's TCP tables). A loopback
// peer that is not found is an error: it cannot be identified.
func Owner(c net.Conn) (uid int, local bool, err error) {
	la, ok1 := c.LocalAddr().(*net.TCPAddr)
	ra, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, false, nil
	}
	l, r := la.AddrPort(), ra.AddrPort()
	uid, found, err := socketOwner(r, l)
	if err != nil {
		return 0, false, err
	}
	if !found && r.Addr().Unmap().IsLoopback() {
		return 0, false, errors.New("the server's end of the loopback connection is not in this host's TCP tables")
	}
	if found && uid == overflowUID() && !initialUserNS() {
		// In a user namespace that does not map the owner (systemd's
		// PrivateUsers=yes) the tables show every unmapped uid as the
		// overflow uid: the owner cannot be told, and a foreign user
		// shows the same.
		return 0, false, fmt.Errorf("the server's owner is not mapped in this process's user namespace (the kernel shows it as uid %d): run the client outside a private user namespace (systemd: PrivateUsers=no)", uid)
	}
	return uid, found, nil
}

// overflowUID is the uid the kernel shows for a uid the reader's user
// namespace does not map (65534 unless the host changed it).
func overflowUID() int {
	b, err := os.ReadFile("/proc/sys/kernel/overflowuid")
	if err != nil {
		return 65534
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 65534
	}
	return n
}

// initialUserNS reports whether this process's user namespace maps every
// uid to itself, as the initial one does.
func initialUserNS() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return identityMap(string(b))
}

// identityMap reports whether a uid_map is the initial namespace's: one
// line mapping 0 to 0 for all 4294967295 ids.
func identityMap(m string) bool {
	f := strings.Fields(m)
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// socketOwner finds the TCP socket of this network namespace whose local
// address is local and remote address remote, and returns its owner's uid.
// It reads /proc/self/net, the same tables as /proc/net: a process whose
// /proc is mounted with subset=pid (systemd's ProcSubset=pid, as in
// deploy/systemd's collector unit) has no /proc/net.
func socketOwner(local, remote netip.AddrPort) (uid int, found bool, err error) {
	for _, file := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		uid, found, err := socketOwnerIn(file, local, remote)
		if err != nil && !(errors.Is(err, os.ErrNotExist) && file == "/proc/self/net/tcp6") {
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

func sameAddrPort(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}
