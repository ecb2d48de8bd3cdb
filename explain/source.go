package explain

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// StreamSource reads a run's events from the JetStream stream, the host's
// own record of the last 7 days (what the single host without ClickHouse
// has): every message of Host's subjects since Since, kept when its
// envelope names the run.
type StreamSource struct {
	JS    jetstream.JetStream
	Host  string
	Since time.Duration // how far back to read; default the stream's 7 days
}

// Name names the source in the report.
func (s *StreamSource) Name() string { return "the stream " + stream.Name + " (host " + s.Host + ")" }

// RunEvents reads the host's subjects to the stream's end.
func (s *StreamSource) RunEvents(ctx context.Context, runID string) ([]schema.Event, error) {
	since := s.Since
	if since <= 0 {
		since = 7 * 24 * time.Hour
	}
	from := time.Now().Add(-since)
	// A run's envelope carries its id: "run_id":"<id>" in a v2 batch's
	// first line, or in each line of a v1 batch.
	needle := []byte(`"run_id":"` + runID + `"`)
	var out []schema.Event
	// To the stream's end as the server counts it: a stall (the server or
	// this process stopped, a loaded host) is waited out or named. Before,
	// two seconds without a message were taken for the end, and a report
	// could lack the events that make its verdict.
	err := stream.ReadToEnd(ctx, s.JS, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{stream.SubjectPrefix + "." + stream.HostToken(s.Host) + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &from,
	}, func(msg jetstream.Msg) error {
		if bytes.Contains(msg.Data(), needle) {
			evs, _, err := stream.DecodeBatch(msg.Subject(), msg.Data())
			if err == nil {
				for _, e := range evs {
					if e.RunID == runID {
						out = append(out, e)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("why: %w (is 'mcpwarden daemon' running?)", err)
	}
	return out, nil
}

// StoreSource reads a run's events from ClickHouse (a run older than the
// stream keeps, or one from another host of a fleet sharing the key).
type StoreSource struct {
	Store *store.Store
	// Host, when set, reads the run's events of that host only.
	Host string
}

// Name names the source in the report.
func (s *StoreSource) Name() string { return "ClickHouse database " + s.Store.Database() }

// RunEvents finds the run's host and reads its events by the primary key.
// A run has one host: a run id that events of several hosts carry (another
// host reused it, or forged events under it in its own name) is refused
// (store.RunHost) unless Host names one.
func (s *StoreSource) RunEvents(ctx context.Context, runID string) ([]schema.Event, error) {
	host := s.Host
	if host == "" {
		var err error
		if host, err = s.Store.RunHost(ctx, runID); err != nil || host == "" {
			return nil, err
		}
	}
	return s.Store.ReadRun(ctx, store.RunRef{Host: host, RunID: runID}, 1_000_000)
}
