package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/store"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// ErrNotStored is wrapped by Simulate's error when ClickHouse does not hold
// exactly what the hosts produced.
var ErrNotStored = errors.New("not every produced event is stored exactly once")

// Options are the load generator command's (`mcpwarden-loadgen`).
type Options struct {
	// NATSURL is the NATS server (or cluster list) the hosts publish to;
	// SeedDir holds each host's nkey seed (SeedFile), which CreateSeeds
	// creates when missing.
	NATSURL, SeedDir string
	CreateSeeds      bool
	// Hosts simulated hosts named HostPrefix-0001...
	Hosts      int
	HostPrefix string
	Duration   time.Duration
	Runs       int
	Rate       float64
	Mix        Mix
	// MaxInFlight bounds each host's unacknowledged messages.
	MaxInFlight int
	// SpoolDir holds the hosts' spools; "" means a temporary directory,
	// removed at the end.
	SpoolDir string
	// ClickHouseDSN, when set, is read back: Simulate waits up to Wait for
	// every produced event, checks them run by run and measures the lag.
	ClickHouseDSN string
	Wait          time.Duration
	JSON          bool
	Logger        *slog.Logger
}

// Summary is what Simulate prints.
type Summary struct {
	Hosts    int               `json:"hosts"`
	Runs     int               `json:"runs"`
	Produced uint64            `json:"produced"`
	ByKind   map[string]uint64 `json:"produced_by_kind"`
	Refused  uint64            `json:"refused"`
	Spooled  uint64            `json:"spooled_messages"`
	Seconds  float64           `json:"generation_seconds"`
	Offered  float64           `json:"offered_events_per_second"`
	Stored   *StoredSummary    `json:"stored,omitempty"`
	// PublicKey is every host's nkey public key (for the server's users).
	PublicKey map[string]string `json:"-"`
	check     *Check
}

// StoredSummary is what was read back from ClickHouse.
type StoredSummary struct {
	Distinct    uint64  `json:"distinct"`
	Rows        uint64  `json:"rows"`
	Lost        int64   `json:"lost"`
	MissingRuns int     `json:"runs_short"`
	ExtraRuns   int     `json:"runs_extra"`
	DrainSec    float64 `json:"drain_seconds"`
	Sustained   float64 `json:"stored_events_per_second"`
	LagP50MS    float64 `json:"lag_p50_ms"`
	LagP99MS    float64 `json:"lag_p99_ms"`
	LagMaxMS    float64 `json:"lag_max_ms"`
	LagResMS    float64 `json:"lag_resolution_ms"`
	OK          bool    `json:"ok"`
}

