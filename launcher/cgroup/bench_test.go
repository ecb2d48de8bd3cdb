package cgroup_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/cgroup"
)

// BenchmarkGroup breaks the layer's cost down, in process: making a run's
// group with the default limits, moving a process into it, and killing
// and removing it at the end. What the user waits for is measured out of
// process by launcher's BenchmarkLaunchCgroupCost; this says where it goes.
func BenchmarkGroup(b *testing.B) {
	h := requireCgroupsB(b)
	lim := cgroup.Limits{Processes: 512, MemoryBytes: 1 << 30}
	for _, l := range layouts {
		b.Run(l.name, func(b *testing.B) {
			var create, join, remove time.Duration
			n := 0
			for b.Loop() {
				c := child("sleep")
				if err := c.Start(); err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				g, err := h.New(cgroup.Options{Name: fmt.Sprintf("mcpwarden-bench-%d-%d", os.Getpid(), n), Limits: lim, NoV2: l.noV2})
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := g.Join(c.Process.Pid); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				if err := g.Remove(10 * time.Second); err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				_ = c.Wait()
				create += t1.Sub(t0)
				join += t2.Sub(t1)
				remove += t3.Sub(t2)
				n++
			}
			us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
			b.ReportMetric(us(create), "us-create")
			b.ReportMetric(us(join), "us-join")
			b.ReportMetric(us(remove), "us-kill-remove")
		})
	}
}

func requireCgroupsB(b *testing.B) *cgroup.Host {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	h, err := cgroup.Probe()
	if err != nil || h.Version() != "hybrid" && h.Version() != "v2" {
		b.Skipf("no cgroup2 here: %v", err)
	}
	return h
}
