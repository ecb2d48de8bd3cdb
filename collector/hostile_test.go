package collector

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/internal/chtest"
	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/internal/eventgen"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
	"github.com/nats-io/nats.go"
)

// publishRaw publishes events as a compromised host would: one v1 message
// under host's own subject, each event marshalled as is (no Validate on the
// way out, as schema.EncodeBatch would do).
func publishRaw(t *testing.T, e *env, host string, kind schema.Kind, evs []schema.Event) {
	t.Helper()
	var body []byte
	for i := range evs {
		line, err := json.Marshal(&evs[i])
		if err != nil {
			t.Fatal(err)
		}
		body = append(append(body, line...), '\n')
	}
	m := nats.NewMsg(stream.Subject(host, kind))
	m.Data = body
	m.Header.Set(schema.BatchHeader, schema.BatchFormatV1)
	if _, err := jetStreamClient(t, e.nats.ClientURL()).PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// storedOf counts the distinct events of host in ClickHouse.
func storedOf(t *testing.T, st *store.Store, host string) uint64 {
	t.Helper()
	n, err := countHost(st, host)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func countHost(st *store.Store, host string) (uint64, error) {
	var n uint64
	err := st.QueryRow(context.Background(), "SELECT uniqExact(event_id) FROM events WHERE host = {host:String}", store.Params{"host": host}, &n)
	return n, err
}

// waitHost waits until want distinct events of host are stored (the
// collector creates the tables when it starts).
func waitHost(t *testing.T, st *store.Store, host string, want uint64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var n uint64
	var err error
	for time.Now().Before(deadline) {
		if n, err = countHost(st, host); err == nil && n >= want {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || n != want {
		t.Fatalf("%d distinct events of %s stored after %v (%v), produced %d (is the collector stuck on another host's batch?)", n, host, within, err, want)
	}
}

// TestHostileTimesDoNotStopTheCollector: a compromised host (holding its own
// NATS credentials) publishes file operations dated in 150 different
// months, from 1971 to 2230. ClickHouse partitions by month and refuses an
// insert block that touches more than 100 partitions, so a collector that
// stored them would retry that block for ever, and no host's events would
// be stored again. Events dated far outside what the pipeline can hold
// (before the retention, beyond the clock skew allowed) are rejected and
// counted; the host's honest events, and every other host's, are stored.
func TestHostileTimesDoNotStopTheCollector(t *testing.T) {
	e := newEnv(t, chtest.Database(t))
	evil := eventgen.New("evil")
	var hostile []schema.Event
	t0 := time.Date(1971, 1, 15, 0, 0, 0, 0, time.UTC)
	for i := 0; len(hostile) < 150; i++ {
		at := t0.AddDate(0, i*18, 0) // 1971 .. 2197, every one in another month
		if d := time.Since(at).Abs(); d < 2*365*24*time.Hour {
			continue // plausible: not what this test sends
		}
		ev := evil.FileOp(i)
		ev.TimeNS = at.UnixNano()
		hostile = append(hostile, ev)
	}
	future := evil.FileOp(1000)
	future.TimeNS = time.Now().Add(30 * 24 * time.Hour).UnixNano()
	hostile = append(hostile, future)
	honestEvil := []schema.Event{evil.FileOp(2000), evil.FileOp(2001)}
	publishRaw(t, e, "evil", schema.KindFileOp, append(append([]schema.Event(nil), hostile...), honestEvil...))

	honest := eventgen.New("host-a").FileOp
	var good []schema.Event
	for i := 0; i < 300; i++ {
		good = append(good, honest(i))
	}
	publishAll(t, e.pub, good, 100)

	c := e.collector(t, func(cfg *Config) { cfg.AckWait = 2 * time.Minute })
	stop := start(t, c)
	st := openStore(t, e.dsn)
	waitHost(t, st, "host-a", uint64(len(good)), 2*time.Minute)
	waitHost(t, st, "evil", uint64(len(honestEvil)), time.Minute)
	stats := c.Stats()
	stop()
	if n := storedOf(t, st, "evil"); n != uint64(len(honestEvil)) {
		t.Errorf("%d events of the hostile host stored, want its %d honest ones", n, len(honestEvil))
	}
	if stats.Rejected != uint64(len(hostile)) || stats.RejectedTime != uint64(len(hostile)) {
		t.Errorf("%d events rejected, %d for their time, want the %d hostile ones", stats.Rejected, stats.RejectedTime, len(hostile))
	}
}

// TestOutOfRangeNumbersAreRejected: numbers a ClickHouse column cannot hold
// (a pid beyond the kernel's limit or negative, a result or exit status
// beyond 32 bits, a Landlock ABI beyond 255, a negative count) would be
// stored wrapped to another value; they are rejected and counted instead.
func TestOutOfRangeNumbersAreRejected(t *testing.T) {
	e := newEnv(t, chtest.Database(t))
	g := eventgen.New("evil")
	fileOp := func(mut func(*schema.FileOp)) schema.Event {
		ev := g.FileOp(1)
		mut(ev.FileOp)
		return ev
	}
	launch := func(mut func(*schema.Launch)) schema.Event {
		ev := g.Mixed(1)[0]
		mut(ev.Launch)
		return ev
	}
	decision := func(mut func(*schema.Decision)) schema.Event {
		ev := g.Decision(1)
		mut(ev.Decision)
		return ev
	}
	byKind := map[schema.Kind][]schema.Event{
		schema.KindFileOp: {
			fileOp(func(f *schema.FileOp) { f.PID = -1 }),
			fileOp(func(f *schema.FileOp) { f.PID = 1 << 40 }),
			fileOp(func(f *schema.FileOp) { f.Result = 1 << 40 }),
			fileOp(func(f *schema.FileOp) { f.Result = -(1 << 40) }),
		},
		schema.KindLaunch: {
			launch(func(l *schema.Launch) { l.RootPID = -7 }),
			launch(func(l *schema.Launch) { l.ExitStatus = 1 << 40 }),
			launch(func(l *schema.Launch) { l.LandlockABI = 300 }),
			launch(func(l *schema.Launch) { l.DurationMS = -5 }),
			launch(func(l *schema.Launch) { l.ServerUID = 1 << 40 }),
		},
		schema.KindDecision: {
			decision(func(d *schema.Decision) { d.RetryCount = -1 }),
			decision(func(d *schema.Decision) { d.RetryCount = 1 << 40 }),
			decision(func(d *schema.Decision) { d.LatencyMS = -1 }),
		},
	}
	hostile := 0
	for kind, evs := range byKind {
		hostile += len(evs)
		publishRaw(t, e, "evil", kind, evs)
	}
	good := eventgen.New("host-a").Mixed(100)
	publishAll(t, e.pub, good, 100)

	c := e.collector(t, func(cfg *Config) { cfg.AckWait = 2 * time.Minute })
	stop := start(t, c)
	st := openStore(t, e.dsn)
	waitHost(t, st, "host-a", uint64(len(good)), 2*time.Minute)
	// The hostile messages were published first: by now they are decoded.
	rejected := c.Stats().Rejected
	stop()
	if n := storedOf(t, st, "evil"); n != 0 {
		t.Errorf("%d events with out-of-range numbers stored (wrapped to other values), want 0", n)
	}
	if rejected != uint64(hostile) {
		t.Errorf("%d events rejected, want %d", rejected, hostile)
	}
}
