// Package publish is the one way events leave a host: the Publisher batches
// events per NATS message on mcpwarden.v1.<host>.<kind>, publishes them to
// JetStream asynchronously with a bounded number of unacknowledged messages,
// and gives every message a Nats-Msg-Id so that a re-publish is dropped by
// the stream's duplicate window.
//
// When NATS cannot be reached, or a message is not acknowledged in time,
// messages go to a bounded, durable on-disk spool (package spool) and are
// replayed in order once NATS is back. While the spool holds anything, new
// messages queue behind it. When the spool is full, Publish refuses new
// events with an error wrapping ErrSinkUnavailable; the launcher turns that
// into denying new tool calls (fail closed). Messages already accepted are
// never dropped: a message that fails after Publish returned is spooled even
// past the bound.
package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/spool"
	"github.com/mcpwarden/mcpwarden/transport/stream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrSinkUnavailable is wrapped by Publish errors that mean the events were
// not recorded (spool full, spool write failed, publisher closed). Callers
// that enforce must deny what they were about to allow.
var ErrSinkUnavailable = errors.New("audit sink cannot take events (" + string(schema.ErrAuditSinkFull) + ")")

// Config configures a Publisher. Conn and SpoolDir are required.
type Config struct {
	// Conn is a connection made with stream.Connect (reconnecting forever).
	Conn *nats.Conn
	// SpoolDir holds the spool; SpoolMaxBytes bounds it (default 256 MiB).
	SpoolDir      string
	SpoolMaxBytes int64
	// MaxInFlight bounds messages published but not yet acknowledged
	// (default 256).
	MaxInFlight int
	// MaxBatchEvents and MaxBatchBytes bound one message (defaults 1000
	// events, 1 MiB; never above schema.MaxBatchEvents/MaxBatchBytes).
	MaxBatchEvents int
	MaxBatchBytes  int
	// AckTimeout: an unacknowledged message is spooled after this long
	// (default 5 s).
	AckTimeout time.Duration
	// ReplayInterval is how often a non-empty spool is retried (default 1 s).
	ReplayInterval time.Duration
	// Adopt is a glob of other spool directories this publisher drains when
	// NATS is reachable and nobody holds them (e.g. STATE_DIR/spool/run-*:
	// spools of runs that ended while NATS was away). Drained ones are
	// removed.
	Adopt string
	// EnsureStream, when set, creates or updates the stream at start-up (the
	// embedded single-host setup). Fleets manage the stream centrally and
	// leave it nil.
	EnsureStream *stream.Config
	Logger       *slog.Logger
}

// Stats are the publisher's counters.
type Stats struct {
	Published  uint64 // messages acknowledged by JetStream (live or replayed)
	Events     uint64 // events accepted by Publish
	Spooled    uint64 // messages written to the spool
	Replayed   uint64 // spooled messages acknowledged on replay
	Refused    uint64 // events refused by Publish (spool full or failing)
	SpoolBytes int64
	SpoolDepth int64 // messages in the spool
	InFlight   int
}

type pending struct {
	fut jetstream.PubAckFuture
	rec spool.Record
}

// Publisher implements launcher.Sink. It is safe for concurrent use.
//
// Lock order: mu, then the spool's own lock.
type Publisher struct {
	cfg Config
	js  jetstream.JetStream
	log *slog.Logger
	sp  *spool.Spool

	sem   chan struct{} // one token per unacknowledged live message
	acks  chan pending
	kick  chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup
	close sync.Once

	mu       sync.Mutex
	spooling bool // the spool is not empty: new messages queue behind it
	closed   bool

	events, published, spooled, replayed, refused atomic.Uint64
}

// ensureFor bounds how long New tries to make the stream while the error
// may pass (stream.NotReady).
const ensureFor = 2 * time.Minute

