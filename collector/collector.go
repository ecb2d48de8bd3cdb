// Package collector moves events from NATS JetStream into ClickHouse and
// runs the cross-check over what is stored (`mcpwarden collect`).
//
// Any number of collectors share one durable pull consumer, so JetStream
// spreads messages between them. A collector fetches messages until it
// holds BatchEvents events or BatchWait has passed, inserts them in one
// ClickHouse block, and only then acknowledges the messages. When
// ClickHouse fails it retries with exponential backoff, keeping the
// messages in progress (no ack, no loss); when it stops it leaves them
// unacknowledged for redelivery. Redelivered events collapse on event_id.
//
// The cross-check reads runs back from ClickHouse (so it sees the events
// every collector stored) and inserts findings with deterministic ids, so
// collectors doing the same work twice store each finding once.
package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultDurable is the durable consumer collectors share.
const DefaultDurable = stream.CollectorDurable

// Config configures a Collector.
type Config struct {
	NATS          stream.ConnOptions
	ClickHouseDSN string
	// Migrate creates the database and applies migrations at start-up, as
	// MigrateWith says (a cluster, the retention).
	Migrate     bool
	MigrateWith store.MigrateOptions
	// Stream, when non-nil, is created or updated at start-up.
	Stream *stream.Config
	// Durable names the shared consumer (default DefaultDurable).
	Durable string
	// BatchEvents and BatchWait bound one ClickHouse insert (defaults
	// 50,000 events, 1 s).
	BatchEvents int
	BatchWait   time.Duration
	// AckWait is how long JetStream waits for an ack before redelivering
	// (default 60 s); the collector marks held messages in progress well
	// within it while it retries.
	AckWait time.Duration
	// MaxBackoff caps the retry delay when ClickHouse fails, and while
	// JetStream is not ready at start-up (default 10 s).
	MaxBackoff time.Duration
	// LagEvery is how often the consumer's lag is read from JetStream for
	// Stats (default 5 s).
	LagEvery time.Duration
	// CrossCheck enables the cross-check loop; CrossCheckEvery is its period
	// (default 5 s).
	CrossCheck      bool
	CrossCheckEvery time.Duration
	CrossCheckCfg   crosscheck.Config
	Logger          *slog.Logger
	// MaxEventAge and MaxClockSkew bound the times of the events stored:
	// one dated more than MaxEventAge before the collector's clock
	// (default DefaultMaxEventAge) or more than MaxClockSkew after it
	// (default DefaultMaxClockSkew) is rejected and counted
	// (Stats.RejectedTime). ClickHouse partitions by month and refuses an
	// insert block that touches more than 100 partitions: events a host
	// dated across the years would make every insert fail, and no host's
	// events would be stored again.
	MaxEventAge, MaxClockSkew time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// DefaultMaxEventAge is older than any default retention keeps (400 days,
// the rollups'): the window then spans at most 15 months, so an insert
// touches at most 45 partitions of any table.
const DefaultMaxEventAge = 400 * 24 * time.Hour

// DefaultMaxClockSkew is how far ahead of the collector's clock a host's
// clock may be.
const DefaultMaxClockSkew = time.Hour

// Stats are a collector's counters and state. Counters only grow.
type Stats struct {
	// Messages fetched, Events stored, Rejected events (invalid, or in a
	// message that did not decode), Inserts that succeeded, InsertFailures
	// (attempts that failed and were retried), Findings the cross-check
	// inserted.
	Messages, Events, Rejected, Inserts, InsertFailures, Findings uint64
	// RejectedTime counts the rejected events that were dated outside
	// [now-MaxEventAge, now+MaxClockSkew] (included in Rejected).
	RejectedTime uint64
	// EventsByKind splits Events; FindingsBy splits Findings.
	EventsByKind map[schema.Kind]uint64
	FindingsBy   map[FindingKey]uint64
	// InsertTime is the time spent in successful inserts; LastInsert when
	// the last one succeeded (zero: none yet).
	InsertTime time.Duration
	LastInsert time.Time
	// CrossCheckPasses and CrossCheckFailures count the cross-check's passes.
	CrossCheckPasses, CrossCheckFailures uint64
	// Consumer is the shared durable consumer as JetStream last reported
	// it (every LagEvery); zero until the first report.
	Consumer ConsumerLag
	// NATSConnected: the connection to NATS is up.
	NATSConnected bool
}

// ConsumerLag is what the shared consumer has not finished.
type ConsumerLag struct {
	// Pending: messages in the stream not yet delivered to any collector;
	// AckPending: delivered, not yet acknowledged (being inserted, or held
	// by a collector that died, until AckWait); Redelivered: delivered more
	// than once and not yet acknowledged.
	Pending, AckPending, Redelivered uint64
	// At is when JetStream reported it.
	At time.Time
}

// FindingKey is one finding type and severity.
type FindingKey struct {
	Type     schema.FindingType
	Severity schema.Severity
}

// Collector is one collector process.
type Collector struct {
	cfg Config
	log *slog.Logger

	messages, events, rejected, inserts, insertFailures, findings atomic.Uint64
	rejectedTime                                                  atomic.Uint64
	eventsByKind                                                  [len(kindIndex)]atomic.Uint64
	insertNS, lastInsertNS                                        atomic.Int64
	xcheckPasses, xcheckFailures                                  atomic.Uint64
	natsConnected                                                 atomic.Bool

	mu         sync.Mutex // guards findingsBy and lag
	findingsBy map[FindingKey]uint64
	lag        ConsumerLag
}

// kindIndex numbers the event kinds for the per-kind counters.
var kindIndex = [...]schema.Kind{schema.KindLaunch, schema.KindDecision, schema.KindFileOp, schema.KindLandlockDenial, schema.KindFinding, schema.KindHealth}

// countStored adds a stored batch to the per-kind counters.
func (c *Collector) countStored(evs []schema.Event) {
	var n [len(kindIndex)]uint64
	for i := range evs {
		for k, kind := range kindIndex {
			if evs[i].Kind == kind {
				n[k]++
				break
			}
		}
	}
	for k := range n {
		if n[k] > 0 {
			c.eventsByKind[k].Add(n[k])
		}
	}
}

// countFindings adds inserted findings to the per-type counters.
func (c *Collector) countFindings(fs []schema.Event) {
	c.findings.Add(uint64(len(fs)))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range fs {
		if f.Finding == nil {
			continue
		}
		c.findingsBy[FindingKey{f.Finding.Type, f.Finding.Severity}]++
	}
}

// New checks cfg and returns a Collector.
func New(cfg Config) (*Collector, error) {
	if cfg.NATS.URL == "" {
		return nil, errors.New("collect: no NATS URL: pass --nats nats://HOST:4222")
	}
	if cfg.ClickHouseDSN == "" {
		return nil, errors.New("collect: no ClickHouse DSN: pass --clickhouse clickhouse://HOST:9000/mcpwarden")
	}
	if cfg.Durable == "" {
		cfg.Durable = DefaultDurable
	}
	if cfg.BatchEvents <= 0 {
		cfg.BatchEvents = 50_000
	}
	if cfg.BatchWait <= 0 {
		cfg.BatchWait = time.Second
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 60 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	if cfg.CrossCheckEvery <= 0 {
		cfg.CrossCheckEvery = 5 * time.Second
	}
	if cfg.LagEvery <= 0 {
		cfg.LagEvery = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxEventAge <= 0 {
		cfg.MaxEventAge = DefaultMaxEventAge
	}
	if cfg.MaxClockSkew <= 0 {
		cfg.MaxClockSkew = DefaultMaxClockSkew
	}
	if cfg.NATS.Name == "" {
		cfg.NATS.Name = "mcpwarden-collect"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Collector{cfg: cfg, log: log, findingsBy: map[FindingKey]uint64{}}, nil
}

// Stats returns the counters. It is safe to call at any time, from any
// goroutine.
func (c *Collector) Stats() Stats {
	s := Stats{
		Messages:           c.messages.Load(),
		Events:             c.events.Load(),
		Rejected:           c.rejected.Load(),
		RejectedTime:       c.rejectedTime.Load(),
		Inserts:            c.inserts.Load(),
		InsertFailures:     c.insertFailures.Load(),
		Findings:           c.findings.Load(),
		EventsByKind:       make(map[schema.Kind]uint64, len(kindIndex)),
		InsertTime:         time.Duration(c.insertNS.Load()),
		CrossCheckPasses:   c.xcheckPasses.Load(),
		CrossCheckFailures: c.xcheckFailures.Load(),
		NATSConnected:      c.natsConnected.Load(),
	}
	if ns := c.lastInsertNS.Load(); ns != 0 {
		s.LastInsert = time.Unix(0, ns)
	}
	for k, kind := range kindIndex {
		s.EventsByKind[kind] = c.eventsByKind[k].Load()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.FindingsBy = make(map[FindingKey]uint64, len(c.findingsBy))
	for k, v := range c.findingsBy {
		s.FindingsBy[k] = v
	}
	s.Consumer = c.lag
	return s
}

// watchLag reads the consumer's lag and the connection's state every
// LagEvery until ctx ends.
func (c *Collector) watchLag(ctx context.Context, nc *nats.Conn, cons jetstream.Consumer) {
	t := time.NewTicker(c.cfg.LagEvery)
	defer t.Stop()
	for {
		c.natsConnected.Store(nc.IsConnected())
		ictx, cancel := context.WithTimeout(ctx, c.cfg.LagEvery)
		info, err := cons.Info(ictx)
		cancel()
		if err == nil {
			c.mu.Lock()
			c.lag = ConsumerLag{Pending: info.NumPending, AckPending: uint64(info.NumAckPending), Redelivered: uint64(info.NumRedelivered), At: info.TimeStamp}
			c.mu.Unlock()
		} else if ctx.Err() == nil {
			c.log.Debug("read consumer info", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ConsumerConfig is the durable consumer every collector shares.
func ConsumerConfig(durable string, ackWait time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   "mcpwarden collectors: events into ClickHouse",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1, // never give up on an event
		FilterSubject: stream.AllSubjects,
		MaxAckPending: 20_000,
		// Large pull batches: one fetch fills one ClickHouse block.
		MaxRequestBatch: 10_000,
	}
}

// Run collects until ctx ends. It returns nil on cancellation.
func (c *Collector) Run(ctx context.Context) error {
	st, err := store.Open(ctx, c.cfg.ClickHouseDSN, c.cfg.Migrate, c.log)
	if err != nil {
		return err
	}
	defer st.Close()
	if c.cfg.Migrate {
		applied, err := st.MigrateWith(ctx, c.cfg.MigrateWith)
		if err != nil {
			return err
		}
		c.log.Info("ClickHouse schema is current", "applied", len(applied), "layout", st.Layout(), "distributed", st.Distributed())
	} else if err := st.CheckSchema(ctx); err != nil {
		return err
	}
	// A permission the server refuses is reported asynchronously (the
	// request itself only times out): keep the last one, so that waiting
	// for JetStream ends with the real cause.
	var refusal atomic.Pointer[error]
	nc, err := stream.Connect(c.cfg.NATS, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			refusal.Store(&err)
		}
		c.log.Warn("NATS reported an error", "error", err)
	}))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("collect: JetStream context: %w", err)
	}
	var s jetstream.Stream
	var cons jetstream.Consumer
	err = c.untilJetStream(ctx, &refusal, "open the stream and the durable consumer", func(ctx context.Context) error {
		var err error
		if c.cfg.Stream != nil {
			s, err = stream.Ensure(ctx, js, *c.cfg.Stream)
		} else {
			s, err = js.Stream(ctx, stream.Name)
		}
		if err != nil {
			return fmt.Errorf("collect: open stream %s: %w (start the daemon or create the stream; see docs/pipeline.md)", stream.Name, err)
		}
		if cons, err = s.CreateOrUpdateConsumer(ctx, ConsumerConfig(c.cfg.Durable, c.cfg.AckWait)); err != nil {
			return fmt.Errorf("collect: create durable consumer %s: %w", c.cfg.Durable, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.log.Info("collecting", "stream", stream.Name, "consumer", c.cfg.Durable, "database", st.Database())

	lagDone := make(chan struct{})
	lagCtx, stopLag := context.WithCancel(ctx)
	go func() {
		defer close(lagDone)
		c.watchLag(lagCtx, nc, cons)
	}()
	defer func() {
		stopLag()
		<-lagDone
	}()

	done := make(chan struct{})
	if c.cfg.CrossCheck {
		go func() {
			defer close(done)
			c.crossCheckLoop(ctx, st)
		}()
	} else {
		close(done)
	}
	err = c.consume(ctx, cons, st)
	<-done
	return err
}

// untilJetStream runs f until it succeeds, retrying (with a growing delay,
// logged) while JetStream is not there yet: no answer in time, no
// responders, a cluster still electing its leaders or short of the
// servers a replicated stream needs (a cluster starting, a node down). Any
// other error, and a permission the server refused, ends it.
func (c *Collector) untilJetStream(ctx context.Context, refusal *atomic.Pointer[error], what string, f func(context.Context) error) error {
	delay := 500 * time.Millisecond
	for {
		// Each attempt is bounded: a request the server drops (a refused
		// permission) is never answered.
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		if r := refusal.Load(); r != nil {
			return fmt.Errorf("%w (NATS refused this user: %w)", err, *r)
		}
		if !stream.NotReady(err) || ctx.Err() != nil {
			return err
		}
		c.log.Warn("JetStream is not ready; retrying", "what", what, "error", err, "retry_in", delay)
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
		delay = min(2*delay, c.cfg.MaxBackoff)
	}
}

type held struct {
	msgs   []jetstream.Msg
	events []schema.Event
}

// consume fills batches and hands them to one inserter goroutine, so that
// fetching and decoding the next batch overlaps ClickHouse's work on the
// previous one. At most two batches are held (one inserting, one ready).
func (c *Collector) consume(ctx context.Context, cons jetstream.Consumer, st *store.Store) error {
	ready := make(chan held, 1)
	inserted := make(chan struct{})
	go func() {
		defer close(inserted)
		for h := range ready {
			if ctx.Err() != nil {
				nakAll(h.msgs)
				continue
			}
			t0 := time.Now()
			if err := c.insert(ctx, st, h); err != nil {
				// Cancelled: hand the messages back now rather than after AckWait.
				nakAll(h.msgs)
				continue
			}
			t1 := time.Now()
			for _, m := range h.msgs {
				// An ack lost here means a redelivery, which collapses.
				_ = m.Ack()
			}
			c.log.Debug("batch stored", "messages", len(h.msgs), "events", len(h.events), "insert", t1.Sub(t0), "ack", time.Since(t1))
		}
	}()
	defer func() {
		close(ready)
		<-inserted
	}()
	// A continuous pull keeps messages the server sent in the iterator until
	// taken; one-shot fetches that expire can strand delivered messages
	// until AckWait. The prefetch is small so an outage holds few messages.
	var p *puller
	defer func() {
		if p != nil {
			p.stop()
		}
	}()
	for ctx.Err() == nil {
		if p == nil {
			it, err := cons.Messages(jetstream.PullMaxMessagesWithBytesLimit(1024, c.prefetchBytes()),
				jetstream.PullHeartbeat(pullHeartbeat))
			if err != nil {
				c.log.Warn("pull from JetStream failed; retrying", "error", err)
				sleep(ctx, time.Second)
				continue
			}
			p = startPuller(it)
		}
		h, err := c.fill(ctx, p.msgs)
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			p.stop()
			p = nil
		}
		if err != nil && ctx.Err() == nil {
			c.log.Warn("fetch from JetStream failed; retrying", "error", err)
			sleep(ctx, time.Second)
		}
		if len(h.msgs) == 0 {
			continue
		}
		select {
		case ready <- h:
		case <-ctx.Done():
			nakAll(h.msgs)
		}
	}
	return nil
}

// pullHeartbeat is how often the server holding a pull says it is alive; a
// pull is given up for a new one after two missing heartbeats, so a consumer
// leader killed mid-pull costs about 10 s (the default, half the pull's 30 s
// expiry, cost 30 s).
const pullHeartbeat = 5 * time.Second

// pulled is one answer of the iterator's Next.
type pulled struct {
	m   jetstream.Msg
	err error
}

// A puller waits in the iterator's Next with no deadline of its own and
// hands each message on. The iterator watches the pull's heartbeats only
// while a Next waits, for twice the heartbeat interval, and starts a new pull
// when they stop (the pull request died with a consumer leader that was
// killed): Next calls cut short at every batch deadline never let that
// watch fire, and a collector whose pull was parked on a killed node waited
// for messages forever.
type puller struct {
	it   jetstream.MessagesContext
	msgs chan pulled
	quit chan struct{}
	done chan struct{}
}

func startPuller(it jetstream.MessagesContext) *puller {
	p := &puller{it: it, msgs: make(chan pulled), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			m, err := it.Next()
			select {
			case p.msgs <- pulled{m, err}:
			case <-p.quit:
				// Taken by nobody: JetStream redelivers it after AckWait.
				return
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
		}
	}()
	return p
}

// stop ends the iterator and waits for the puller to return.
func (p *puller) stop() {
	close(p.quit)
	p.it.Stop()
	<-p.done
}

// prefetchBytes sizes each pull to about one batch, and never below the
// largest message (a pull smaller than a message would stall). JetStream
// fills one pull request before serving the next, so a pull far larger than
// a batch lets one collector take everything while the others that share
// the consumer sit idle.
func (c *Collector) prefetchBytes() int {
	return max(schema.MaxBatchBytes+64<<10, c.cfg.BatchEvents*bytesPerEvent)
}

// bytesPerEvent is a typical encoded event, for sizing pulls and batches.
const bytesPerEvent = 400

func nakAll(msgs []jetstream.Msg) {
	for _, m := range msgs {
		_ = m.Nak()
	}
}

// fill takes messages until the batch is full or BatchWait has passed.
func (c *Collector) fill(ctx context.Context, from <-chan pulled) (held, error) {
	h := held{events: make([]schema.Event, 0, c.cfg.BatchEvents+schema.MaxBatchEvents/16)}
	timer := time.NewTimer(c.cfg.BatchWait)
	defer timer.Stop()
	var got []jetstream.Msg
	var events int
	var ferr error
take:
	for events < c.cfg.BatchEvents {
		var r pulled
		select {
		case r = <-from:
		case <-timer.C:
			break take
		case <-ctx.Done():
			break take
		}
		if r.err != nil {
			ferr = r.err
			break
		}
		m := r.m
		c.messages.Add(1)
		got = append(got, m)
		// Estimate from the size; decoding happens in parallel below.
		events += max(1, len(m.Data())/bytesPerEvent)
	}
	now := c.cfg.Now()
	for i, d := range c.decode(got, now.Add(-c.cfg.MaxEventAge).UnixNano(), now.Add(c.cfg.MaxClockSkew).UnixNano()) {
		m := got[i]
		switch {
		case d.err != nil:
			c.rejected.Add(1)
			c.log.Warn("undecodable batch; terminating it", "subject", m.Subject(), "error", d.err)
			_ = m.Term()
			continue
		case d.rejected > 0:
			c.rejected.Add(uint64(d.rejected))
			c.rejectedTime.Add(uint64(d.badTime))
			c.log.Warn("batch had invalid events; storing the valid ones", "subject", m.Subject(), "rejected", d.rejected,
				"dated_outside_window", d.badTime)
		}
		h.msgs = append(h.msgs, m)
		h.events = appendStored(h.events, d.events)
	}
	return h, ferr
}

// appendStored appends the events that are stored: all but the on-host
// cross-check's provisional and withdrawn findings, which are for
// `mcpwarden events` only (the final finding follows them; counting them
// would count one finding twice).
func appendStored(dst, evs []schema.Event) []schema.Event {
	for _, e := range evs {
		if e.Finding != nil && e.Finding.Status != schema.StatusFinal {
			continue
		}
		dst = append(dst, e)
	}
	return dst
}

type decoded struct {
	events   []schema.Event
	rejected int
	badTime  int // of rejected: dated outside the window
	err      error
}

// inWindow keeps the events dated within [oldest, newest] (Unix ns) and
// returns how many it dropped.
func inWindow(evs []schema.Event, oldest, newest int64) ([]schema.Event, int) {
	kept := evs[:0]
	for i := range evs {
		if t := evs[i].TimeNS; t < oldest || t > newest {
			continue
		}
		kept = append(kept, evs[i])
	}
	return kept, len(evs) - len(kept)
}

// decode parses messages on every core: JSON decoding is the collector's
// main CPU cost. Events dated outside [oldest, newest] are rejected.
func (c *Collector) decode(msgs []jetstream.Msg, oldest, newest int64) []decoded {
	out := make([]decoded, len(msgs))
	workers := min(runtime.GOMAXPROCS(0), len(msgs))
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(msgs) {
					return
				}
				m := msgs[i]
				if !schema.KnownBatchFormat(m.Headers().Get(schema.BatchHeader)) {
					out[i].err = errors.New("message without the " + schema.BatchHeader + " header")
					continue
				}
				out[i].events, out[i].rejected, out[i].err = stream.DecodeBatch(m.Subject(), m.Data())
				if out[i].err == nil {
					out[i].events, out[i].badTime = inWindow(out[i].events, oldest, newest)
					out[i].rejected += out[i].badTime
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// stopGrace bounds how long an insert already under way may go on once the
// collector is told to stop. Cancelling it at once would hand back messages
// whose rows ClickHouse may already hold (26.7 shows them before its
// materialized views are done), and they would be stored a second time.
const stopGrace = 10 * time.Second

// insert retries until the insert succeeds or ctx ends; an attempt under way
// when ctx ends may still finish within stopGrace.
func (c *Collector) insert(ctx context.Context, st *store.Store, h held) error {
	attempts, stopAttempts := withGrace(ctx, stopGrace)
	defer stopAttempts()
	backoff := 200 * time.Millisecond
	lastProgress := time.Now()
	for {
		ictx, cancel := context.WithTimeout(attempts, 30*time.Second)
		t0 := time.Now()
		err := st.Insert(ictx, h.events)
		cancel()
		if err == nil {
			now := time.Now()
			c.insertNS.Add(int64(now.Sub(t0)))
			c.lastInsertNS.Store(now.UnixNano())
			c.inserts.Add(1)
			c.events.Add(uint64(len(h.events)))
			c.countStored(h.events)
			return nil
		}
		c.insertFailures.Add(1)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.log.Warn("ClickHouse insert failed; retrying without acknowledging", "events", len(h.events), "backoff", backoff, "error", err)
		if time.Since(lastProgress) > c.cfg.AckWait/3 {
			for _, m := range h.msgs {
				_ = m.InProgress()
			}
			lastProgress = time.Now()
		}
		if !sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(backoff*2, c.cfg.MaxBackoff)
		if backoff > c.cfg.AckWait/3 {
			backoff = max(c.cfg.AckWait/3, 10*time.Millisecond)
		}
	}
}

// withGrace returns a context that ends grace after ctx ends, or when the
// returned cancel is called.
func withGrace(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-g.Done():
		}
	})
	return g, func() { stop(); cancel() }
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
