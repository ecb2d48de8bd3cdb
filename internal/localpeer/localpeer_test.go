package localpeer

import (
	"net/netip"
	"testing"
)

// TestMatchTCPLine reads lines of /proc/net/tcp and tcp6 as this kernel
// writes them (x86_64, little-endian words).
func TestMatchTCPLine(t *testing.T) {
	v4 := "   3: 0100007F:1092 0100007F:C350 01 00000000:00000000 00:00000000 00000000 65534        0 123456 1 0000000000000000 20 4 30 10 -1"
	mapped := "   1: 0000000000000000FFFF00000100007F:1092 0000000000000000FFFF00000100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 1 1"
	v6 := "   0: 00000000000000000000000001000000:1092 00000000000000000000000001000000:C350 01 00000000:00000000 00:00000000 00000000  1000        0 1 1"
	lo4 := func(p uint16) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), p) }
	lo6 := func(p uint16) netip.AddrPort { return netip.AddrPortFrom(netip.IPv6Loopback(), p) }
	for _, c := range []struct {
		name          string
		line          string
		local, remote netip.AddrPort
		uid           int
		ok            bool
	}{
		{"ipv4", v4, lo4(4242), lo4(50000), 65534, true},
		{"ipv4 other direction", v4, lo4(50000), lo4(4242), 0, false},
		{"ipv4 other port", v4, lo4(4222), lo4(50000), 0, false},
		{"v4-mapped in tcp6", mapped, lo4(4242), lo4(50000), 0, true},
		{"ipv6 loopback", v6, lo6(4242), lo6(50000), 1000, true},
		{"header", "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode", lo4(4242), lo4(50000), 0, false},
		{"short", "0: 0100007F:1092", lo4(4242), lo4(50000), 0, false},
		{"bad hex", "0: 0100007G:1092 0100007F:C350 01 0:0 0:0 0 7 0 1", lo4(4242), lo4(50000), 0, false},
		{"bad uid", "0: 0100007F:1092 0100007F:C350 01 0:0 0:0 0 x 0 1", lo4(4242), lo4(50000), 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			uid, ok := matchTCPLine(c.line, c.local, c.remote)
			if ok != c.ok || uid != c.uid {
				t.Fatalf("matchTCPLine = %d, %v; want %d, %v", uid, ok, c.uid, c.ok)
			}
		})
	}
}

// TestIdentityMap: only the initial user namespace's uid_map maps every
// uid to itself; systemd's PrivateUsers=yes maps root and one user.
func TestIdentityMap(t *testing.T) {
	for _, tc := range []struct {
		m    string
		want bool
	}{
		{"         0          0 4294967295\n", true},
		{"0 0 4294967295", true},
		{"         0          0          1\n     61234      61234          1\n", false},
		{"         0     100000      65536\n", false},
		{"", false},
		{"0 0 4294967294", false},
	} {
		if got := identityMap(tc.m); got != tc.want {
			t.Errorf("identityMap(%q) = %v, want %v", tc.m, got, tc.want)
		}
	}
}