// New starts a Publisher. Spooled messages from an earlier process are
// replayed as soon as NATS is reachable.
func New(ctx context.Context, cfg Config) (*Publisher, error) {
	if cfg.Conn == nil {
		return nil, errors.New("publisher: no NATS connection")
	}
	if cfg.SpoolDir == "" {
		return nil, errors.New("publisher: no spool directory: pass --state-dir")
	}
	if cfg.SpoolMaxBytes <= 0 {
		cfg.SpoolMaxBytes = 256 << 20
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 256
	}
	if cfg.MaxBatchEvents <= 0 || cfg.MaxBatchEvents > schema.MaxBatchEvents {
		cfg.MaxBatchEvents = 1000
	}
	if cfg.MaxBatchBytes <= 0 || cfg.MaxBatchBytes > schema.MaxBatchBytes {
		cfg.MaxBatchBytes = 1 << 20
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 5 * time.Second
	}
	if cfg.ReplayInterval <= 0 {
		cfg.ReplayInterval = time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(cfg.Conn,
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout),
		jetstream.WithPublishAsyncMaxPending(cfg.MaxInFlight+1))
	if err != nil {
		return nil, fmt.Errorf("publisher: JetStream context: %w", err)
	}
	if cfg.EnsureStream != nil {
		// Retried while the error may pass (a server restarting or
		// loaded, this process stopped while its request waited): before,
		// the first timeout ended the daemon (exit 72). Anything else
		// (JetStream disabled, a store too small) is named at once.
		err := stream.Retry(ctx, ensureFor, stream.NotReady, func(err error, pause time.Duration) {
			log.Warn("JetStream did not take the stream yet; retrying", "error", err, "retry_in", pause)
		}, func() error {
			_, err := stream.Ensure(ctx, js, *cfg.EnsureStream)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	sp, err := spool.Open(cfg.SpoolDir, cfg.SpoolMaxBytes)
	if err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	p := &Publisher{
		cfg: cfg, js: js, log: log, sp: sp,
		sem:      make(chan struct{}, cfg.MaxInFlight),
		acks:     make(chan pending, cfg.MaxInFlight),
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		spooling: sp.Len() > 0,
	}
	cfg.Conn.SetReconnectHandler(func(*nats.Conn) { p.wake() })
	p.wg.Add(2)
	go p.ackLoop()
	go p.replayLoop()
	if p.spooling {
		log.Info("audit spool holds messages from an earlier run; replaying", "messages", sp.Len(), "bytes", sp.Bytes())
		p.wake()
	}
	return p, nil
}

func (p *Publisher) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Publish records events: on return without error they are either
// acknowledged by JetStream, in flight (and spooled if that fails), or in
// the durable spool. An error wrapping ErrSinkUnavailable means none of
// events was recorded.
func (p *Publisher) Publish(ctx context.Context, events []schema.Event) error {
	if len(events) == 0 {
		return nil
	}
	recs, err := p.batch(events)
	if err != nil {
		p.refused.Add(uint64(len(events)))
		return err
	}
	// While the spool holds anything, or NATS is away, the whole call goes
	// to the spool in one durable write: all or nothing.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.refused.Add(uint64(len(events)))
		return fmt.Errorf("%w: publisher is closed", ErrSinkUnavailable)
	}
	if p.spooling || !p.cfg.Conn.IsConnected() {
		err := p.spoolLocked(recs, false)
		p.mu.Unlock()
		if err != nil {
			p.refused.Add(uint64(len(events)))
			return err
		}
		p.events.Add(uint64(len(events)))
		return nil
	}
	p.mu.Unlock()

	for i, rec := range recs {
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			// Nothing of recs[i:] was handed over: spool the rest so the
			// call stays all-or-nothing from the caller's view.
			p.mu.Lock()
			err := p.spoolLocked(recs[i:], false)
			p.mu.Unlock()
			if err != nil {
				return fmt.Errorf("%w: %w (and the publish was cancelled: %w)", ErrSinkUnavailable, err, ctx.Err())
			}
			p.events.Add(uint64(len(events)))
			return nil
		}
		p.mu.Lock()
		if p.spooling || p.closed {
			<-p.sem
			err := p.spoolLocked(recs[i:], true) // part of this call is already out: keep the rest
			p.mu.Unlock()
			if err != nil {
				return err
			}
			break
		}
		fut, err := p.js.PublishMsgAsync(toMsg(rec), jetstream.WithMsgID(rec.MsgID))
		if err != nil {
			<-p.sem
			p.log.Warn("publish to NATS failed; spooling", "error", err)
			err := p.spoolLocked(recs[i:], true)
			p.mu.Unlock()
			if err != nil {
				return err
			}
			break
		}
		p.acks <- pending{fut: fut, rec: rec} // cannot block: sem bounds it
		p.mu.Unlock()
	}
	p.events.Add(uint64(len(events)))
	return nil
}

// spoolLocked writes recs to the spool and switches to spooling mode.
func (p *Publisher) spoolLocked(recs []spool.Record, force bool) error {
	if err := p.sp.Append(recs, force); err != nil {
		if errors.Is(err, spool.ErrFull) {
			return fmt.Errorf("%w: NATS is unreachable and the local spool is full (%w); restore NATS or raise --spool-max-bytes", ErrSinkUnavailable, err)
		}
		return fmt.Errorf("%w: %w", ErrSinkUnavailable, err)
	}
	p.spooled.Add(uint64(len(recs)))
	if !p.spooling {
		p.spooling = true
		p.log.Warn("NATS unavailable; spooling audit events to disk")
	}
	p.wake()
	return nil
}

// batch groups events by envelope (host, kind, boot, run, scope), keeping
// their order within each group, and cuts each group into ndjson-v2
// messages within the size limits. Groups of one host and kind share a
// subject.
func (p *Publisher) batch(events []schema.Event) ([]spool.Record, error) {
	type group struct {
		subject string
		env     schema.Envelope
		buf     []byte
		envLen  int // bytes of the envelope line that starts buf
		n       int
	}
	var recs []spool.Record
	var groups []*group
	byEnvelope := map[schema.Envelope]*group{}
	flush := func(g *group) {
		if g.n == 0 {
			return
		}
		recs = append(recs, spool.Record{Subject: g.subject, MsgID: schema.NewID(), Data: g.buf})
		g.buf, g.n = nil, 0
	}
	start := func(g *group, remaining int) error {
		// ~250 bytes an event line: one allocation for most messages.
		g.buf = make([]byte, 0, min(p.cfg.MaxBatchBytes, 512+256*min(p.cfg.MaxBatchEvents, remaining)))
		var err error
		g.buf, err = schema.AppendEnvelope(g.buf, g.env)
		g.envLen = len(g.buf)
		return err
	}
	for i := range events {
		e := &events[i]
		env := schema.EnvelopeOf(e)
		g := byEnvelope[env]
		if g == nil {
			g = &group{subject: stream.Subject(e.Host, e.Kind), env: env}
			byEnvelope[env] = g
			groups = append(groups, g)
		}
		if g.buf == nil {
			if err := start(g, len(events)-i); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrSinkUnavailable, err)
			}
		}
		before := len(g.buf)
		var err error
		g.buf, err = schema.AppendEventLine(g.buf, e)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSinkUnavailable, err)
		}
		if g.envLen+len(g.buf)-before > p.cfg.MaxBatchBytes {
			return nil, fmt.Errorf("%w: event %s alone is %d bytes, over the %d-byte message limit", ErrSinkUnavailable, e.EventID, len(g.buf)-before, p.cfg.MaxBatchBytes)
		}
		if len(g.buf) > p.cfg.MaxBatchBytes {
			line := append([]byte(nil), g.buf[before:]...)
			g.buf = g.buf[:before]
			flush(g)
			if err := start(g, len(events)-i); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrSinkUnavailable, err)
			}
			g.buf, g.n = append(g.buf, line...), 1
			continue
		}
		g.n++
		if g.n >= p.cfg.MaxBatchEvents {
			flush(g)
		}
	}
	for _, g := range groups {
		flush(g)
	}
	return recs, nil
}

