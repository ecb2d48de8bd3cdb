package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpwarden/mcpwarden/collector"
)

// CollectorSource is what the collector's series are read from
// (*collector.Collector).
type CollectorSource interface {
	Stats() collector.Stats
}

type collectorCollector struct {
	src CollectorSource

	messages, events, rejected, inserts, insertErrors, insertSeconds, lastInsert *prometheus.Desc
	findings, xcheck, lag, ackPending, redelivered, lagAt, natsConnected         *prometheus.Desc
}

// Collector returns the collector of mcpwarden_collector_* series.
func Collector(src CollectorSource) prometheus.Collector {
	const sub = "collector"
	return &collectorCollector{
		src:           src,
		messages:      desc(sub, "messages_total", "NATS messages fetched from the shared consumer."),
		events:        desc(sub, "events_total", "Events inserted into ClickHouse, by kind (a redelivered event counts again; ClickHouse collapses it).", "kind"),
		rejected:      desc(sub, "events_rejected_total", "Events rejected: invalid, outside their host's subject, or in a message that did not decode."),
		inserts:       desc(sub, "inserts_total", "ClickHouse inserts that succeeded (one block each)."),
		insertErrors:  desc(sub, "insert_errors_total", "ClickHouse insert attempts that failed (retried with backoff, nothing acknowledged)."),
		insertSeconds: desc(sub, "insert_seconds_total", "Time spent in successful inserts; divided by inserts_total, the mean insert time."),
		lastInsert:    desc(sub, "last_insert_timestamp_seconds", "When the last insert succeeded (Unix time; 0 before the first)."),
		findings:      desc(sub, "findings_total", "Findings the cross-check inserted, by type and severity.", "type", "severity"),
		xcheck:        desc(sub, "crosscheck_passes_total", "Cross-check passes over the stored runs, by outcome (ok, failed).", "outcome"),
		lag:           desc(sub, "consumer_lag_messages", "Messages in the stream the collectors have not acknowledged yet (not delivered, plus delivered and not acknowledged), as JetStream last reported."),
		ackPending:    desc(sub, "consumer_ack_pending_messages", "Messages delivered to a collector and not yet acknowledged."),
		redelivered:   desc(sub, "consumer_redelivered_messages", "Messages delivered more than once and not yet acknowledged."),
		lagAt:         desc(sub, "consumer_info_timestamp_seconds", "When JetStream last reported the consumer's lag (Unix time; 0 before the first report)."),
		natsConnected: desc(sub, "nats_connected", "1 while the connection to NATS is up."),
	}
}

func (c *collectorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.messages, c.events, c.rejected, c.inserts, c.insertErrors, c.insertSeconds, c.lastInsert,
		c.findings, c.xcheck, c.lag, c.ackPending, c.redelivered, c.lagAt, c.natsConnected} {
		ch <- d
	}
}

func (c *collectorCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	ch <- counter(c.messages, s.Messages)
	for k, n := range s.EventsByKind {
		ch <- counter(c.events, n, string(k))
	}
	ch <- counter(c.rejected, s.Rejected)
	ch <- counter(c.inserts, s.Inserts)
	ch <- counter(c.insertErrors, s.InsertFailures)
	ch <- prometheus.MustNewConstMetric(c.insertSeconds, prometheus.CounterValue, s.InsertTime.Seconds())
	last := 0.0
	if !s.LastInsert.IsZero() {
		last = float64(s.LastInsert.UnixNano()) / 1e9
	}
	ch <- gauge(c.lastInsert, last)
	byLabels := map[[2]string]uint64{}
	for k, n := range s.FindingsBy {
		byLabels[[2]string{known(string(k.Type), findingTypes), known(string(k.Severity), severities)}] += n
	}
	for l, n := range byLabels {
		ch <- counter(c.findings, n, l[0], l[1])
	}
	ch <- counter(c.xcheck, s.CrossCheckPasses, "ok")
	ch <- counter(c.xcheck, s.CrossCheckFailures, "failed")
	ch <- gauge(c.lag, float64(s.Consumer.Pending+s.Consumer.AckPending))
	ch <- gauge(c.ackPending, float64(s.Consumer.AckPending))
	ch <- gauge(c.redelivered, float64(s.Consumer.Redelivered))
	at := 0.0
	if !s.Consumer.At.IsZero() {
		at = float64(s.Consumer.At.UnixNano()) / 1e9
	}
	ch <- gauge(c.lagAt, at)
	ch <- gauge(c.natsConnected, boolValue(s.NATSConnected))
}
