package launcher

import "runtime/debug"

// The garbage collector of a `mcpwarden run` process. Its live heap is
// small (about 1 MiB while it relays), and each call allocates a few KiB, so
// with Go's default (GOGC=100, a 4 MiB minimum heap) it collected about
// every 300 calls. A collection's concurrent phase and its wake-ups of
// other threads are what make a call's 99th percentile on a machine with
// few cores. With RunGCPercent the minimum heap is 32 MiB and a burst of
// several thousand calls sees no collection; RunMemoryLimit keeps a large
// live heap (big messages in flight) from growing to nine times its size.
const (
	RunGCPercent   = 800
	RunMemoryLimit = 512 << 20
)

// TuneGC sets the run process's collector to RunGCPercent and
// RunMemoryLimit, leaving alone what the environment already chose: with
// GOGC set nothing is changed; with GOMEMLIMIT set the limit is kept.
// It changes the calling process only, never the server's environment.
func TuneGC(getenv func(string) string) {
	percent, limit := gcSettings(getenv)
	if percent >= 0 {
		debug.SetGCPercent(percent)
	}
	if limit >= 0 {
		debug.SetMemoryLimit(limit)
	}
}

// gcSettings returns what TuneGC sets; -1 leaves a setting as it is.
func gcSettings(getenv func(string) string) (percent int, limit int64) {
	if getenv("GOGC") != "" {
		return -1, -1
	}
	if getenv("GOMEMLIMIT") != "" {
		return RunGCPercent, -1
	}
	return RunGCPercent, RunMemoryLimit
}
