package stream

import (
	"net"
	"os"
	"testing"
)

// TestLocalServerOwner: the server's end of a real loopback connection is
// found in this host's tables and owned by this process's user; a server
// owned by another uid is refused, naming it.
func TestLocalServerOwner(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			addr := "127.0.0.1:0"
			if network == "tcp6" {
				addr = "[::1]:0"
			}
			l, err := net.Listen(network, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				if c, err := l.Accept(); err == nil {
					defer c.Close()
					_, _ = c.Read(make([]byte, 1))
				}
			}()
			c, err := net.Dial(network, l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := checkLocalServer(c, os.Geteuid()); err != nil {
				t.Fatalf("own server refused: %v", err)
			}
			if os.Geteuid() == 0 {
				return // root's server is accepted whoever asks
			}
			err = checkLocalServer(c, os.Geteuid()+1)
			if err == nil {
				t.Fatal("a server of another uid was accepted")
			}
		})
	}
}
