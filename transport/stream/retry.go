package stream

import (
	"context"
	"time"
)

// Retry calls try until it succeeds, ctx ends, retryable says its error
// will not pass, or within has gone by since the first attempt, and
// returns try's last error (ctx's when ctx ends during a pause). Between
// attempts it pauses 100 ms, doubling up to 5 s, and first tells failed of
// the error and the pause (a retry is never silent). What a start-up tries
// against JetStream retries so (retryable: NotReady): a request that timed
// out is not the end of a daemon.
func Retry(ctx context.Context, within time.Duration, retryable func(error) bool, failed func(err error, pause time.Duration), try func() error) error {
	deadline := time.Now().Add(within)
	pause := 100 * time.Millisecond
	for {
		err := try()
		if err == nil || ctx.Err() != nil || !retryable(err) || time.Now().After(deadline) {
			return err
		}
		failed(err, pause)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Second)
	}
}
