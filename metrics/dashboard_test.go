package metrics

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/collector"
	"github.com/mcpwarden/mcpwarden/daemon/probes"
	"github.com/mcpwarden/mcpwarden/deploy/grafana"
	"github.com/mcpwarden/mcpwarden/internal/promtest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestDashboardQueries runs every Prometheus expression of the Grafana
// dashboard (deploy/grafana) on Debian's Prometheus scraping a daemon's and
// a collector's series, served the way the commands serve them: each
// parses, and returns at least one series, so no panel names a series or
// label the programs do not export.
func TestDashboardQueries(t *testing.T) {
	d, err := grafana.Load(filepath.Join(testenv.RepoRoot(), "deploy", "grafana"))
	if err != nil {
		t.Fatal(err)
	}
	qs := d.Queries(grafana.PrometheusUID)
	if len(qs) < 10 {
		t.Fatalf("the dashboard has %d Prometheus queries", len(qs))
	}

	dreg := NewRegistry("daemon", "v-test")
	counted := CountEvents("daemon", sinkFunc(func([]schema.Event) error { return nil }))
	dreg.MustRegister(
		Daemon(daemonStats{Ready: true, RunsActive: 1, RunsRegistered: 2, Probes: probes.Counters{Events: 12, RingDrops: 3}, AuditStream: "on", LandlockABI: 7, Hooks: 5, Unavailable: 2}),
		Publisher("daemon", publisherStats{Published: 3, SpoolBytes: 512, SpoolDepth: 1}),
		counted)
	creg := NewRegistry("collector", "v-test")
	creg.MustRegister(Collector(collectorStats{
		Messages: 4, Events: 4, Inserts: 2, InsertFailures: 1, InsertTime: time.Second, LastInsert: time.Now(),
		EventsByKind: map[schema.Kind]uint64{schema.KindFileOp: 3, schema.KindFinding: 1},
		Findings:     1, FindingsBy: map[collector.FindingKey]uint64{{Type: schema.FindingEscape, Severity: schema.SeverityHigh}: 1},
		Consumer: collector.ConsumerLag{Pending: 2, AckPending: 1, At: time.Now()}, NATSConnected: true,
	}))
	p := scrapeDaemonAndCollector(t, dreg, creg, counted)
	// Generous: the machine may be loaded; rate() needs two scrapes in its
	// window (promtest scrapes every 500 ms).
	const wait = 2 * time.Minute
	p.WaitFor(t, `count(up{job=~"daemon|collector"} == 1) == 2`, promtest.Any, wait)
	for _, q := range qs {
		expr := grafana.PromQL(q.Expr, "1m")
		t.Run(q.Panel+"/"+q.RefID, func(t *testing.T) {
			if !strings.Contains(expr, "mcpwarden_") {
				t.Fatalf("%s reads no mcpwarden series", expr)
			}
			p.WaitFor(t, expr, promtest.Any, wait)
		})
	}
}
