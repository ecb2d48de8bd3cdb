package proxy

import (
	"sort"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Refused server requests. Each request a server sends that the proxy
// refuses (a method it does not pass, a capability the client did not
// declare, a relay over maxRelayed, an embedded URI outside the scope)
// is a decision record; a server can send them as fast as it can write,
// so one record each would let it grow the audit log without bound. The
// first refusalBurst refusals of a refusalWindow are recorded one by one;
// the rest of that window are counted per method and error code and
// written as one summary record each when the window ends (or the run
// stops): a copy of the first refusal it counts, with retry_count the
// number of refusals it stands for (≥1; 0 in every other record) and
// start_ns/end_ns its first and last. At most maxFoldedKeys (method, code)
// pairs are counted per window; further methods are counted under method
// "other". A flood therefore leaves at most refusalBurst+maxFoldedKeys+1
// records per window on disk, and every refusal is counted.

const (
	refusalWindow = time.Minute
	refusalBurst  = 32
	maxFoldedKeys = 16
)

type refusalKey struct{ method, code string }

type refusalLimiter struct {
	mu      sync.Mutex
	start   time.Time // the window's start; zero: no window open
	written int       // refusals recorded one by one in this window
	folded  map[refusalKey]*schema.Decision
	timer   *time.Timer // ends the window (flushes folded)
	closed  bool        // the run ended: nothing more is folded
	dropped bool        // a refusal after the end was not recorded (logged once)
}

// recordServerRefusal records (or counts) one refused server request.
func (s *session) recordServerRefusal(d schema.Decision) {
	l := &s.refusals
	now := time.Now()
	l.mu.Lock()
	if l.start.IsZero() || now.Sub(l.start) >= refusalWindow {
		done := l.takeLocked()
		l.start, l.written = now, 0
		l.mu.Unlock()
		s.writeSummaries(done)
		l.mu.Lock()
	}
	if l.written < refusalBurst {
		l.written++
		l.mu.Unlock()
		s.rec.add(d)
		return
	}
	if l.closed {
		first := !l.dropped
		l.dropped = true
		l.mu.Unlock()
		if first {
			s.log.Warn("refused server requests after the run ended are no longer recorded")
		}
		return
	}
	key := refusalKey{d.Method, d.ErrorCode}
	sum, ok := l.folded[key]
	if !ok && len(l.folded) >= maxFoldedKeys {
		key.method = "other"
		sum, ok = l.folded[key]
	}
	if !ok {
		if l.folded == nil {
			l.folded = map[refusalKey]*schema.Decision{}
		}
		c := d
		c.Method = key.method
		sum = &c
		l.folded[key] = sum
	}
	sum.RetryCount++
	sum.EndNS = d.EndNS
	if l.timer == nil {
		l.timer = time.AfterFunc(refusalWindow-now.Sub(l.start), s.endRefusalWindow)
	}
	l.mu.Unlock()
}

// endRefusalWindow writes the window's summaries; the next refusal opens
// a new window.
func (s *session) endRefusalWindow() {
	l := &s.refusals
	l.mu.Lock()
	done := l.takeLocked()
	l.start = time.Time{}
	l.mu.Unlock()
	s.writeSummaries(done)
}

// closeRefusals writes what is counted, before the recorder closes.
func (s *session) closeRefusals() {
	l := &s.refusals
	l.mu.Lock()
	done := l.takeLocked()
	l.closed = true
	l.mu.Unlock()
	s.writeSummaries(done)
}

// takeLocked empties the window's summaries and stops its timer.
func (l *refusalLimiter) takeLocked() []schema.Decision {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	out := make([]schema.Decision, 0, len(l.folded))
	for _, d := range l.folded {
		out = append(out, *d)
	}
	l.folded = nil
	sort.Slice(out, func(i, j int) bool { return out[i].StartNS < out[j].StartNS })
	return out
}

func (s *session) writeSummaries(done []schema.Decision) {
	for _, d := range done {
		s.rec.add(d)
	}
}
