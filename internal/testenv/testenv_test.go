package testenv

import "testing"

func TestFreePortNeverRepeats(t *testing.T) {
	lo, hi := portPool()
	seen := map[int]bool{}
	for range 500 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("FreePort returned %d twice", p)
		}
		seen[p] = true
		if hi > lo && (p < lo || p >= hi) {
			t.Fatalf("FreePort returned %d, outside [%d, %d) below the ephemeral range", p, lo, hi)
		}
	}
}
