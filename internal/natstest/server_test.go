package natstest

import (
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestServerStartFailsWithTheReason: an embedded server whose monitoring
// port is taken never becomes ready; Start fails at once, with the
// server's own words, instead of waiting out its 2 minutes silently.
func TestServerStartFailsWithTheReason(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := testenv.FreePort(t)
	conf := filepath.Join(t.TempDir(), "nats.conf")
	testenv.WriteFiles(t, map[string]string{conf: "listen: 127.0.0.1:" + strconv.Itoa(port) + "\nhttp: \"" + busy.Addr().String() + "\"\n"})
	s := &Server{Name: "busy", Conf: conf, ClientPort: port}
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Start(ft)
	}()
	<-done
	defer s.Stop()
	if !strings.Contains(ft.msg, "monitor") {
		t.Fatalf("Start did not fail with the server's reason: %q", ft.msg)
	}

	// A free port: it starts, and Log has what it said.
	ok := &Server{Name: "ok", Conf: filepath.Join(t.TempDir(), "nats.conf"), ClientPort: testenv.FreePort(t)}
	testenv.WriteFiles(t, map[string]string{ok.Conf: "listen: 127.0.0.1:" + strconv.Itoa(ok.ClientPort) + "\n"})
	ok.Start(t)
	defer ok.Stop()
	if !strings.Contains(ok.Log(4000), "Server is ready") {
		t.Fatalf("Log of an embedded server: %q", ok.Log(4000))
	}
}

// fatalRecorder records a Fatalf and ends the goroutine, as t.Fatalf does,
// without failing the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, v ...any) {
	f.msg = fmt.Sprintf(format, v...)
	runtime.Goexit()
}
