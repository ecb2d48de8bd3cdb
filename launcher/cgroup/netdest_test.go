package cgroup_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/cgroup"
)

// dialAll is the "dial" child: for each "tcp:ADDR" (connect) or
// "udpto:ADDR" (an unconnected sendto) it prints the argument and EPERM,
// ok, or other.
func dialAll(args []string) {
	for _, a := range args {
		kind, addr, _ := strings.Cut(a, ":")
		var err error
		switch kind {
		case "tcp":
			var c net.Conn
			if c, err = net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
				c.Close()
			}
		case "udpto":
			var pc net.PacketConn
			network := "udp4"
			switch {
			case strings.Contains(addr, "::ffff:"):
				network = "udp" // dual-stack: an AF_INET6 socket that takes mapped addresses
			case strings.HasPrefix(addr, "["):
				network = "udp6"
			}
			if pc, err = net.ListenPacket(network, ""); err == nil {
				var ua *net.UDPAddr
				if ua, err = net.ResolveUDPAddr("udp", addr); err == nil {
					_, err = pc.WriteTo([]byte("x"), ua)
				}
				pc.Close()
			}
		}
		res := "ok"
		switch {
		case errors.Is(err, syscall.EPERM):
			res = "EPERM"
		case err != nil:
			res = "other"
		}
		fmt.Println(a, res)
	}
}

