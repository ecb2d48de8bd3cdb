package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpwarden/mcpwarden/internal/promtest"
	"github.com/mcpwarden/mcpwarden/schema"
)

// scrapeDaemonAndCollector serves the daemon's and the collector's
// registries on loopback for the rest of the test, publishes one
// provisional ESCAPE finding through counted (so the per-type series
// exist), and starts Debian's Prometheus scraping both as jobs "daemon"
// and "collector".
func scrapeDaemonAndCollector(t *testing.T, dreg, creg *prometheus.Registry, counted *EventCounter) *promtest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var addrs []string
	for _, reg := range []*prometheus.Registry{dreg, creg} {
		srv, err := Listen("127.0.0.1:0", reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ctx) }()
		addrs = append(addrs, srv.Addr().String())
	}
	ev := schema.Origin{Host: "h", BootID: "b"}.NewEvent(schema.KindFinding, "r", "s", "", time.Now())
	ev.Finding = &schema.Finding{Type: schema.FindingEscape, Severity: schema.SeverityHigh, Status: schema.StatusProvisional}
	if err := counted.Publish(ctx, []schema.Event{ev}); err != nil {
		t.Fatal(err)
	}
	return promtest.Start(t, promtest.Target{Job: "daemon", Addrs: addrs[:1]}, promtest.Target{Job: "collector", Addrs: addrs[1:]})
}
