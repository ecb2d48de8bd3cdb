package loadgen

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mcpwarden/mcpwarden/collector/store"
)

// Check is what ClickHouse holds of a report's hosts, compared run by run.
type Check struct {
	// Produced is the report's total; Rows the stored rows of its hosts
	// (duplicates not yet merged away count), Distinct their distinct
	// event ids.
	Produced, Rows, Distinct uint64
	// Missing lists runs with fewer distinct events stored than produced,
	// Extra runs with more (or runs nobody produced); at most 20 of each.
	Missing, Extra []string
	// MissingRuns and ExtraRuns count them all.
	MissingRuns, ExtraRuns int
}

// OK reports whether every run is stored exactly: no run short, none
// extra, no duplicate row.
func (c *Check) OK() bool {
	return c.MissingRuns == 0 && c.ExtraRuns == 0 && c.Distinct == c.Produced && c.Rows == c.Distinct
}

// Lost is produced − distinct stored (0 when nothing is lost).
func (c *Check) Lost() int64 { return int64(c.Produced) - int64(c.Distinct) }

func (c *Check) String() string {
	s := fmt.Sprintf("produced %d, stored %d distinct in %d rows", c.Produced, c.Distinct, c.Rows)
	if c.MissingRuns > 0 {
		s += fmt.Sprintf("; %d runs short (%s)", c.MissingRuns, strings.Join(c.Missing, ", "))
	}
	if c.ExtraRuns > 0 {
		s += fmt.Sprintf("; %d runs with more than produced (%s)", c.ExtraRuns, strings.Join(c.Extra, ", "))
	}
	return s
}

// hostFilter is the WHERE clause naming the report's hosts and its
// parameters.
func hostFilter(r *Report) (string, store.Params) {
	hosts := r.Hosts()
	slices.Sort(hosts)
	var b strings.Builder
	p := store.Params{}
	b.WriteString("host IN (")
	for i, h := range hosts {
		if i > 0 {
			b.WriteString(", ")
		}
		name := "host_" + letters(i) // placeholder names are [a-z_]+
		fmt.Fprintf(&b, "{%s:String}", name)
		p[name] = h
	}
	b.WriteString(")")
	return b.String(), p
}

// CheckStored compares what st holds of r's hosts with what r says they
// produced, run by run.
func CheckStored(ctx context.Context, st *store.Store, r *Report) (*Check, error) {
	c := &Check{Produced: r.Events}
	if len(r.Produced) == 0 {
		return c, nil
	}
	where, p := hostFilter(r)
	rows, err := st.Query(ctx, "SELECT host, run_id, count(), uniqExact(event_id) FROM events WHERE "+where+" GROUP BY host, run_id", p)
	if err != nil {
		return nil, fmt.Errorf("loadgen: read stored counts: %w", err)
	}
	defer rows.Close()
	seen := map[RunKey]bool{}
	for rows.Next() {
		var k RunKey
		var n, d uint64
		if err := rows.Scan(&k.Host, &k.Run, &n, &d); err != nil {
			return nil, fmt.Errorf("loadgen: read stored counts: %w", err)
		}
		seen[k] = true
		c.Rows += n
		c.Distinct += d
		want := r.Produced[k]
		switch {
		case d < want:
			c.short(k, d, want)
		case d > want:
			c.ExtraRuns++
			if len(c.Extra) < 20 {
				c.Extra = append(c.Extra, fmt.Sprintf("%s/%s: %d of %d", k.Host, k.Run, d, want))
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loadgen: read stored counts: %w", err)
	}
	for k, want := range r.Produced {
		if !seen[k] {
			c.short(k, 0, want)
		}
	}
	return c, nil
}

func (c *Check) short(k RunKey, got, want uint64) {
	c.MissingRuns++
	if len(c.Missing) < 20 {
		c.Missing = append(c.Missing, fmt.Sprintf("%s/%s: %d of %d", k.Host, k.Run, got, want))
	}
}

// WaitStored polls st (every poll) until every produced event of r is
// stored or ctx ends, and returns the last check (a failing read ends
// the wait with its error). Duplicates do not end the wait early: it
// waits for the distinct count.
func WaitStored(ctx context.Context, st *store.Store, r *Report, poll time.Duration) (*Check, error) {
	for {
		c, err := CheckStored(ctx, st, r)
		if err != nil {
			return nil, err
		}
		if c.Distinct >= c.Produced && c.MissingRuns == 0 {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return c, nil
		case <-time.After(poll):
		}
	}
}

// LagStats is the collector lag of stored events: from the instant the
// simulated host stamped the event and handed it to its publisher
// (schema.Event.TimeNS; the host publishes it at once) to the instant
// ClickHouse stored its row (the inserted_at default, the server's clock
// at insert; milliseconds on the current layout, whole seconds on the
// legacy one). Both clocks are this machine's.
type LagStats struct {
	P50, P99, Max time.Duration
	// Resolution is inserted_at's: 1 ms (current layout) or 1 s (legacy).
	Resolution time.Duration
	// First and Last are the first and last insert of the hosts' rows.
	First, Last time.Time
}

// Lag measures LagStats over the rows of r's hosts.
func Lag(ctx context.Context, st *store.Store, r *Report) (*LagStats, error) {
	where, p := hostFilter(r)
	ins, res := "toUnixTimestamp64Milli(inserted_at)", time.Millisecond
	if st.Layout() == store.LayoutLegacy {
		ins, res = "toUInt64(inserted_at) * 1000", time.Second
	}
	lag := "toInt64(" + ins + ") - intDiv(time_ns, 1000000)"
	var q []float64
	var maxMS, first, last int64
	err := st.QueryRow(ctx, "SELECT quantilesExact(0.5, 0.99)(toFloat64("+lag+")), toInt64(max("+lag+")), toInt64(min("+ins+")), toInt64(max("+ins+")) FROM events WHERE "+where, p,
		&q, &maxMS, &first, &last)
	if err != nil {
		return nil, fmt.Errorf("loadgen: read the lag: %w", err)
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	l := &LagStats{Max: time.Duration(maxMS) * time.Millisecond, Resolution: res, First: time.UnixMilli(first), Last: time.UnixMilli(last)}
	if len(q) == 2 {
		l.P50, l.P99 = ms(q[0]), ms(q[1])
	}
	return l, nil
}

// letters spells i in bijective base 26 (a, b, ..., z, aa, ab, ...).
func letters(i int) string {
	var b []byte
	for i++; i > 0; i = (i - 1) / 26 {
		b = append([]byte{byte('a' + (i-1)%26)}, b...)
	}
	return string(b)
}
