package metrics

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector"
	"github.com/mcpwarden/mcpwarden/daemon"
	"github.com/mcpwarden/mcpwarden/daemon/probes"
	"github.com/mcpwarden/mcpwarden/internal/promtest"
	"github.com/mcpwarden/mcpwarden/schema"
)

type liveDaemon struct{ runs atomic.Int64 }

func (l *liveDaemon) Stats() daemon.Stats {
	return daemon.Stats{Ready: true, RunsActive: int(l.runs.Load()), AuditStream: "on", LandlockABI: 7,
		Probes: probes.Counters{Events: 12, RingDrops: 3}}
}

// TestPrometheusScrapes serves a daemon's and a collector's series the way
// the commands do and lets Debian's Prometheus scrape them: every family
// parses, is stored under its name and labels, and follows the values.
func TestPrometheusScrapes(t *testing.T) {
	d := &liveDaemon{}
	d.runs.Store(1)
	dreg := NewRegistry("daemon", "v-test")
	counted := CountEvents("daemon", sinkFunc(func([]schema.Event) error { return nil }))
	dreg.MustRegister(Daemon(d), counted)
	creg := NewRegistry("collector", "v-test")
	creg.MustRegister(Collector(collectorStats{
		Events: 5, EventsByKind: map[schema.Kind]uint64{schema.KindFileOp: 5},
		Consumer: collector.ConsumerLag{Pending: 9, AckPending: 1, At: time.Now()}, NATSConnected: true,
	}))
	p := scrapeDaemonAndCollector(t, dreg, creg, counted)
	const wait = 60 * time.Second
	p.WaitFor(t, `count(up{job=~"daemon|collector"} == 1) == 2`, promtest.Any, wait)
	for expr, want := range map[string]float64{
		`mcpwarden_daemon_runs_active`:                                         1,
		`mcpwarden_daemon_drops_total{stage="bpf_ring_full"}`:                  3,
		`mcpwarden_daemon_kernel_records_total`:                                12,
		`mcpwarden_daemon_audit_stream{state="on"}`:                            1,
		`mcpwarden_daemon_findings_total{type="ESCAPE",status="provisional"}`:  1,
		`mcpwarden_daemon_events_total{kind="finding"}`:                        1,
		`mcpwarden_build_info{component="collector",version="v-test"}`:         1,
		`mcpwarden_collector_events_total{kind="file_op"}`:                     5,
		`mcpwarden_collector_consumer_lag_messages`:                            10,
		`mcpwarden_collector_nats_connected`:                                   1,
		`sum(mcpwarden_daemon_registrations_refused_total)`:                    0,
		`count(count by (stage) (mcpwarden_daemon_drops_total{job="daemon"}))`: 8,
		`count(count by (kind) (mcpwarden_daemon_events_total))`:               7,
		`count(go_goroutines{job=~"daemon|collector"})`:                        2,
		`count(process_resident_memory_bytes{job=~"daemon|collector"})`:        2,
	} {
		got := p.WaitFor(t, expr, promtest.Any, wait)
		if len(got) != 1 || got[0].Value != want {
			t.Errorf("%s = %v, want one sample of %v", expr, got, want)
		}
	}
	// The next scrapes follow the daemon's state.
	d.runs.Store(4)
	p.WaitFor(t, `mcpwarden_daemon_runs_active == 4`, promtest.Any, wait)
}
