package stream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// TestRetry: what may pass is tried again (each failure told, with its
// pause) until it succeeds; anything else, a bound already passed, or a
// context that ends, returns at once with the error.
func TestRetry(t *testing.T) {
	timedOut := fmt.Errorf("create: %w", context.DeadlineExceeded)
	final := errors.New("stream not found")
	cases := []struct {
		name     string
		within   time.Duration
		errs     []error // try's answers in turn (then nil)
		cancel   bool    // ctx ends at the first failure told
		want     error
		attempts int
		told     int
	}{
		{"passes after two timeouts", time.Minute, []error{timedOut, nats.ErrTimeout}, false, nil, 3, 2},
		{"a final error at once", time.Minute, []error{final}, false, final, 1, 0},
		{"a final error after a timeout", time.Minute, []error{timedOut, final}, false, final, 2, 1},
		{"the bound passed", 0, []error{timedOut, timedOut}, false, timedOut, 1, 0},
		{"the context ends in the pause", time.Minute, []error{timedOut, timedOut}, true, context.Canceled, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			attempts, told := 0, 0
			var pauses []time.Duration
			err := stream.Retry(ctx, c.within, stream.NotReady, func(err error, pause time.Duration) {
				told++
				pauses = append(pauses, pause)
				if c.cancel {
					cancel()
				}
			}, func() error {
				attempts++
				if attempts <= len(c.errs) {
					return c.errs[attempts-1]
				}
				return nil
			})
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("Retry = %v, want %v", err, c.want)
			}
			if attempts != c.attempts || told != c.told {
				t.Fatalf("%d attempts, %d told, want %d and %d", attempts, told, c.attempts, c.told)
			}
			for i := 1; i < len(pauses); i++ {
				if pauses[i] != 2*pauses[i-1] {
					t.Fatalf("pauses %v: each twice the one before", pauses)
				}
			}
		})
	}
}
