package metrics

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/publish"
)

// PublisherSource is what a publisher's series are read from
// (*publish.Publisher).
type PublisherSource interface {
	Stats() publish.Stats
}

type publisherCollector struct {
	src                                    PublisherSource
	messages, spoolBytes, spoolMsgs, inFly *prometheus.Desc
}

// Publisher returns the collector of a publisher's series
// (mcpwarden_SUBSYSTEM_publish_messages_total, _spool_bytes, ...).
func Publisher(subsystem string, src PublisherSource) prometheus.Collector {
	return &publisherCollector{
		src:        src,
		messages:   desc(subsystem, "publish_messages_total", "NATS messages by outcome: published (acknowledged live), spooled (written to the disk spool while NATS was away or slow), replayed (spooled, then acknowledged).", "outcome"),
		spoolBytes: desc(subsystem, "spool_bytes", "Bytes waiting in the disk spool for NATS."),
		spoolMsgs:  desc(subsystem, "spool_messages", "Messages waiting in the disk spool for NATS."),
		inFly:      desc(subsystem, "publish_in_flight", "Messages sent to NATS and not yet acknowledged."),
	}
}

func (c *publisherCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.messages
	ch <- c.spoolBytes
	ch <- c.spoolMsgs
	ch <- c.inFly
}

func (c *publisherCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	// Published counts live and replayed acknowledgements together.
	live := s.Published - min(s.Published, s.Replayed)
	ch <- counter(c.messages, live, "published")
	ch <- counter(c.messages, s.Spooled, "spooled")
	ch <- counter(c.messages, s.Replayed, "replayed")
	ch <- gauge(c.spoolBytes, float64(s.SpoolBytes))
	ch <- gauge(c.spoolMsgs, float64(s.SpoolDepth))
	ch <- gauge(c.inFly, float64(s.InFlight))
}

// Sink is an event sink (transport/publish.Publisher is one).
type Sink interface {
	Publish(ctx context.Context, events []schema.Event) error
}

// EventCounter is a Sink that counts what passes through it, by kind, and
// the findings by type, severity and status; it is also the collector of
// those series. Put it in front of the sink a component publishes to.
type EventCounter struct {
	next Sink

	accepted, refused [len(kinds)]atomic.Uint64

	mu       sync.Mutex
	findings map[findingLabels]uint64

	events, refusedDesc, findingsDesc *prometheus.Desc
}

type findingLabels struct{ typ, severity, status string }

// kinds numbers the event kinds; an unknown kind is counted as "other".
var kinds = [...]schema.Kind{schema.KindLaunch, schema.KindDecision, schema.KindFileOp, schema.KindLandlockDenial, schema.KindFinding, schema.KindHealth, "other"}

func kindIndex(k schema.Kind) int {
	for i, kk := range kinds[:len(kinds)-1] {
		if k == kk {
			return i
		}
	}
	return len(kinds) - 1
}

// CountEvents wraps next; the series are mcpwarden_SUBSYSTEM_events_total,
// _events_refused_total and _findings_total.
func CountEvents(subsystem string, next Sink) *EventCounter {
	return &EventCounter{
		next:         next,
		findings:     map[findingLabels]uint64{},
		events:       desc(subsystem, "events_total", "Events handed to NATS (accepted by the publisher, live or spooled), by kind.", "kind"),
		refusedDesc:  desc(subsystem, "events_refused_total", "Events the publisher refused (spool full): they are lost and new runs are refused.", "kind"),
		findingsDesc: desc(subsystem, "findings_total", "Findings published, by type, severity and status (provisional, final, withdrawn).", "type", "severity", "status"),
	}
}

// Publish passes events on and counts them.
func (c *EventCounter) Publish(ctx context.Context, events []schema.Event) error {
	err := c.next.Publish(ctx, events)
	var n [len(kinds)]uint64
	for i := range events {
		n[kindIndex(events[i].Kind)]++
	}
	to := &c.accepted
	if err != nil {
		to = &c.refused
	}
	for i, v := range n {
		if v > 0 {
			to[i].Add(v)
		}
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range events {
		f := events[i].Finding
		if f == nil {
			continue
		}
		c.findings[findingLabels{known(string(f.Type), findingTypes), known(string(f.Severity), severities), status(f.Status)}]++
	}
	return nil
}

var (
	findingTypes = func() []string {
		out := make([]string, len(schema.FindingTypes))
		for i, t := range schema.FindingTypes {
			out[i] = string(t)
		}
		return out
	}()
	severities = func() []string {
		out := make([]string, len(schema.Severities))
		for i, s := range schema.Severities {
			out[i] = string(s)
		}
		return out
	}()
)

// known keeps a label value inside its closed set.
func known(v string, set []string) string {
	for _, s := range set {
		if v == s {
			return v
		}
	}
	return "other"
}

func status(s schema.FindingStatus) string {
	switch s {
	case schema.StatusFinal:
		return "final"
	case schema.StatusProvisional, schema.StatusWithdrawn:
		return string(s)
	}
	return "other"
}

// Describe implements prometheus.Collector.
func (c *EventCounter) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.refusedDesc
	ch <- c.findingsDesc
}

// Collect implements prometheus.Collector. Every kind is reported, with 0
// when none passed, so a rate over it exists from the first scrape.
func (c *EventCounter) Collect(ch chan<- prometheus.Metric) {
	for i, k := range kinds {
		ch <- counter(c.events, c.accepted[i].Load(), string(k))
		ch <- counter(c.refusedDesc, c.refused[i].Load(), string(k))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for l, v := range c.findings {
		ch <- counter(c.findingsDesc, v, l.typ, l.severity, l.status)
	}
}