func toMsg(rec spool.Record) *nats.Msg {
	m := nats.NewMsg(rec.Subject)
	m.Data = rec.Data
	m.Header.Set(schema.BatchHeader, schema.BatchFormat)
	return m
}

// ackLoop resolves live publishes in order; a failed one goes to the spool.
func (p *Publisher) ackLoop() {
	defer p.wg.Done()
	for pa := range p.acks {
		select {
		case <-pa.fut.Ok():
			p.published.Add(1)
		case err := <-pa.fut.Err():
			p.log.Warn("JetStream did not acknowledge a batch; spooling it", "error", err)
			p.mu.Lock()
			if serr := p.spoolLocked([]spool.Record{pa.rec}, true); serr != nil {
				// The disk itself failed: nothing else can hold it. Count
				// it so health events report the loss.
				p.refused.Add(1)
				p.log.Error("audit batch lost: spool write failed", "error", serr)
			}
			p.mu.Unlock()
		}
		<-p.sem
	}
}

// replayLoop drains the spool whenever NATS is connected.
func (p *Publisher) replayLoop() {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.ReplayInterval)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-p.kick:
		case <-t.C:
		}
		if err := p.replay(); err != nil {
			p.log.Debug("spool replay paused", "error", err)
		}
		if p.cfg.Adopt != "" && p.cfg.Conn.IsConnected() {
			p.adopt()
		}
	}
}

