package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpwarden/mcpwarden/collector"
	"github.com/mcpwarden/mcpwarden/daemon"
	"github.com/mcpwarden/mcpwarden/daemon/probes"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/publish"
)

func TestCheckAddr(t *testing.T) {
	cases := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:9474", true},
		{"127.0.0.1:0", true},
		{"[::1]:9474", true},
		{"0.0.0.0:9474", true},
		{"localhost:9474", true},
		{":9474", false}, // every address, by accident
		{"127.0.0.1", false},
		{"127.0.0.1:http", false},
		{"127.0.0.1:70000", false},
		{"127.0.0.1:-1", false},
		{"", false},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			err := CheckAddr(c.addr)
			if (err == nil) != c.ok {
				t.Fatalf("CheckAddr(%q) = %v, want ok=%v", c.addr, err, c.ok)
			}
		})
	}
}

type daemonStats daemon.Stats

func (s daemonStats) Stats() daemon.Stats { return daemon.Stats(s) }

func TestDaemonSeries(t *testing.T) {
	s := daemonStats{
		Ready: true, RunsActive: 2, RunsRegistered: 5, RunsRestarted: 1,
		RefusedSinkDown: 3, RefusedInvalid: 4, RefusedPeer: 6,
		Probes:          probes.Counters{Events: 100, RingDrops: 7, InflightFull: 8, WatchFull: 9, Truncated: 10, QueueDrops: 11, DecodeErrors: 12},
		AuditQueueDrops: 13, AuditLost: 14, KernelAuditLost: 16, AuditOtherReaders: 1, Published: 90, PublishFailed: 15, SinkDown: true,
		AuditStream: "on", LandlockABI: 7, Hooks: 5, Unavailable: 2,
	}
	want := `
# HELP mcpwarden_daemon_drops_total Events lost, by the stage that lost them.
# TYPE mcpwarden_daemon_drops_total counter
mcpwarden_daemon_drops_total{stage="audit_queue_full"} 13
mcpwarden_daemon_drops_total{stage="audit_socket"} 14
mcpwarden_daemon_drops_total{stage="bpf_inflight_full"} 8
mcpwarden_daemon_drops_total{stage="bpf_ring_full"} 7
mcpwarden_daemon_drops_total{stage="bpf_watch_full"} 9
mcpwarden_daemon_drops_total{stage="kernel_audit"} 16
mcpwarden_daemon_drops_total{stage="publish_failed"} 15
mcpwarden_daemon_drops_total{stage="reader_queue_full"} 11
# HELP mcpwarden_daemon_registrations_refused_total Registrations refused, by reason: sink_down (the event sink refuses events), invalid, peer (not root).
# TYPE mcpwarden_daemon_registrations_refused_total counter
mcpwarden_daemon_registrations_refused_total{reason="invalid"} 4
mcpwarden_daemon_registrations_refused_total{reason="peer"} 6
mcpwarden_daemon_registrations_refused_total{reason="sink_down"} 3
# HELP mcpwarden_daemon_audit_stream 1 for the state of the Landlock audit stream: on, off, unavailable.
# TYPE mcpwarden_daemon_audit_stream gauge
mcpwarden_daemon_audit_stream{state="off"} 0
mcpwarden_daemon_audit_stream{state="on"} 1
mcpwarden_daemon_audit_stream{state="unavailable"} 0
# HELP mcpwarden_daemon_runs_active Registered runs whose processes have not all exited.
# TYPE mcpwarden_daemon_runs_active gauge
mcpwarden_daemon_runs_active 2
# HELP mcpwarden_daemon_sink_refusing 1 while the event sink refuses events (new runs are refused).
# TYPE mcpwarden_daemon_sink_refusing gauge
mcpwarden_daemon_sink_refusing 1
# HELP mcpwarden_daemon_hooks Kernel hooks by state: attached, or unavailable (did not load).
# TYPE mcpwarden_daemon_hooks gauge
mcpwarden_daemon_hooks{state="attached"} 5
mcpwarden_daemon_hooks{state="unavailable"} 2
# HELP mcpwarden_daemon_audit_other_readers Other readers of the kernel's audit log last seen: a registered auditd and other multicast sockets (a stalled one makes the kernel lose records).
# TYPE mcpwarden_daemon_audit_other_readers gauge
mcpwarden_daemon_audit_other_readers 1
`
	c := Daemon(s)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"mcpwarden_daemon_drops_total", "mcpwarden_daemon_registrations_refused_total", "mcpwarden_daemon_audit_stream",
		"mcpwarden_daemon_runs_active", "mcpwarden_daemon_sink_refusing", "mcpwarden_daemon_hooks", "mcpwarden_daemon_audit_other_readers"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c); n != 27 {
		t.Errorf("a ready daemon has %d series, want 27", n)
	}
	lint(t, c)

	// Before the daemon is ready only mcpwarden_daemon_ready is there, at 0:
	// a dashboard must not read zeros as "no drops".
	notReady := Daemon(daemonStats{})
	if err := testutil.CollectAndCompare(notReady, strings.NewReader(`
# HELP mcpwarden_daemon_ready 1 once the probes, the audit stream and the registration socket are up.
# TYPE mcpwarden_daemon_ready gauge
mcpwarden_daemon_ready 0
`)); err != nil {
		t.Fatal(err)
	}
}

