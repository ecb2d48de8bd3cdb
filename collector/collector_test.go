package collector

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/natsserver"
	"github.com/mcpwarden/mcpwarden/transport/publish"
	"github.com/mcpwarden/mcpwarden/transport/stream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type env struct {
	nats *natsserver.Server
	pub  *publish.Publisher
	dsn  string
}

func newEnv(t *testing.T, dsn string) *env { return newEnvTB(t, dsn) }

func natsOpts(e *env) stream.ConnOptions { return stream.ConnOptions{URL: e.nats.ClientURL()} }

func newEnvTB(t testing.TB, dsn string) *env {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), MaxStoreBytes: natstest.StoreBytes, Port: -1, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := stream.Connect(stream.ConnOptions{URL: srv.ClientURL(), Name: "test-publisher"}, nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	p, err := publish.New(context.Background(), publish.Config{Conn: nc, SpoolDir: t.TempDir(), EnsureStream: &stream.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return &env{nats: srv, pub: p, dsn: dsn}
}

func (e *env) collector(t *testing.T, mut func(*Config)) *Collector {
	t.Helper()
	cfg := Config{
		NATS:          stream.ConnOptions{URL: e.nats.ClientURL()},
		ClickHouseDSN: e.dsn, Migrate: true, Stream: &stream.Config{},
		BatchEvents: 5000, BatchWait: 200 * time.Millisecond, AckWait: 3 * time.Second, MaxBackoff: 500 * time.Millisecond,
	}
	if mut != nil {
		mut(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// start runs c until the returned stop is called or the test ends (a test
// that fails early must not leave the collector reporting into it).
func start(t *testing.T, c *Collector) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Run(ctx); err != nil {
			t.Errorf("collector: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

func openStore(t testing.TB, dsn string) *store.Store {
	t.Helper()
	var st *store.Store
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, err = store.Open(context.Background(), dsn, true, nil); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// counts returns (rows, distinct event ids) in events.
func counts(t *testing.T, st *store.Store) (rows, distinct uint64) {
	t.Helper()
	if err := st.Conn().QueryRow(context.Background(), "SELECT count(), uniqExact(event_id) FROM events").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

func waitDistinct(t *testing.T, st *store.Store, want uint64, within time.Duration) {
	t.Helper()
	if got := waitCount(t, st, "SELECT uniqExact(event_id) FROM events", want, within); got != want {
		t.Fatalf("%d distinct events stored, produced %d (no progress for %s)", got, want, within)
	}
}

// waitCount polls query (one UInt64) until it reaches want and returns the
// last value. within bounds the time without progress, not the whole wait:
// on a loaded machine storing is slow but goes on, and a stalled collector
// still fails after within. 15 minutes bound the wait in all. A query that
// fails (the collector has not applied its migrations yet) is no progress.
func waitCount(t *testing.T, st *store.Store, query string, want uint64, within time.Duration) uint64 {
	t.Helper()
	end := time.Now().Add(15 * time.Minute)
	deadline := time.Now().Add(within)
	var got, seen uint64
	for time.Now().Before(deadline) && time.Now().Before(end) {
		if err := st.Conn().QueryRow(context.Background(), query).Scan(&got); err == nil && got >= want {
			break
		}
		if got > seen {
			seen = got
			deadline = time.Now().Add(within)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return got
}

// assertNoDuplicatesInQueries: after FINAL, every event id is one row.
func assertNoDuplicatesInQueries(t *testing.T, st *store.Store, want uint64) {
	t.Helper()
	var rows, distinct uint64
	if err := st.Conn().QueryRow(context.Background(), "SELECT count(), uniqExact(event_id) FROM events FINAL").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != distinct || distinct != want {
		t.Fatalf("FINAL: %d rows for %d distinct ids, want %d", rows, distinct, want)
	}
}

func publishAll(t *testing.T, p *publish.Publisher, evs []schema.Event, chunk int) {
	t.Helper()
	for i := 0; i < len(evs); i += chunk {
		if err := p.Publish(context.Background(), evs[i:min(i+chunk, len(evs))]); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCollectEndToEnd: publisher → JetStream → collector → ClickHouse, then
// the cross-check finds what a run did.
func TestCollectEndToEnd(t *testing.T) {
	e := newEnv(t, chtest.Database(t))
	g := eventgen.New("host-e2e")
	g.T0 = time.Now().Add(-30 * time.Minute)
	evs := g.Mixed(20_000)
	// One escape (audit mode), one blocked attempt, one unattributed access.
	esc := g.FileOp(1)
	esc.FileOp.PathClass, esc.FileOp.Verdict, esc.FileOp.PathHash = schema.PathOutside, "escape", g.Hasher.Hash("/etc/passwd")
	blk := g.FileOp(2)
	blk.FileOp.PathClass, blk.FileOp.Verdict, blk.FileOp.Result = schema.PathOutside, "blocked_by_kernel", -13
	un := g.FileOp(3) // long after the last call ended
	un.TimeNS = g.T0.Add(10 * time.Minute).UnixNano()
	// The proxy identified the server: the reads before the first call
	// are its start-up. (Published first: the events are older than the
	// window, so the cross-check concludes as soon as it sees them.)
	id := g.Origin.NewEvent(schema.KindLaunch, g.RunID, g.ScopeID, g.ScopeHash, g.T0)
	id.Launch = &schema.Launch{Phase: schema.PhaseIdentified, Mode: schema.ModeEnforce, LandlockABI: 7, ServerName: "naive", ProtocolEra: "legacy"}
	evs = append([]schema.Event{id}, evs...)
	evs = append(evs, esc, blk, un)
	c := e.collector(t, func(c *Config) {
		c.CrossCheck = true
		c.CrossCheckEvery = 200 * time.Millisecond
		// Final 15 s after the events arrived: on a loaded machine a run's
		// decisions have arrived more than 5 s after the file operations
		// they explain (823 of them judged UNATTRIBUTED_ACCESS once).
		c.CrossCheckCfg = crosscheck.Config{Window: 15 * time.Second}
	})
	stop := start(t, c)
	publishAll(t, e.pub, evs, 700)
	st := openStore(t, e.dsn)
	// Findings are added to the same table: wait for the events, then the
	// findings, each bounded by the time without progress (under load,
	// storing the 20,000 events took minutes when the packages' tests ran
	// side by side: a fixed 3-minute wait failed at load 27).
	if got := waitCount(t, st, "SELECT uniqExact(event_id) FROM events WHERE kind != 'finding'", uint64(len(evs)), time.Minute); got != uint64(len(evs)) {
		t.Fatalf("%d distinct events stored, produced %d (no progress for 1m0s); collector stats %+v", got, len(evs), c.Stats())
	}
	// The three findings come from one pass of the cross-check once the
	// 15 s window has passed: each is one more row, which counts as
	// progress.
	waitCount(t, st, "SELECT uniqExact(event_id) FROM events WHERE kind = 'finding' AND finding_type IN ('ESCAPE', 'BLOCKED_ATTEMPT', 'UNATTRIBUTED_ACCESS')", 3, 2*time.Minute)
	stop()
	found := map[schema.FindingType]uint64{}
	rows, err := st.Conn().Query(context.Background(), "SELECT finding_type, uniqExact(event_id) FROM events WHERE kind = 'finding' GROUP BY finding_type")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ string
		var n uint64
		if err := rows.Scan(&typ, &n); err != nil {
			t.Fatal(err)
		}
		found[schema.FindingType(typ)] = n
	}
	rows.Close()
	if found[schema.FindingEscape] != 1 || found[schema.FindingBlockedAttempt] != 1 || found[schema.FindingUnattributedAccess] != 1 {
		t.Fatalf("findings by type: %v", found)
	}
	if s := c.Stats(); s.Rejected != 0 || s.Events < uint64(len(evs)) {
		t.Fatalf("stats %+v", s)
	}
	// A second cross-check pass over the same data adds no rows.
	_, before := counts(t, st)
	if err := c.CrossCheckOnce(context.Background(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, after := counts(t, st); after != before {
		t.Fatalf("re-running the cross-check added %d findings", after-before)
	}
}

// TestCollectorsShareTheConsumerAndSurviveARestart: two collectors split the
// stream; one is stopped mid-run and a new one takes over. Every event is
// stored, queries see each once.
func TestCollectorsShareTheConsumerAndSurviveARestart(t *testing.T) {
	e := newEnv(t, chtest.Database(t))
	g := eventgen.New("host-r")
	evs := g.Mixed(60_000)
	a := e.collector(t, nil)
	b := e.collector(t, nil)
	stopA := start(t, a)
	stopB := start(t, b)
	publishAll(t, e.pub, evs[:30_000], 500)
	st := openStore(t, e.dsn)
	deadline := time.Now().Add(2 * time.Minute)
	for a.Stats().Events == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stopA() // killed mid-run: whatever it held is redelivered
	publishAll(t, e.pub, evs[30_000:], 500)
	c := e.collector(t, nil)
	stopC := start(t, c)
	waitDistinct(t, st, uint64(len(evs)), 2*time.Minute)
	stopB()
	stopC()
	assertNoDuplicatesInQueries(t, st, uint64(len(evs)))
	if b.Stats().Events == 0 || a.Stats().Events == 0 {
		t.Fatalf("the consumer was not shared: a %+v b %+v", a.Stats(), b.Stats())
	}
}

// TestClickHouseKilledMidBatch really kills a private clickhouse-server
// (SIGKILL) while the collector is inserting, keeps publishing, restarts
// the server on the same data, and checks that every event is stored once.
func TestClickHouseKilledMidBatch(t *testing.T) {
	srv := chtest.StartServer(t)
	dsn := srv.DSN("mcpwarden_fault")
	e := newEnv(t, dsn)
	g := eventgen.New("host-f")
	evs := g.Mixed(80_000)
	c := e.collector(t, func(c *Config) { c.BatchEvents = 2000; c.BatchWait = 50 * time.Millisecond })
	stop := start(t, c)
	st := openStore(t, dsn)
	publishAll(t, e.pub, evs[:20_000], 500)
	deadline := time.Now().Add(2 * time.Minute)
	for c.Stats().Inserts < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	var pubErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // keep producing while the store is down
		defer wg.Done()
		for i := 20_000; i < len(evs); i += 500 {
			if err := e.pub.Publish(context.Background(), evs[i:i+500]); err != nil {
				pubErr = err
				return
			}
		}
	}()
	srv.Kill()
	failuresBefore := c.Stats().InsertFailures
	deadline = time.Now().Add(2 * time.Minute)
	for c.Stats().InsertFailures == failuresBefore && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.Stats().InsertFailures == failuresBefore {
		t.Fatal("the collector never saw ClickHouse fail")
	}
	wg.Wait()
	if pubErr != nil {
		t.Fatal(pubErr)
	}
	srv.Start()
	st2 := openStore(t, dsn)
	waitDistinct(t, st2, uint64(len(evs)), 120*time.Second)
	stop()
	assertNoDuplicatesInQueries(t, st2, uint64(len(evs)))
	_ = st
}

func TestNewRefusesMissingConfig(t *testing.T) {
	for _, cfg := range []Config{{ClickHouseDSN: "clickhouse://x"}, {NATS: stream.ConnOptions{URL: "nats://x"}}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestRunFailsClearlyWithoutSchema(t *testing.T) {
	e := newEnv(t, chtest.Database(t))
	c := e.collector(t, func(c *Config) { c.Migrate = false })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := c.Run(ctx)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a schema error", err)
	}
	_ = clickhouse.Named
}

// TestStopLetsTheInsertUnderWayFinish: a collector stopped while ClickHouse
// has stored a batch but not yet answered the insert (26.7 shows the rows
// before its materialized views are done; here a proxy holds the answer back)
// finishes and acks that insert instead of handing the messages back, so the
// collector taking over the durable consumer gets nothing to store again.
func TestStopLetsTheInsertUnderWayFinish(t *testing.T) {
	dsn := chtest.Database(t)
	slow := newSlowReplies(t, chtest.Addr())
	e := newEnv(t, dsn)
	long := func(cfg *Config) {
		cfg.ClickHouseDSN = strings.Replace(dsn, chtest.Addr(), slow.addr, 1)
		cfg.AckWait = 2 * time.Minute
	}
	a := e.collector(t, long)
	stopA := start(t, a)
	waitConsumer(t, e)
	st := openStore(t, dsn)
	evs := eventgen.New("host-s").Mixed(200)
	slow.delay.Store(int64(time.Second))
	publishAll(t, e.pub, evs, len(evs))
	waitDistinct(t, st, uint64(len(evs)), 2*time.Minute)
	stopA() // while the insert's answer is held back
	slow.delay.Store(0)
	if s := a.Stats(); s.InsertFailures != 0 || s.Events != uint64(len(evs)) {
		t.Fatalf("the stopped collector's stats: %+v, want every insert finished (%d events)", s, len(evs))
	}
	b := e.collector(t, long)
	stopB := start(t, b)
	time.Sleep(2 * time.Second) // several pulls
	stopB()
	if got := b.Stats().Messages; got != 0 {
		t.Fatalf("the collector that took over received %d messages the stopped one had stored", got)
	}
}

// slowReplies relays TCP to ClickHouse and holds each chunk of ClickHouse's
// replies back by delay (0: none).
type slowReplies struct {
	addr  string
	delay atomic.Int64
}

func newSlowReplies(t *testing.T, backend string) *slowReplies {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s := &slowReplies{addr: l.Addr().String()}
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", backend)
			if err != nil {
				client.Close()
				continue
			}
			go func() { _, _ = io.Copy(server, client); server.(*net.TCPConn).CloseWrite() }()
			go func() {
				defer client.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if n > 0 {
						time.Sleep(time.Duration(s.delay.Load()))
						if _, werr := client.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				_, _ = io.Copy(io.Discard, server) // drain, so ClickHouse sees no reset
				server.Close()
			}()
		}
	}()
	return s
}

// jetStreamClient connects a test client to the NATS server at url; the
// connection closes when the test ends.
func jetStreamClient(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// waitConsumer waits until a collector has created the durable consumer.
func waitConsumer(t *testing.T, e *env) {
	t.Helper()
	js := jetStreamClient(t, e.nats.ClientURL())
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := js.Consumer(context.Background(), stream.Name, DefaultDurable); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("no consumer %s after 2 minutes: %v", DefaultDurable, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEventsOutsideTheirSubjectAreRejected: a host may publish only under its
// own subject (NATS permissions), so a message under host-a carrying events
// in host-b's name, or of another kind than its subject's, is a forgery: those
// events are rejected and never stored; the honest ones of the message are.
func TestEventsOutsideTheirSubjectAreRejected(t *testing.T) {
	e := newEnv(t, chtest.Database(t))
	honest := eventgen.New("host-a").Mixed(200)
	var fileOps []schema.Event
	for _, ev := range honest {
		if ev.Kind == schema.KindFileOp {
			fileOps = append(fileOps, ev)
		}
	}
	forgedHost := eventgen.New("host-b").FileOp(1)
	forgedKind := fileOps[0]
	forgedKind.EventID, forgedKind.Kind, forgedKind.FileOp = schema.NewID(), schema.KindHealth, nil
	forgedKind.Health = &schema.Health{Component: "daemon"}
	body, err := schema.EncodeBatch(append(append([]schema.Event(nil), fileOps...), forgedHost, forgedKind))
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(stream.Subject("host-a", schema.KindFileOp))
	m.Data = body
	m.Header.Set(schema.BatchHeader, schema.BatchFormat)
	if _, err := jetStreamClient(t, e.nats.ClientURL()).PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	// A long AckWait: a slow insert must not cause a redelivery either.
	c := e.collector(t, func(cfg *Config) { cfg.AckWait = 2 * time.Minute })
	stop := start(t, c)
	st := openStore(t, e.dsn)
	waitDistinct(t, st, uint64(len(fileOps)), 2*time.Minute)
	// Read once the rows are visible: any later delivery (one taken during
	// the stop and handed back) would count the forged events again.
	rejected := c.Stats().Rejected
	stop()
	var forged uint64
	if err := st.Conn().QueryRow(context.Background(), "SELECT count() FROM events WHERE host != 'host-a' OR kind != 'file_op'").Scan(&forged); err != nil {
		t.Fatal(err)
	}
	if forged != 0 || rejected != 2 {
		t.Fatalf("%d forged events stored, %d rejected (want 0 and 2)", forged, rejected)
	}
}
