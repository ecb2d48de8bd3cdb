package launcher

import (
	"os"
	"testing"
)

// TestWarmUpLeavesNothingOpen: the pidfd the warm-up's process lookup opens
// is released (a launcher runs for as long as its server: a descriptor
// left open would be inherited by nothing but still held for the run).
func TestWarmUpLeavesNothingOpen(t *testing.T) {
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := count()
	for range 3 {
		<-WarmUp()
	}
	if after := count(); after != before {
		t.Fatalf("descriptors: %d before the warm-up, %d after", before, after)
	}
}
