// Package xcheck runs the cross-check (crosscheck) inside the
// daemon on a single host: it reads this host's events back from the
// JetStream stream — the daemon's own kernel events and whatever the
// launcher and proxy published — and publishes the findings they support,
// so a host without ClickHouse still sees findings in `mcpwarden events`.
package xcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

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
	Every     time.Duration // how often findings are computed (default 5 s)
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
}

// New checks cfg.
func New(cfg Config) (*Loop, error) {
	if cfg.JetStream == nil || cfg.Sink == nil || cfg.Host == "" {
		return nil, errors.New("cross-check: JetStream, sink and host are required")
	}
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Loop{cfg: cfg, engine: crosscheck.NewEngine(cfg.Check, 0)}, nil
}

// Findings is the number of findings published so far.
func (l *Loop) Findings() uint64 { return l.findings.Load() }

// Run reads the stream and publishes findings until ctx ends. It starts
// twice the late-event window back, so a restarted daemon re-checks recent
// runs (finding ids are deterministic: a finding found twice is one).
func (l *Loop) Run(ctx context.Context) error {
	window := l.cfg.Check.Window
	if window <= 0 {
		window = 2 * time.Minute
	}
	start := time.Now().Add(-2 * window)
	cons, err := l.cfg.JetStream.OrderedConsumer(ctx, stream.Name, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{stream.SubjectPrefix + "." + stream.HostToken(l.cfg.Host) + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	if err != nil {
		return fmt.Errorf("cross-check: read stream %s: %w", stream.Name, err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		events, rejected, err := stream.DecodeBatch(msg.Subject(), msg.Data())
		if err != nil {
			l.rejected.Add(1)
			return
		}
		l.rejected.Add(uint64(rejected))
		l.received.Add(uint64(len(events)))
		l.engine.Add(events, time.Now())
	})
	if err != nil {
		return fmt.Errorf("cross-check: consume stream: %w", err)
	}
	defer cc.Stop()
	t := time.NewTicker(l.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
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