// TestDenyLinkLocal: a process in a group with the filter is refused
// (EPERM) a TCP connect and a UDP sendto to the metadata service's
// addresses and link-local ones, in every form; loopback and the
// neighbours of the refused ranges are not refused. Fails without the
// filter (the connects time out or are unreachable, not EPERM).
func TestDenyLinkLocal(t *testing.T) {
	h := requireCgroups(t, true)
	g := newGroup(t, h, layouts[0], cgroup.Limits{})
	if err := g.DenyLinkLocal(); err != nil {
		t.Fatal(err)
	}
	ln4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln4.Close()
	go func() {
		for {
			c, err := ln4.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	lo := ln4.Addr().(*net.TCPAddr).Port
	cases := []struct{ arg, want string }{
		{"tcp:169.254.169.254:80", "EPERM"},
		{"tcp:169.254.0.1:443", "EPERM"},
		{"tcp:[fd00:ec2::254]:80", "EPERM"},
		{"tcp:[fe80::1%lo]:80", "EPERM"},
		{"tcp:[febf::1%lo]:80", "EPERM"},
		{"tcp:[::ffff:169.254.169.254]:80", "EPERM"},
		{"udpto:169.254.169.254:53", "EPERM"},
		{"udpto:[fd00:ec2::254]:53", "EPERM"},
		{"udpto:[fe80::1%lo]:53", "EPERM"},
		{"udpto:[::ffff:169.254.1.2]:53", "EPERM"},
		{"tcp:100.100.100.200:80", "EPERM"},
		{"udpto:100.100.100.200:53", "EPERM"},
		{"tcp:[::ffff:100.100.100.200]:80", "EPERM"},
		{"udpto:[::ffff:100.100.100.200]:53", "EPERM"},
		{"tcp:168.63.129.16:80", "EPERM"},
		{"tcp:168.63.129.16:32526", "EPERM"},
		{"tcp:[::ffff:168.63.129.16]:80", "EPERM"},
		{"udpto:168.63.129.16:80", "EPERM"},
		{"udpto:168.63.129.16:53", "!EPERM"}, // Azure's DNS resolver stays
		{"udpto:[::ffff:168.63.129.16]:53", "!EPERM"},
		{"udpto:168.63.129.17:80", "!EPERM"},
		// AWS's IPv6 service block (the EKS Pod Identity agent's
		// credentials at ::23, the resolver at ::253), the other clouds'
		// IPv6 metadata addresses, Oracle Cloud Classic's, and the NAT64
		// forms of the refused IPv4 addresses.
		{"tcp:[fd00:ec2::23]:80", "EPERM"},
		{"udpto:[fd00:ec2::253]:53", "EPERM"},
		{"tcp:[fd00:ec2:1::1]:80", "EPERM"},
		{"tcp:[fd20:ce::254]:80", "EPERM"},
		{"udpto:[fd20:ce::254]:53", "EPERM"},
		{"tcp:[fd00:c1::a9fe:a9fe]:80", "EPERM"},
		{"tcp:[fd00:42::42]:80", "EPERM"},
		{"tcp:[fd00:a9fe:a9fe::1]:80", "EPERM"},
		{"tcp:192.0.0.192:80", "EPERM"},
		{"tcp:[::ffff:192.0.0.192]:80", "EPERM"},
		{"tcp:[64:ff9b::169.254.169.254]:80", "EPERM"},
		{"udpto:[64:ff9b::100.100.100.200]:53", "EPERM"},
		{"tcp:[64:ff9b::168.63.129.16]:80", "EPERM"},
		{"tcp:[64:ff9b:1::169.254.169.254]:80", "EPERM"}, // session 11: the local-use NAT64 prefix's first /96
		{"udpto:[64:ff9b:1::100.100.100.200]:53", "EPERM"},
		// Session 12: every layout of the local-use NAT64 block
		// 64:ff9b:1::/48 (RFC 6052/8215): another /96 of it, a /64, a /56
		// and the /48 itself.
		{"udpto:[64:ff9b:1:0:1:0:a9fe:a9fe]:9", "EPERM"},
		{"tcp:[64:ff9b:1:0:1:0:6464:64c8]:80", "EPERM"},
		{"tcp:[64:ff9b:1:abcd:a9:fea9:fe00:0]:80", "EPERM"},
		{"udpto:[64:ff9b:1:abcd:c0:0:c000:0]:9", "EPERM"},
		{"tcp:[64:ff9b:1:aba9:fe:a9fe::]:80", "EPERM"},
		{"udpto:[64:ff9b:1:ab64:64:64c8::]:9", "EPERM"},
		{"tcp:[64:ff9b:1:a9fe:a9:fe00::]:80", "EPERM"},
		{"tcp:[64:ff9b:1:a83f:81:1000::]:80", "EPERM"},
		{"udpto:[64:ff9b:1:c000:0:c000::]:9", "EPERM"},
		{"udpto:[64:ff9b:1:a83f:81:1000::]:53", "!EPERM"}, // the WireServer's DNS, as in every form
		// Session 12: SIIT's IPv4-translated form (::ffff:0:a.b.c.d) and
		// the deprecated IPv4-compatible one (::a.b.c.d).
		{"tcp:[::ffff:0:169.254.169.254]:80", "EPERM"},
		{"udpto:[::ffff:0:100.100.100.200]:9", "EPERM"},
		{"tcp:[::169.254.169.254]:80", "EPERM"},
		{"udpto:[::192.0.0.192]:9", "EPERM"},
		{"udpto:[::ffff:0:168.63.129.16]:53", "!EPERM"},
		{"udpto:[64:ff9b:1:0:1:0:a83f:8110]:53", "!EPERM"},
		{"udpto:[64:ff9b::168.63.129.16]:53", "!EPERM"},
		{fmt.Sprintf("tcp:127.0.0.1:%d", lo), "ok"},
		{fmt.Sprintf("tcp:[::ffff:127.0.0.1]:%d", lo), "ok"},
		{"udpto:127.0.0.1:9", "ok"},
		// The neighbours of the refused ranges: not refused by the filter
		// (sent, or refused by routing, never EPERM).
		{"udpto:169.255.0.1:9", "!EPERM"},
		{"udpto:169.253.255.1:9", "!EPERM"},
		{"udpto:[fd00:ec3::254]:9", "!EPERM"},
		{"udpto:[fec0::1]:9", "!EPERM"},
		{"udpto:[::ffff:169.255.0.1]:9", "!EPERM"},
		{"udpto:100.100.100.201:9", "!EPERM"},
		{"udpto:100.100.101.200:9", "!EPERM"},
		{"udpto:[::ffff:100.100.100.199]:9", "!EPERM"},
		{"udpto:[fd00:ec3::23]:9", "!EPERM"},
		{"udpto:[fd20:ce::253]:9", "!EPERM"},
		{"udpto:[fd20:ce:0:1::254]:9", "!EPERM"},
		{"udpto:[fd00:c1::a9fe:a9ff]:9", "!EPERM"},
		{"udpto:[fd00:c1:0:1::a9fe:a9fe]:9", "!EPERM"},
		{"udpto:[fd00:42::43]:9", "!EPERM"},
		{"udpto:[fd00:a9fe:a9fe::2]:9", "!EPERM"},
		{"udpto:[fd00:a9fe:a9ff::1]:9", "!EPERM"},
		{"udpto:192.0.0.193:9", "!EPERM"},
		{"udpto:[64:ff9b::8.8.8.8]:9", "!EPERM"},
		{"udpto:[64:ff9b:1::8.8.8.8]:9", "!EPERM"},
		{"udpto:[64:ff9b:1:0:1:0:808:808]:9", "!EPERM"},
		{"udpto:[64:ff9b:1:abcd:a9:ff00:100:0]:9", "!EPERM"}, // 169.255.0.1 in each layout
		{"udpto:[64:ff9b:1:aba9:ff:1::]:9", "!EPERM"},
		{"udpto:[64:ff9b:1:a9ff:0:100::]:9", "!EPERM"},
		{"udpto:[64:ff9b:1:808:8:800::]:9", "!EPERM"},
		{"udpto:[64:ff9b:2::a9fe:a9fe]:9", "!EPERM"}, // outside the /48
		{"udpto:[::ffff:0:8.8.8.8]:9", "!EPERM"},
		{"udpto:[::8.8.8.8]:9", "!EPERM"},
		{"udpto:[::1:a9fe:a9fe]:9", "!EPERM"},
		{"udpto:[64:ff9a:1::a9fe:a9fe]:9", "!EPERM"},
		{"udpto:[::1]:9", "ok"},
	}
	var args []string
	for _, c := range cases {
		args = append(args, c.arg)
	}
	c := child("dial", args...)
	var out testenv.LockedBuffer
	c.Stdout = &out
	startIn(t, g, c)
	if err := c.Wait(); err != nil {
		t.Fatalf("dial child: %v (%s)", err, out.String())
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		a, r, _ := strings.Cut(line, " ")
		got[a] = r
	}
	for _, c := range cases {
		r, ok := got[c.arg]
		switch {
		case !ok:
			t.Errorf("%s: no answer", c.arg)
		case c.want == "!EPERM" && r == "EPERM":
			t.Errorf("%s: refused by the filter; only link-local is", c.arg)
		case c.want != "!EPERM" && r != c.want:
			t.Errorf("%s: %s, want %s", c.arg, r, c.want)
		}
	}
}

// TestDenyLinkLocalNeedsCgroup2: a group without cgroup2 cannot carry the
// filter, and says so.
func TestDenyLinkLocalNeedsCgroup2(t *testing.T) {
	h := requireCgroups(t, false)
	g := newGroup(t, h, layouts[1], cgroup.Limits{})
	if err := g.DenyLinkLocal(); !errors.Is(err, cgroup.ErrNoNetFilter) || !strings.Contains(err.Error(), "cgroup2") {
		t.Fatalf("err %v, want ErrNoNetFilter naming cgroup2", err)
	}
	var nilGroup *cgroup.Group
	if err := nilGroup.DenyLinkLocal(); !errors.Is(err, cgroup.ErrNoNetFilter) {
		t.Fatalf("nil group: %v", err)
	}
	if err := cgroup.ProbeLinkLocal(); err != nil {
		t.Fatalf("probe as root: %v", err)
	}
	_ = os.Getpid
}
