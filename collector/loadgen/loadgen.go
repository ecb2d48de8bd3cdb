// Package loadgen simulates a fleet of hosts for the pipeline: each
// simulated host has its own identity (host name, boot id, path-hash key)
// and its own NATS credentials, runs MCP servers one run after another with
// a realistic mix of events (Mix), and publishes them through the real
// publisher (transport/publish, with its spool) into JetStream, as a daemon
// does. Run counts what every host produced per run; Check reads
// ClickHouse back and compares, run by run, so that "produced == stored"
// is checked exactly; Lag measures publish → stored.
package loadgen

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
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
	"github.com/nats-io/nats.go"
)

// Host is one simulated host: its name (the events' host and its subject
// token) and how it connects to NATS (its own credentials).
type Host struct {
	Name string
	NATS stream.ConnOptions
}

// Config configures a load run.
type Config struct {
	Hosts []Host
	// Duration bounds the run; RunsPerHost, when > 0, ends each host after
	// that many runs instead (or first). At least one must be set.
	Duration    time.Duration
	RunsPerHost int
	// Rate is the fleet's events per second, spread evenly over the hosts
	// (each host paces its own steps); 0 publishes as fast as the pipeline
	// acknowledges (each host's publisher bounds what is in flight).
	Rate float64
	Mix  Mix
	// MaxInFlight bounds each host's unacknowledged messages (0: the
	// publisher's default, 256). A fleet of unpaced hosts holds up to
	// hosts × MaxInFlight messages in memory.
	MaxInFlight int
	// SpoolDir holds one spool directory per host (required: the publisher
	// spools what NATS does not acknowledge in time).
	SpoolDir string
	Logger   *slog.Logger
}

// RunKey names one run of one host; health events have an empty Run.
type RunKey struct{ Host, Run string }

// Report is what a load run produced: every event the publishers accepted
// (Publish returned without error), per run and per kind.
type Report struct {
	Produced map[RunKey]uint64
	ByKind   map[schema.Kind]uint64
	Events   uint64
	Runs     int
	// Refused counts events a publisher refused (its spool full): they
	// were not produced, and a real host would have denied the calls.
	Refused uint64
	// Start and End bound the generation; Elapsed is End − Start.
	Start, End time.Time
	// Spooled counts messages that went through a spool (NATS away or an
	// ack late); they are replayed and still count as produced.
	Spooled uint64
}

// Elapsed is how long the generation ran.
func (r *Report) Elapsed() time.Duration { return r.End.Sub(r.Start) }

// Hosts lists the hosts that produced anything.
func (r *Report) Hosts() []string {
	seen := map[string]bool{}
	var out []string
	for k := range r.Produced {
		if !seen[k.Host] {
			seen[k.Host] = true
			out = append(out, k.Host)
		}
	}
	return out
}

func (c *Config) validate() error {
	if len(c.Hosts) == 0 {
		return errors.New("loadgen: no hosts")
	}
	if c.Duration <= 0 && c.RunsPerHost <= 0 {
		return errors.New("loadgen: give a duration or a number of runs per host")
	}
	if c.MaxInFlight < 0 {
		return fmt.Errorf("loadgen: negative in-flight bound %d", c.MaxInFlight)
	}
	if c.Rate < 0 {
		return fmt.Errorf("loadgen: negative rate %v", c.Rate)
	}
	if c.SpoolDir == "" {
		return errors.New("loadgen: no spool directory")
	}
	seen := map[string]bool{}
	for _, h := range c.Hosts {
		if seen[h.Name] {
			return fmt.Errorf("loadgen: host %q given twice", h.Name)
		}
		seen[h.Name] = true
		e := schema.Origin{Host: h.Name, BootID: "0b6c2a58-4a4d-4f3b-9a55-2f3c5e0d9e11"}.NewEvent(schema.KindHealth, "", "", "", time.Now())
		e.Health = &schema.Health{Component: "daemon"}
		if err := e.Validate(); err != nil {
			return fmt.Errorf("loadgen: host name %q: %w", h.Name, err)
		}
	}
	return c.Mix.Validate()
}

