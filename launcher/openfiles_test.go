package launcher

import "testing"

// TestOpenFilesCeiling: docs/launcher.md's figures for the run's
// RLIMIT_NOFILE ceiling: fs.file-max / 8 / the process limit, never below
// 1024; a run without a process limit, or a table that could not be read,
// gets 1024.
func TestOpenFilesCeiling(t *testing.T) {
	for _, c := range []struct {
		fileMax uint64
		procs   int64
		want    uint64
	}{
		{2_466_239, 512, 1024}, // this host with the defaults: 602 is below the floor
		{9_223_372_036_854_775_807, 512, 9_223_372_036_854_775_807 / 8 / 512},
		{64 << 20, 512, 16384}, // 67,108,864 / 8 / 512
		{64 << 20, 1, 8 << 20}, // one process: an eighth of the table
		{64 << 20, 0, 1024},    // no process limit
		{64 << 20, -1, 1024},   // no process limit
		{0, 512, 1024},         // the table could not be read
		{1000, 1, 1024},        // a tiny table: the floor
	} {
		if got := openFilesCeiling(c.fileMax, c.procs); got != c.want {
			t.Errorf("openFilesCeiling(%d, %d) = %d, want %d", c.fileMax, c.procs, got, c.want)
		}
	}
}