// replay publishes spooled messages oldest first and commits them once
// acknowledged. It stops at the first failure, to retry later, so order is
// kept.
func (p *Publisher) replay() error {
	for {
		p.mu.Lock()
		if !p.spooling {
			p.mu.Unlock()
			return nil
		}
		if p.sp.Len() == 0 {
			// Drained with the lock held: no Publish can slip a message in
			// between, so live order continues after the spool's.
			p.spooling = false
			p.mu.Unlock()
			p.log.Info("audit spool drained; publishing live again")
			return nil
		}
		p.mu.Unlock()
		if !p.cfg.Conn.IsConnected() {
			return errors.New("not connected")
		}
		if err := p.sendSpooled(p.sp); err != nil {
			return err
		}
	}
}

// sendSpooled publishes the oldest records of sp (up to MaxInFlight), waits
// for every acknowledgement, and only then removes them from sp.
func (p *Publisher) sendSpooled(sp *spool.Spool) error {
	recs, cur, err := sp.Peek(p.cfg.MaxInFlight)
	if err != nil {
		return err
	}
	if err := p.publishAndWait(recs); err != nil {
		return err
	}
	if err := sp.Commit(cur); err != nil {
		return err
	}
	p.replayed.Add(uint64(len(recs)))
	p.published.Add(uint64(len(recs)))
	return nil
}

// adopt drains orphaned spools matching cfg.Adopt, oldest records first,
// skipping any that another process holds.
func (p *Publisher) adopt() {
	dirs, _ := filepath.Glob(p.cfg.Adopt)
	own, _ := filepath.Abs(p.cfg.SpoolDir)
	for _, dir := range dirs {
		if abs, _ := filepath.Abs(dir); abs == own {
			continue
		}
		sp, err := spool.Open(dir, p.cfg.SpoolMaxBytes)
		if err != nil {
			continue // in use by its own publisher, or unreadable
		}
		drained := true
		for sp.Len() > 0 {
			if err := p.sendSpooled(sp); err != nil {
				drained = false
				break
			}
		}
		sp.Close()
		if drained {
			p.log.Info("adopted an orphaned audit spool and drained it", "dir", filepath.Base(dir))
			_ = os.RemoveAll(dir)
		}
	}
}

// publishAndWait publishes recs and waits for the acknowledgement of every
// one that was sent; it reports the last error.
func (p *Publisher) publishAndWait(recs []spool.Record) error {
	futs := make([]jetstream.PubAckFuture, 0, len(recs))
	var pubErr error
	for _, rec := range recs {
		f, err := p.js.PublishMsgAsync(toMsg(rec), jetstream.WithMsgID(rec.MsgID))
		if err != nil {
			pubErr = err
			break
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			pubErr = err
		case <-p.done:
			return errors.New("closing")
		}
	}
	return pubErr
}

// Flush waits until every message is acknowledged and the spool is empty,
// or ctx ends.
func (p *Publisher) Flush(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		p.mu.Lock()
		idle := !p.spooling && len(p.sem) == 0
		p.mu.Unlock()
		if idle {
			return nil
		}
		p.wake()
		select {
		case <-ctx.Done():
			return fmt.Errorf("flush audit events: %w (%d messages in flight, %d spooled; they stay in the spool at %s)", ctx.Err(), len(p.sem), p.sp.Len(), p.cfg.SpoolDir)
		case <-t.C:
		}
	}
}

// Stats returns the counters.
func (p *Publisher) Stats() Stats {
	return Stats{
		Published:  p.published.Load(),
		Events:     p.events.Load(),
		Spooled:    p.spooled.Load(),
		Replayed:   p.replayed.Load(),
		Refused:    p.refused.Load(),
		SpoolBytes: p.sp.Bytes(),
		SpoolDepth: p.sp.Len(),
		InFlight:   len(p.sem),
	}
}

// Close refuses new events, waits (bounded by ctx) for in-flight messages to
// be acknowledged or spooled, and closes the spool. Whatever is still
// spooled is replayed by the next Publisher on the same directory. It does
// not close the NATS connection.
func (p *Publisher) Close(ctx context.Context) error {
	var err error
	p.close.Do(func() {
		flushErr := p.Flush(ctx)
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		close(p.done)
		// In-flight publishes resolve (ack or timeout → spool) before the
		// ack loop ends.
		close(p.acks)
		p.wg.Wait()
		if flushErr != nil {
			// What did not flush is safe in the spool for the next start.
			p.log.Warn("closing with audit events still spooled", "error", flushErr)
		}
		err = p.sp.Close()
	})
	return err
}
