package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// readWait is how long one fetch of ReadToEnd waits for its message. A
// fetch that comes back empty does not end the read: only the server's
// count of what is left does.
const readWait = 2 * time.Second

// ReadStall bounds how long ReadToEnd waits on a server that holds
// messages for it and hands none over (stopped, loaded, unreachable)
// before it gives up with an error.
const ReadStall = 2 * time.Minute

// ReadToEnd hands each message the ordered consumer cfg selects to each, in
// stream order, up to the stream's end as it was when the read began, then
// returns nil. The end is what the server counts: a message with nothing
// pending after it, the stream's last message at the start, or a fetch that
// comes back empty from a consumer made with nothing pending. A fetch that
// comes back empty while messages are pending (a server or a reader that
// was stopped, slow under load) is tried again; after ReadStall without a
// message, the read fails with how much was left, never ends as if it had
// read everything. Before, `mcpwarden events`, `why` and `profile learn`
// took two seconds without a message for the end of the stream: a
// stall cut their output short without a word.
func ReadToEnd(ctx context.Context, js jetstream.JetStream, cfg jetstream.OrderedConsumerConfig, each func(jetstream.Msg) error) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	s, err := js.Stream(sctx, Name)
	cancel()
	if err != nil {
		return fmt.Errorf("stream %s: %w", Name, err)
	}
	last := s.CachedInfo().State.LastSeq
	if last == 0 {
		return nil // nothing was ever stored
	}
	if cfg.MaxResetAttempts == 0 {
		// Each fetch makes the consumer again; the library's default tries
		// that forever, past ReadStall.
		cfg.MaxResetAttempts = 10
	}
	sctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	cons, err := js.OrderedConsumer(sctx, Name, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("read stream %s: %w", Name, err)
	}
	progress := time.Now()
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(readWait))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			md, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("read stream %s: %w", Name, err)
			}
			if err := each(msg); err != nil {
				return err
			}
			if md.NumPending == 0 || md.Sequence.Stream >= last {
				return nil
			}
			progress = time.Now()
			continue
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) && !NotReady(err) {
			return fmt.Errorf("read stream %s: %w", Name, err)
		}
		// Nothing came. Each fetch makes the consumer again from after the
		// last message taken: what it counted pending then is what is left.
		pending := uint64(1)
		if ci := cons.CachedInfo(); ci != nil {
			pending = ci.NumPending
		}
		if pending == 0 {
			return nil
		}
		if time.Since(progress) > ReadStall {
			return fmt.Errorf("read stream %s: %d messages pending, none received for %v (is the NATS server stopped or overloaded?)", Name, pending, ReadStall)
		}
	}
}
