package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkBuild is the filter's share of the fence helper's start-up: it
// is assembled in the helper for every run. cpu-ns/op is the process's CPU
// time per build (the wall time is noisy on a shared machine).
func BenchmarkBuild(b *testing.B) {
	b.ReportAllocs()
	var before, after unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &before)
	for i := 0; i < b.N; i++ {
		if _, err := Build(Native, Options{WriteScope: true}); err != nil {
			b.Fatal(err)
		}
	}
	_ = unix.Getrusage(unix.RUSAGE_SELF, &after)
	cpu := func(r unix.Rusage) int64 { return r.Utime.Nano() + r.Stime.Nano() }
	b.ReportMetric(float64(cpu(after)-cpu(before))/float64(b.N), "cpu-ns/op")
}