// Simulate runs the load generator command: the hosts publish, and when a
// DSN is given the store is checked. It prints a summary to w.
func Simulate(ctx context.Context, o Options, w io.Writer) (*Summary, error) {
	if o.NATSURL == "" {
		return nil, errors.New("loadgen: give --nats URL")
	}
	names, pubs, err := o.seeds()
	if err != nil {
		return nil, err
	}
	spool := o.SpoolDir
	if spool == "" {
		if spool, err = os.MkdirTemp("", "mcpwarden-loadgen-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(spool)
	}
	rep, err := Run(ctx, Config{Hosts: Hosts(o.NATSURL, o.SeedDir, names), Duration: o.Duration, RunsPerHost: o.Runs,
		Rate: o.Rate, Mix: o.Mix, MaxInFlight: o.MaxInFlight, SpoolDir: spool, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	s := &Summary{Hosts: o.Hosts, Runs: rep.Runs, Produced: rep.Events, ByKind: map[string]uint64{}, Refused: rep.Refused,
		Spooled: rep.Spooled, Seconds: rep.Elapsed().Seconds(), PublicKey: pubs}
	for k, n := range rep.ByKind {
		s.ByKind[string(k)] = n
	}
	if s.Seconds > 0 {
		s.Offered = float64(rep.Events) / s.Seconds
	}
	if o.ClickHouseDSN != "" {
		st, err := store.Open(ctx, o.ClickHouseDSN, false, o.Logger)
		if err != nil {
			return nil, err
		}
		defer st.Close()
		if s.Stored, s.check, err = readBack(ctx, st, rep, o.Wait); err != nil {
			return nil, err
		}
	}
	if err := s.write(w, o.JSON); err != nil {
		return nil, err
	}
	if s.Stored != nil && !s.Stored.OK {
		return s, fmt.Errorf("%w: %s", ErrNotStored, s.check)
	}
	return s, nil
}

// readBack waits (up to wait) until rep is stored, checks it and reads the
// lag.
func readBack(ctx context.Context, st *store.Store, rep *Report, wait time.Duration) (*StoredSummary, *Check, error) {
	if wait <= 0 {
		wait = 10 * time.Minute
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	c, err := WaitStored(wctx, st, rep, 2*time.Second)
	if err != nil {
		return nil, nil, err
	}
	lag, err := Lag(ctx, st, rep)
	if err != nil {
		return nil, nil, err
	}
	ss := &StoredSummary{Distinct: c.Distinct, Rows: c.Rows, Lost: c.Lost(), MissingRuns: c.MissingRuns, ExtraRuns: c.ExtraRuns,
		LagP50MS: ms(lag.P50), LagP99MS: ms(lag.P99), LagMaxMS: ms(lag.Max), LagResMS: ms(lag.Resolution), OK: c.OK()}
	if d := lag.Last.Sub(rep.End); d > 0 {
		ss.DrainSec = d.Seconds()
	}
	if span := lag.Last.Sub(rep.Start).Seconds(); span > 0 {
		ss.Sustained = float64(c.Distinct) / span
	}
	return ss, c, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (s *Summary) write(w io.Writer, asJSON bool) error {
	if asJSON {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(s)
	}
	_, err := fmt.Fprintf(w, "hosts %d, runs %d, produced %d events in %.1f s (%.0f events/s offered), refused %d, spooled messages %d\nby kind: %v\n",
		s.Hosts, s.Runs, s.Produced, s.Seconds, s.Offered, s.Refused, s.Spooled, s.ByKind)
	if err != nil || s.Stored == nil {
		return err
	}
	st := s.Stored
	verdict := "OK: produced == stored, each once"
	if !st.OK {
		verdict = "NOT OK: " + s.check.String()
	}
	_, err = fmt.Fprintf(w, "stored %d distinct in %d rows (lost %d; runs short %d, extra %d); %.0f events/s from the first publish to the last insert, drained %.1f s after the last publish\nlag publish -> stored: p50 %.0f ms, p99 %.0f ms, max %.0f ms (resolution %.0f ms)\n%s\n",
		st.Distinct, st.Rows, st.Lost, st.MissingRuns, st.ExtraRuns, st.Sustained, st.DrainSec, st.LagP50MS, st.LagP99MS, st.LagMaxMS, st.LagResMS, verdict)
	return err
}

// seeds names the hosts and reads (or, with CreateSeeds, makes) their
// seeds.
func (o Options) seeds() ([]string, map[string]string, error) {
	if o.SeedDir == "" {
		return nil, nil, errors.New("loadgen: give --seeds DIR (one nkey seed per host; --create-seeds makes them)")
	}
	if o.Hosts <= 0 || o.Hosts > 100_000 {
		return nil, nil, fmt.Errorf("loadgen: --hosts %d: give 1 to 100000", o.Hosts)
	}
	names := HostNames(o.HostPrefix, o.Hosts)
	for _, h := range names {
		if !schema.IsToken(h) || stream.HostToken(h) != h {
			return nil, nil, fmt.Errorf("loadgen: host name %q: use a prefix of letters, digits, - and _", h)
		}
		if _, err := os.Stat(SeedFile(o.SeedDir, h)); err != nil && !o.CreateSeeds {
			return nil, nil, fmt.Errorf("loadgen: host %s has no seed (%w); pass --create-seeds to make the missing ones, and give the NATS server their users (--users-conf)", h, err)
		}
	}
	pubs, err := HostSeeds(o.SeedDir, names)
	if err != nil {
		return nil, nil, err
	}
	return names, pubs, nil
}

// UsersConf is the nats-server configuration of the hosts' users: one
// nkey user per host with exactly stream.HostPermissions of its own host
// (no stream management), to paste into the account's users list
// (deploy/nats/nats-server.conf).
func UsersConf(pubs map[string]string) string {
	names := make([]string, 0, len(pubs))
	for h := range pubs {
		names = append(names, h)
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, "# %d simulated hosts of mcpwarden-loadgen: nkey users, each publishing under its own host token only.\n", len(names))
	for _, h := range names {
		p := stream.HostPermissions(h, false)
		fmt.Fprintf(&b, "{ nkey: %s, permissions: { publish: { allow: %s }, subscribe: { allow: %s } } }\n",
			pubs[h], confList(p.PublishAllow), confList(p.SubscribeAllow))
	}
	return b.String()
}

// confList is xs as a nats-server configuration list of quoted strings.
func confList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return "[ " + strings.Join(q, ", ") + " ]"
}

// WriteUsersConf writes UsersConf of o's hosts to file (0600: it names
// every simulated host's key).
func WriteUsersConf(file string, o Options) error {
	_, pubs, err := o.seeds()
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, []byte(UsersConf(pubs)), 0o600); err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	return nil
}
