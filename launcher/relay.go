package launcher

import (
	"context"
	"errors"
	"io"
	"os"
)

// Relay is the byte-transparent Mediator: client bytes go to the server
// unchanged and server bytes come back unchanged, in order.
type Relay struct{}

// Mediate copies in both directions. When the client's input ends, the
// server's stdin is closed; Mediate returns when the server's output ends
// or ctx is done.
func (Relay) Mediate(ctx context.Context, clientIn io.Reader, clientOut io.Writer, server Upstream) error {
	stdin := server.Stdin()
	go func() {
		_, _ = io.Copy(stdin, clientIn)
		if c, ok := stdin.(io.Closer); ok {
			c.Close()
		}
	}()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(clientOut, server.Stdout())
		if errors.Is(err, os.ErrClosed) {
			err = nil
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
