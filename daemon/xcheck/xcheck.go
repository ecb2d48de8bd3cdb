// Package xcheck runs the cross-check (crosscheck) inside the
// daemon on a single host: it reads this host's events back from the
// JetStream stream — the daemon's own kernel events and whatever the
// launcher and proxy published — and publishes the findings they support,
// so a host without ClickHouse still sees findings in `mcpwarden events`:
// provisional within seconds of their evidence, final after the late-event
// window.
package xcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// Sink takes the findings.
type Sink interface {
	Publish(ctx context.Context, events []schema.Event) error
}

// Config configures a Loop.
type Config struct {
	JetStream jetstream.JetStream
	Host      string // only this host's events are checked
	Sink      Sink
	Check     crosscheck.Config
	Every     time.Duration // how often findings are computed (default 1 s)
	Logger    *slog.Logger
}

// Loop is one running cross-check.
type Loop struct {
	cfg      Config
	engine   *crosscheck.Engine
	received atomic.Uint64
	rejected atomic.Uint64
	findings atomic.Uint64
	failed   atomic.Uint64
	// lastSeq is the stream sequence of the last message the engine took:
	// a lost consumer is created again just after it.
	lastSeq atomic.Uint64
}

// New checks cfg.
func New(cfg Config) (*Loop, error) {
	if cfg.JetStream == nil || cfg.Sink == nil || cfg.Host == "" {
		return nil, errors.New("cross-check: JetStream, sink and host are required")
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Loop{cfg: cfg, engine: crosscheck.NewEngine(cfg.Check, 0)}, nil
}

// Findings is the number of findings published so far.
func (l *Loop) Findings() uint64 { return l.findings.Load() }

// Run reads the stream and publishes findings until ctx ends.
//
// It reads through the host's own consumer (stream.CrossCheckConsumer,
// explicit acks), which NATS permissions let the host use while it may not
// read any other host's events. Each start replaces that consumer with one
// that begins twice the late-event window back, so a restarted daemon
// re-checks recent runs (finding ids are deterministic: a finding found
// twice is one). Should the consumer vanish (the server lost it), it is
// created again just after the last message the engine took, or from the
// start's point if it took none: however long the loss took to notice
// (about 10 s when no pull was pending, longer than a short window),
// nothing published meanwhile is skipped. The server need not say the
// consumer went: missed heartbeats and pulls no one answers make the loop
// ask. Making it is retried for a while (retry), at a start only while
// the error may pass.
func (l *Loop) Run(ctx context.Context) error {
	window := l.cfg.Check.Window
	if window <= 0 {
		window = 2 * time.Minute
	}
	start := resumePoint{from: time.Now().Add(-2 * window)}
	t := time.NewTicker(l.cfg.Every)
	defer t.Stop()
	cc, lost, err := l.retry(ctx, start, stream.NotReady)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for {
		err = l.publishLoop(ctx, t.C, lost)
		cc.Stop()
		if err != nil || ctx.Err() != nil {
			return err
		}
		start.afterSeq = l.lastSeq.Load()
		l.cfg.Logger.Warn("cross-check consumer lost; reading on from the last message taken", "stream_seq", start.afterSeq)
		if cc, lost, err = l.retry(ctx, start, anyError); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// retryFor bounds how long making the consumer is tried. After a loss
// the server may still be removing the old one, or restarting; at a start
// a request may time out (the daemon stopped while it waited, a server
// slow to answer under load). A failed attempt is logged and retried with
// a growing pause; after retryFor the error ends the loop, and with it the
// daemon, loudly. Before, the first failed attempt ended it: a test's loop
// stopped checking after a deletion, and a daemon stopped (SIGSTOP) while
// its start's request was pending exited 71 when it went on (ci45).
const retryFor = 2 * time.Minute

// anyError retries every error: after a loss, the consumer was made
// before, so what fails now is the server's state, not the configuration.
func anyError(error) bool { return true }

// retry makes the consumer, trying again while retryable says an error may
// pass, for up to retryFor. A start retries only what stream.NotReady
// names (a request that timed out, a JetStream not ready): a consumer this
// host may not make, or a stream that is not there, is a configuration
// error, named at once.
func (l *Loop) retry(ctx context.Context, start resumePoint, retryable func(error) bool) (jetstream.ConsumeContext, <-chan struct{}, error) {
	var cc jetstream.ConsumeContext
	var lost <-chan struct{}
	err := stream.Retry(ctx, retryFor, retryable, func(err error, pause time.Duration) {
		l.cfg.Logger.Warn("cross-check consumer not made yet; retrying", "err", err, "retry_in", pause)
	}, func() (err error) {
		cc, lost, err = l.consume(ctx, start)
		return err
	})
	return cc, lost, err
}

// resumePoint is where a consumer starts: just after stream sequence
// afterSeq when it is set, else at time from.
type resumePoint struct {
	from     time.Time
	afterSeq uint64
}

// apply sets cfg's deliver policy to start at p.
func (p resumePoint) apply(cfg *jetstream.ConsumerConfig) {
	if p.afterSeq > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = p.afterSeq + 1
		return
	}
	from := p.from
	cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
	cfg.OptStartTime = &from
}

// consumeHeartbeat is the idle heartbeat of the consumer's pulls. A
// consumer deleted while no pull was pending says nothing; its loss shows
// when two heartbeats are missed and the next pull finds no consumer:
// with nats.go's default (half the 30 s pull expiry) that took up to 30 s,
// longer than a window (TestLoopUnderHostPermissions once waited 20 s in
// vain), with this one about 10 s.
const consumeHeartbeat = 5 * time.Second

// consume (re)creates the host's consumer starting at start and feeds the
// engine; lost is closed if the consumer goes away.
func (l *Loop) consume(ctx context.Context, start resumePoint) (jetstream.ConsumeContext, <-chan struct{}, error) {
	js := l.cfg.JetStream
	name := stream.CrossCheckConsumer(l.cfg.Host)
	if err := js.DeleteConsumer(ctx, stream.Name, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, nil, fmt.Errorf("cross-check: remove the old consumer %s on stream %s: %w (is the stream made, and may this host use the consumer? see deploy/nats)", name, stream.Name, err)
	}
	cfg := jetstream.ConsumerConfig{
		Name:          name,
		Description:   "mcpwarden daemon: the on-host cross-check of " + stream.HostToken(l.cfg.Host),
		FilterSubject: stream.SubjectPrefix + "." + stream.HostToken(l.cfg.Host) + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 20_000,
		// A daemon that died leaves it behind; the server drops it.
		InactiveThreshold: 10 * time.Minute,
	}
	start.apply(&cfg)
	cons, err := js.CreateConsumer(ctx, stream.Name, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("cross-check: create consumer %s on stream %s: %w", name, stream.Name, err)
	}
	lost := make(chan struct{})
	var once atomic.Bool
	markLost := func() {
		if once.CompareAndSwap(false, true) {
			close(lost)
		}
	}
	// askServer is for a consumer that may be gone without a word: the
	// server says "consumer deleted" only to a pull pending when it goes.
	// Lost between pulls, or while the connection was down (a server
	// restarted without it, or one that dropped it as inactive), the
	// client only misses heartbeats and its new pulls find no responder,
	// forever: the cross-check went dark and said nothing. Those errors
	// make the loop ask the server whether the consumer is still there.
	var asking atomic.Bool
	askServer := func() {
		if !asking.CompareAndSwap(false, true) {
			return
		}
		go func() {
			defer asking.Store(false)
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if _, err := js.Consumer(actx, stream.Name, name); errors.Is(err, jetstream.ErrConsumerNotFound) {
				markLost()
			}
		}()
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		events, rejected, err := stream.DecodeBatch(msg.Subject(), msg.Data())
		if err != nil {
			l.rejected.Add(1)
		} else {
			l.rejected.Add(uint64(rejected))
			l.received.Add(uint64(len(events)))
			l.engine.Add(events, time.Now())
		}
		if md, err := msg.Metadata(); err == nil {
			l.lastSeq.Store(md.Sequence.Stream)
		}
		_ = msg.Ack()
	}, jetstream.PullHeartbeat(consumeHeartbeat), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		switch {
		case errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound):
			markLost()
		case errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrNoResponders):
			askServer()
		}
	}))
	if err != nil {
		return nil, nil, fmt.Errorf("cross-check: consume stream: %w", err)
	}
	return cc, lost, nil
}

// publishLoop publishes what the engine finds on every tick until ctx ends
// (nil) or the consumer is lost (nil, ctx still live).
func (l *Loop) publishLoop(ctx context.Context, tick <-chan time.Time, lost <-chan struct{}) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-lost:
			return nil
		case now := <-tick:
			f := l.engine.Findings(now)
			if len(f) == 0 {
				continue
			}
			if err := l.cfg.Sink.Publish(ctx, f); err != nil {
				l.failed.Add(uint64(len(f)))
				l.cfg.Logger.Error("cross-check findings not published", "findings", len(f), "err", err)
				continue
			}
			l.findings.Add(uint64(len(f)))
		}
	}
}