// Run simulates the hosts until the duration has passed, every host has
// done its runs, or ctx ends, then closes every publisher (waiting for
// their acknowledgements) and reports what was produced. It fails when a
// host cannot connect or its publisher cannot start.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sims := make([]*sim, len(cfg.Hosts))
	defer func() {
		for _, s := range sims {
			if s != nil && s.nc != nil {
				s.nc.Close()
			}
		}
	}()
	for i, h := range cfg.Hosts {
		s, err := newSim(ctx, cfg, h, log)
		if err != nil {
			return nil, err
		}
		sims[i] = s
	}
	runCtx := ctx
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	var perHost float64
	if cfg.Rate > 0 {
		perHost = cfg.Rate / float64(len(sims))
	}
	rep := &Report{Produced: map[RunKey]uint64{}, ByKind: map[schema.Kind]uint64{}, Start: time.Now()}
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for i, s := range sims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Hosts start spread over the first second, as a fleet's do.
			offset := time.Duration(i) * time.Second / time.Duration(len(sims))
			if err := s.loop(runCtx, offset, perHost); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		}()
	}
	wg.Wait()
	rep.End = time.Now()
	// Closing waits for every message in flight to be acknowledged (or
	// spooled); what is spooled is replayed before the close returns or
	// stays for the next run.
	var errs []error
	for _, s := range sims {
		if err := s.close(ctx); err != nil {
			errs = append(errs, err)
		}
		st := s.pub.Stats()
		rep.Refused += st.Refused
		rep.Spooled += st.Spooled
		rep.Runs += s.runs
		for k, n := range s.produced {
			rep.Produced[k] += n
			rep.Events += n
		}
		for k, n := range s.byKind {
			rep.ByKind[k] += n
		}
	}
	if p := failed.Load(); p != nil {
		errs = append(errs, *p)
	}
	return rep, errors.Join(errs...)
}

// sim is one host's simulation.
type sim struct {
	cfg      Config
	h        *host
	nc       *nats.Conn
	pub      *publish.Publisher
	produced map[RunKey]uint64
	byKind   map[schema.Kind]uint64
	runs     int
	log      *slog.Logger
}

func newSim(ctx context.Context, cfg Config, h Host, log *slog.Logger) (*sim, error) {
	gh, err := newHost(h.Name)
	if err != nil {
		return nil, err
	}
	nc, err := stream.Connect(h.NATS)
	if err != nil {
		return nil, fmt.Errorf("loadgen: host %s: %w", h.Name, err)
	}
	dir := filepath.Join(cfg.SpoolDir, stream.HostToken(h.Name))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		nc.Close()
		return nil, fmt.Errorf("loadgen: host %s: %w", h.Name, err)
	}
	pub, err := publish.New(ctx, publish.Config{Conn: nc, SpoolDir: dir, MaxInFlight: cfg.MaxInFlight, Logger: log.With("host", h.Name)})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("loadgen: host %s: %w", h.Name, err)
	}
	return &sim{cfg: cfg, h: gh, nc: nc, pub: pub, produced: map[RunKey]uint64{}, byKind: map[schema.Kind]uint64{}, log: log}, nil
}

func (s *sim) close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := s.pub.Flush(ctx); err != nil {
		s.pub.Close(ctx)
		return fmt.Errorf("loadgen: host %s: %w", s.h.origin.Host, err)
	}
	return s.pub.Close(ctx)
}

// publish hands evs to the publisher and counts them as produced once it
// has accepted them.
func (s *sim) publish(ctx context.Context, evs []schema.Event) error {
	if err := s.pub.Publish(ctx, evs); err != nil {
		if errors.Is(err, publish.ErrSinkUnavailable) {
			// Counted by the publisher as refused: a real host would deny.
			s.log.Warn("publisher refused events", "host", s.h.origin.Host, "error", err)
			return nil
		}
		return fmt.Errorf("loadgen: host %s: %w", s.h.origin.Host, err)
	}
	for _, e := range evs {
		s.produced[RunKey{e.Host, e.RunID}]++
		s.byKind[e.Kind]++
	}
	return nil
}

// loop runs one host: runs back to back, every step published as it
// happens, paced at perHost events/s (0: unpaced), a health event every
// HealthEvery.
func (s *sim) loop(ctx context.Context, offset time.Duration, perHost float64) error {
	if !sleep(ctx, offset) {
		return nil
	}
	start := time.Now()
	var sent float64
	nextHealth := start
	for s.cfg.RunsPerHost <= 0 || s.runs < s.cfg.RunsPerHost {
		r := s.h.newRun(s.cfg.Mix)
		for i := 0; i < r.steps(); i++ {
			if ctx.Err() != nil && i == 0 {
				return nil
			}
			// A run that has started is finished even when the time is up,
			// as a host's would be: a run's records are whole.
			now := time.Now()
			evs := r.step(i, now)
			if s.cfg.Mix.HealthEvery > 0 && !now.Before(nextHealth) {
				evs = append(evs, s.h.health(now))
				nextHealth = nextHealth.Add(s.cfg.Mix.HealthEvery)
			}
			if err := s.publish(context.WithoutCancel(ctx), evs); err != nil {
				return err
			}
			sent += float64(len(evs))
			if perHost > 0 {
				due := start.Add(time.Duration(sent / perHost * float64(time.Second)))
				sleep(ctx, time.Until(due))
			}
		}
		s.runs++
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
