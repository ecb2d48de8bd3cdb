package launcher_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// BenchmarkLaunchCgroupCost measures what the cgroup layer adds to a launch
// as the user waits for it: the real `mcpwarden run` as its own process,
// time from spawn to a trivial server's first response, the default (a
// cgroup with limits, the helper moved into it, the watcher started; the
// cgroup killed and removed at the end) alternating with --cgroup=false in
// one run. It reports the medians and their difference; run with
// -benchtime 20x or more (each iteration is one launch of each).
func BenchmarkLaunchCgroupCost(b *testing.B) {
	fencetest.RequireFence(b)
	bins := fencetest.Build(b)
	base := b.TempDir()
	os.Mkdir(filepath.Join(base, "allowed"), 0o755)
	scope := fencetest.WriteScope(b, b.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	log := filepath.Join(b.TempDir(), "audit.jsonl")
	var cpuOn, cpuOff time.Duration
	launch := func(extra ...string) (time.Duration, time.Duration) {
		args := append([]string{"run", fencetest.RelayFlag, "--scope", scope, "--base", base, "--audit-log", log}, extra...)
		cmd := exec.Command(bins.Mcpwarden, append(append(args, "--"), bins.Naive)...)
		cmd.Dir = base
		start := time.Now()
		before := cpu
		first := pingOnce(b, cmd)
		if len(extra) == 0 {
			cpuOn += cpu - before
		} else {
			cpuOff += cpu - before
		}
		return first, time.Since(start)
	}
	var on, off, onAll, offAll []time.Duration
	i := 0
	for b.Loop() {
		// Alternate which goes first, so that neither always follows the other.
		if i%2 == 0 {
			f, a := launch()
			on, onAll = append(on, f), append(onAll, a)
			f, a = launch("--cgroup=false")
			off, offAll = append(off, f), append(offAll, a)
		} else {
			f, a := launch("--cgroup=false")
			off, offAll = append(off, f), append(offAll, a)
			f, a = launch()
			on, onAll = append(on, f), append(onAll, a)
		}
		i++
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(median(on)), "ms-first-response-cgroup")
	b.ReportMetric(ms(median(off)), "ms-first-response-no-cgroup")
	b.ReportMetric(ms(median(on)-median(off)), "ms-added-by-cgroup")
	b.ReportMetric(ms(median(onAll)-median(offAll)), "ms-added-to-whole-run")
	b.ReportMetric(ms((cpuOn-cpuOff)/time.Duration(len(on))), "cpu-ms-added")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