type collectorStats collector.Stats

func (s collectorStats) Stats() collector.Stats { return collector.Stats(s) }

func TestCollectorSeries(t *testing.T) {
	at := time.Unix(1_700_000_000, 500_000_000)
	s := collectorStats{
		Messages: 10, Events: 30, Rejected: 2, Inserts: 3, InsertFailures: 4, Findings: 5,
		EventsByKind: map[schema.Kind]uint64{schema.KindFileOp: 20, schema.KindDecision: 10},
		FindingsBy: map[collector.FindingKey]uint64{
			{Type: schema.FindingEscape, Severity: schema.SeverityCritical}:    2,
			{Type: schema.FindingBlockedAttempt, Severity: schema.SeverityLow}: 3,
			// Not in the closed sets: folded into one "other" series.
			{Type: "NEW_TYPE", Severity: "weird"}: 1,
			{Type: "NEWER_TYPE", Severity: "odd"}: 1,
		},
		InsertTime: 1500 * time.Millisecond, LastInsert: at,
		CrossCheckPasses: 7, CrossCheckFailures: 1,
		Consumer:      collector.ConsumerLag{Pending: 40, AckPending: 2, Redelivered: 1, At: at},
		NATSConnected: true,
	}
	want := `
# HELP mcpwarden_collector_events_total Events inserted into ClickHouse, by kind (a redelivered event counts again; ClickHouse collapses it).
# TYPE mcpwarden_collector_events_total counter
mcpwarden_collector_events_total{kind="decision"} 10
mcpwarden_collector_events_total{kind="file_op"} 20
# HELP mcpwarden_collector_findings_total Findings the cross-check inserted, by type and severity.
# TYPE mcpwarden_collector_findings_total counter
mcpwarden_collector_findings_total{severity="critical",type="ESCAPE"} 2
mcpwarden_collector_findings_total{severity="low",type="BLOCKED_ATTEMPT"} 3
mcpwarden_collector_findings_total{severity="other",type="other"} 2
# HELP mcpwarden_collector_consumer_lag_messages Messages in the stream the collectors have not acknowledged yet (not delivered, plus delivered and not acknowledged), as JetStream last reported.
# TYPE mcpwarden_collector_consumer_lag_messages gauge
mcpwarden_collector_consumer_lag_messages 42
# HELP mcpwarden_collector_insert_seconds_total Time spent in successful inserts; divided by inserts_total, the mean insert time.
# TYPE mcpwarden_collector_insert_seconds_total counter
mcpwarden_collector_insert_seconds_total 1.5
# HELP mcpwarden_collector_last_insert_timestamp_seconds When the last insert succeeded (Unix time; 0 before the first).
# TYPE mcpwarden_collector_last_insert_timestamp_seconds gauge
mcpwarden_collector_last_insert_timestamp_seconds 1.7000000005e+09
# HELP mcpwarden_collector_crosscheck_passes_total Cross-check passes over the stored runs, by outcome (ok, failed).
# TYPE mcpwarden_collector_crosscheck_passes_total counter
mcpwarden_collector_crosscheck_passes_total{outcome="failed"} 1
mcpwarden_collector_crosscheck_passes_total{outcome="ok"} 7
# HELP mcpwarden_collector_insert_errors_total ClickHouse insert attempts that failed (retried with backoff, nothing acknowledged).
# TYPE mcpwarden_collector_insert_errors_total counter
mcpwarden_collector_insert_errors_total 4
`
	c := Collector(s)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"mcpwarden_collector_events_total", "mcpwarden_collector_findings_total", "mcpwarden_collector_consumer_lag_messages",
		"mcpwarden_collector_insert_seconds_total", "mcpwarden_collector_last_insert_timestamp_seconds",
		"mcpwarden_collector_crosscheck_passes_total", "mcpwarden_collector_insert_errors_total"); err != nil {
		t.Fatal(err)
	}
	lint(t, c)
}

type publisherStats publish.Stats

func (s publisherStats) Stats() publish.Stats { return publish.Stats(s) }

