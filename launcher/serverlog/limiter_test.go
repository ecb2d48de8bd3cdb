package serverlog

import (
	"testing"
	"time"
)

// TestLimiter: Burst at once, nothing more while the bucket is empty, and
// once dropping, nothing until half the burst has come back (a steady flood
// gets mcpwarden's two lines every few seconds, not two per read).
func TestLimiter(t *testing.T) {
	at := time.Unix(1e9, 0)
	l := newLimiter(func() time.Time { return at })
	steps := []struct {
		advance time.Duration
		n, want int
		drop    bool // Copy starts dropping after this take
	}{
		{0, Burst - 100, Burst - 100, false},
		{0, 1000, 100, true},
		{time.Second, 10, 0, false},     // Rate came back, not half the burst
		{2 * time.Second, 10, 0, false}, // 3 s: still less than half
		{time.Second, 10, 10, false},    // 4 s: Burst/2 back, output resumes
		{0, Burst, Burst/2 - 10, false},
	}
	for i, s := range steps {
		at = at.Add(s.advance)
		if got := l.take(s.n); got != s.want {
			t.Fatalf("step %d: take(%d) = %d, want %d", i, s.n, got, s.want)
		}
		if s.drop {
			l.dropping = true
		}
		if s.want > 0 && !s.drop {
			l.dropping = false
		}
	}
}
