package launcher

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// echoUpstream is an in-process server that echoes its stdin to its stdout.
type echoUpstream struct {
	inW, outR *os.File
	done      chan struct{}
}

func newEchoUpstream(t *testing.T) *echoUpstream {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	u := &echoUpstream{inW: inW, outR: outR, done: make(chan struct{})}
	go func() {
		_, _ = io.Copy(outW, inR)
		outW.Close()
		inR.Close()
		close(u.done)
	}()
	return u
}

func (u *echoUpstream) Stdin() io.Writer                                      { return u.inW }
func (u *echoUpstream) Stdout() io.Reader                                     { return u.outR }
func (u *echoUpstream) Done() <-chan struct{}                                 { return u.done }
func (u *echoUpstream) Restart(context.Context, []schema.CanonicalPath) error { return nil }

// TestRelayIsByteTransparent: whatever bytes go in — invalid UTF-8, NULs,
// partial lines, several MiB — come back unchanged, in order, and the
// server sees EOF when the client does.
func TestRelayIsByteTransparent(t *testing.T) {
	big := make([]byte, 3<<20)
	rand.Read(big)
	cases := map[string][]byte{
		"empty":        nil,
		"json lines":   []byte("{\"jsonrpc\":\"2.0\",\"id\":1}\n{\"id\":2}\n"),
		"no newline":   []byte("{\"partial\":"),
		"invalid utf8": {0xff, 0xfe, 0x00, '\n', 0xc3, 0x28},
		"random 3MiB":  big,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			u := newEchoUpstream(t)
			var out bytes.Buffer
			errc := make(chan error, 1)
			go func() { errc <- Relay{}.Mediate(context.Background(), bytes.NewReader(in), &out, u) }()
			select {
			case err := <-errc:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("relay did not finish after the client's EOF")
			}
			if !bytes.Equal(out.Bytes(), in) {
				t.Fatalf("relay changed the bytes: %d in, %d out", len(in), out.Len())
			}
			select {
			case <-u.done:
			case <-time.After(5 * time.Second):
				t.Fatal("server never saw EOF")
			}
		})
	}
}

// TestRelayStopsOnContext: a cancelled context ends Mediate even while the
// server is silent.
func TestRelayStopsOnContext(t *testing.T) {
	u := newEchoUpstream(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Relay{}.Mediate(ctx, pr, io.Discard, u) }()
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("want the context's error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Mediate ignored the context")
	}
}
