package launcher

import (
	"runtime/debug"
	"testing"
)

func TestGCSettings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		percent int
		limit   int64
	}{
		{"defaults", nil, RunGCPercent, RunMemoryLimit},
		{"GOGC chosen", map[string]string{"GOGC": "50"}, -1, -1},
		{"GOGC off", map[string]string{"GOGC": "off"}, -1, -1},
		{"GOGC and GOMEMLIMIT chosen", map[string]string{"GOGC": "200", "GOMEMLIMIT": "1GiB"}, -1, -1},
		{"GOMEMLIMIT chosen", map[string]string{"GOMEMLIMIT": "100MiB"}, RunGCPercent, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, l := gcSettings(func(k string) string { return tc.env[k] })
			if p != tc.percent || l != tc.limit {
				t.Errorf("gcSettings = %d, %d; want %d, %d", p, l, tc.percent, tc.limit)
			}
		})
	}
}

func TestTuneGCSetsTheProcess(t *testing.T) {
	oldPercent := debug.SetGCPercent(100)
	oldLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	})
	TuneGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != RunGCPercent {
		t.Errorf("GC percent after TuneGC = %d, want %d", got, RunGCPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != RunMemoryLimit {
		t.Errorf("memory limit after TuneGC = %d, want %d", got, RunMemoryLimit)
	}
	debug.SetGCPercent(100)
	TuneGC(func(k string) string { return map[string]string{"GOGC": "100"}[k] })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent after TuneGC with GOGC set = %d, want it left at 100", got)
	}
}