func TestPublisherSeries(t *testing.T) {
	c := Publisher("daemon", publisherStats{Published: 10, Replayed: 4, Spooled: 5, SpoolBytes: 4096, SpoolDepth: 1, InFlight: 3})
	want := `
# HELP mcpwarden_daemon_publish_messages_total NATS messages by outcome: published (acknowledged live), spooled (written to the disk spool while NATS was away or slow), replayed (spooled, then acknowledged).
# TYPE mcpwarden_daemon_publish_messages_total counter
mcpwarden_daemon_publish_messages_total{outcome="published"} 6
mcpwarden_daemon_publish_messages_total{outcome="replayed"} 4
mcpwarden_daemon_publish_messages_total{outcome="spooled"} 5
# HELP mcpwarden_daemon_spool_bytes Bytes waiting in the disk spool for NATS.
# TYPE mcpwarden_daemon_spool_bytes gauge
mcpwarden_daemon_spool_bytes 4096
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "mcpwarden_daemon_publish_messages_total", "mcpwarden_daemon_spool_bytes"); err != nil {
		t.Fatal(err)
	}
	lint(t, c)
}

type sinkFunc func([]schema.Event) error

func (f sinkFunc) Publish(_ context.Context, evs []schema.Event) error { return f(evs) }

func TestEventCounter(t *testing.T) {
	refuse := false
	c := CountEvents("daemon", sinkFunc(func([]schema.Event) error {
		if refuse {
			return errors.New("spool full")
		}
		return nil
	}))
	o := schema.Origin{Host: "h", BootID: "b"}
	ev := func(k schema.Kind) schema.Event { return o.NewEvent(k, "r", "s", "", time.Now()) }
	finding := func(typ schema.FindingType, sev schema.Severity, st schema.FindingStatus) schema.Event {
		e := ev(schema.KindFinding)
		e.Finding = &schema.Finding{Type: typ, Severity: sev, Status: st}
		return e
	}
	ctx := context.Background()
	if err := c.Publish(ctx, []schema.Event{ev(schema.KindFileOp), ev(schema.KindFileOp), ev("made_up"),
		finding(schema.FindingEscape, schema.SeverityCritical, schema.StatusProvisional),
		finding(schema.FindingEscape, schema.SeverityCritical, ""),
		finding("INVENTED", "dire", "strange")}); err != nil {
		t.Fatal(err)
	}
	refuse = true
	if err := c.Publish(ctx, []schema.Event{ev(schema.KindHealth), finding(schema.FindingProxyGap, schema.SeverityHigh, "")}); err == nil {
		t.Fatal("the sink's error was not passed on")
	}
	want := `
# HELP mcpwarden_daemon_events_total Events handed to NATS (accepted by the publisher, live or spooled), by kind.
# TYPE mcpwarden_daemon_events_total counter
mcpwarden_daemon_events_total{kind="decision"} 0
mcpwarden_daemon_events_total{kind="file_op"} 2
mcpwarden_daemon_events_total{kind="finding"} 3
mcpwarden_daemon_events_total{kind="health"} 0
mcpwarden_daemon_events_total{kind="landlock_denial"} 0
mcpwarden_daemon_events_total{kind="launch"} 0
mcpwarden_daemon_events_total{kind="other"} 1
# HELP mcpwarden_daemon_events_refused_total Events the publisher refused (spool full): they are lost and new runs are refused.
# TYPE mcpwarden_daemon_events_refused_total counter
mcpwarden_daemon_events_refused_total{kind="decision"} 0
mcpwarden_daemon_events_refused_total{kind="file_op"} 0
mcpwarden_daemon_events_refused_total{kind="finding"} 1
mcpwarden_daemon_events_refused_total{kind="health"} 1
mcpwarden_daemon_events_refused_total{kind="landlock_denial"} 0
mcpwarden_daemon_events_refused_total{kind="launch"} 0
mcpwarden_daemon_events_refused_total{kind="other"} 0
# HELP mcpwarden_daemon_findings_total Findings published, by type, severity and status (provisional, final, withdrawn).
# TYPE mcpwarden_daemon_findings_total counter
mcpwarden_daemon_findings_total{severity="critical",status="final",type="ESCAPE"} 1
mcpwarden_daemon_findings_total{severity="critical",status="provisional",type="ESCAPE"} 1
mcpwarden_daemon_findings_total{severity="other",status="other",type="other"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	lint(t, c)
}

// TestServe serves a registry on a free loopback port and reads it back
// over HTTP; only GET /metrics is served.
func TestServe(t *testing.T) {
	reg := NewRegistry("daemon", "v-test")
	reg.MustRegister(Daemon(daemonStats{Ready: true, RunsActive: 3, AuditStream: "off"}))
	srv, err := Listen("127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	base := "http://" + srv.Addr().String()
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("GET", Path)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", Path, code, body)
	}
	for _, want := range []string{
		"mcpwarden_daemon_runs_active 3",
		`mcpwarden_build_info{component="daemon",version="v-test"} 1`,
		`mcpwarden_daemon_audit_stream{state="off"} 1`,
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the scrape lacks %q", want)
		}
	}
	for _, c := range []struct{ method, path string }{{"POST", Path}, {"GET", "/"}, {"GET", "/debug/pprof/"}} {
		if code, _ := get(c.method, c.path); code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d, want 404 or 405", c.method, c.path, code)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + Path); err == nil {
		t.Fatal("the server still answers after its context ended")
	}
	if _, err := Listen(srv.Addr().String(), reg, nil); err != nil {
		t.Fatalf("the port was not released: %v", err)
	}
}

func TestListenRefusesABusyPort(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := Listen("127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Serve(ctx) }()
	if _, err := Listen(a.Addr().String(), reg, nil); err == nil || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Fatalf("a second listener on a busy port: %v", err)
	}
}

// lint checks the series against Prometheus' naming conventions.
func lint(t *testing.T, c prometheus.Collector) {
	t.Helper()
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}
