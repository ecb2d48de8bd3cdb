package probes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/daemon/kevent"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// openClose is the measured operation: one openat + close of a small file.
func openClose(b *testing.B, path string) {
	for b.Loop() {
		fd, err := unix.Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
	}
}

func benchFile(b *testing.B) string {
	p := filepath.Join(b.TempDir(), "bench.txt")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkOpenClose measures what the probes add to open()+close(): with
// no probes loaded, with probes attached but the process not watched (the
// cost every other process on the host pays), and watched (every open is
// decoded into Go, wake-ups batched).
func BenchmarkOpenClose(b *testing.B) {
	testenv.RequireRoot(b)
	path := benchFile(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	b.Run("no_probes", func(b *testing.B) { openClose(b, path) })

	p, err := Load(DefaultConfig())
	if err != nil {
		b.Fatalf("load probes: %v", err)
	}
	defer p.Close()
	b.Run("probes_unwatched", func(b *testing.B) {
		done := bpfRunTime(b, p.objs.SysEnter, p.objs.SysExit)
		openClose(b, path)
		b.StopTimer()
		done()
	})

	// One reader for every run of the watched case: Run closes the ring
	// reader when its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan kevent.Record, 1<<16)
	go func() { _ = p.Run(ctx, out) }()
	go func() {
		for range out {
		}
	}()
	b.Run("probes_watched", func(b *testing.B) {
		done := bpfRunTime(b, p.objs.SysEnter, p.objs.SysExit)
		before, _ := p.Counters()
		if err := p.Watch(uint32(os.Getpid()), 1); err != nil {
			b.Fatal(err)
		}
		openClose(b, path)
		b.StopTimer()
		if _, err := p.Unwatch(1); err != nil {
			b.Fatal(err)
		}
		after, _ := p.Counters()
		b.ReportMetric(float64(after.RingDrops-before.RingDrops), "ring_drops")
		b.ReportMetric(float64(after.QueueDrops-before.QueueDrops), "queue_drops")
		done()
	})
}

// bpfRunTime reports the kernel's own accounting of the enter and exit
// programs' run time per call (kernel.bpf_stats_enabled): the BPF share of
// the cost, free of scheduler noise from other work on the machine.
func bpfRunTime(b *testing.B, enter, exit *ebpf.Program) func() {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable bpf stats: %v", err)
	}
	progs := []*ebpf.Program{enter, exit}
	var t0, n0 [2]uint64
	for i, pr := range progs {
		st, err := pr.Stats()
		if err != nil {
			b.Fatal(err)
		}
		t0[i], n0[i] = uint64(st.Runtime), st.RunCount
	}
	return func() {
		defer stats.Close()
		for i, name := range []string{"bpf_enter_ns", "bpf_exit_ns"} {
			st, err := progs[i].Stats()
			if err != nil {
				b.Fatal(err)
			}
			if runs := st.RunCount - n0[i]; runs > 0 {
				b.ReportMetric(float64(uint64(st.Runtime)-t0[i])/float64(runs), name)
			}
		}
	}
}

// BenchmarkEventThroughput measures sustained kernel events decoded into
// Go: producer threads open and close a file as fast as they can while the
// reader decodes every record; the figure is events per second reaching Go,
// and drops must stay zero.
func BenchmarkEventThroughput(b *testing.B) {
	for _, producers := range []int{1, 2} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) { eventThroughput(b, producers) })
	}
}

func eventThroughput(b *testing.B, producers int) {
	testenv.RequireRoot(b)
	path := benchFile(b)
	p, err := Load(DefaultConfig())
	if err != nil {
		b.Fatalf("load probes: %v", err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan kevent.Record, 1<<16)
	go func() { _ = p.Run(ctx, out) }()
	var n atomic.Int64
	go func() {
		for r := range out {
			if r.Op == kevent.OpOpenat {
				n.Add(1)
			}
		}
	}()
	before, _ := p.Counters()
	if err := p.Watch(uint32(os.Getpid()), 1); err != nil {
		b.Fatal(err)
	}
	per := b.N/producers + 1
	start := time.Now()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for range per {
				fd, err := unix.Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					panic(err)
				}
				unix.Close(fd)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if _, err := p.Unwatch(1); err != nil {
		b.Fatal(err)
	}
	after, _ := p.Counters()
	drops := (after.RingDrops - before.RingDrops) + (after.QueueDrops - before.QueueDrops)
	want := int64(per * producers)
	deadline := time.Now().Add(30 * time.Second)
	for n.Load() < want-int64(drops) {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d records reached Go", n.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(n.Load())/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(drops), "drops")
}

// BenchmarkRingDrain measures the Go side alone: each iteration leaves a
// burst of records in the ring with no reader running (timer stopped), then
// the reader drains and decodes it (timed). The figure is the consumer's
// capacity in events per second.
func BenchmarkRingDrain(b *testing.B) {
	testenv.RequireRoot(b)
	path := benchFile(b)
	p, err := Load(DefaultConfig())
	if err != nil {
		b.Fatalf("load probes: %v", err)
	}
	defer p.Close()
	const burst = 50_000 // ~8 MB of records: fits the 16 MiB ring
	out := make(chan kevent.Record, 1<<17)
	var drained int
	var elapsed time.Duration
	b.StopTimer()
	for range b.N {
		before, _ := p.Counters()
		if err := p.Watch(uint32(os.Getpid()), 1); err != nil {
			b.Fatal(err)
		}
		runtime.LockOSThread()
		for range burst {
			fd, err := unix.Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
		runtime.UnlockOSThread()
		if _, err := p.Unwatch(1); err != nil {
			b.Fatal(err)
		}
		after, _ := p.Counters()
		if d := after.RingDrops - before.RingDrops; d > 0 {
			b.Fatalf("%d records dropped while filling the ring", d)
		}
		queued := int(after.Events - before.Events)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		b.StartTimer()
		start := time.Now()
		go func() { defer close(done); _ = runOnce(ctx, p, out) }()
		for range queued {
			<-out
		}
		elapsed += time.Since(start)
		b.StopTimer()
		cancel()
		<-done
		drained += queued
	}
	b.ReportMetric(float64(drained)/elapsed.Seconds(), "events/s")
}

// runOnce runs the reader on a fresh ring reader, so that it can be stopped
// and started again between iterations (Run closes its reader at the end).
func runOnce(ctx context.Context, p *Probes, out chan<- kevent.Record) error {
	r, err := ringbuf.NewReader(p.objs.Events)
	if err != nil {
		return err
	}
	return p.run(ctx, r, out)
}

// The unwatched cost is measured out of process, with the real daemon
// running and not running: BenchmarkProbeCostOutOfProcess in ./daemon.

// BenchmarkWatchedOverhead estimates what being watched adds to an
// open()+close() (record built, put on the ring, decoded into Go on the
// other core) on top of the unwatched hook, by alternating unwatched and
// watched rounds and taking the median difference.
func BenchmarkWatchedOverhead(b *testing.B) {
	testenv.RequireRoot(b)
	path := benchFile(b)
	p, err := Load(DefaultConfig())
	if err != nil {
		b.Fatalf("load probes: %v", err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan kevent.Record, 1<<16)
	go func() { _ = p.Run(ctx, out) }()
	go func() {
		for range out {
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	loop := func(n int) time.Duration {
		start := time.Now()
		for range n {
			fd, err := unix.Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
		return time.Since(start)
	}
	before, _ := p.Counters()
	const rounds, perRound = 21, 50_000
	var diffs []float64
	for range b.N {
		for range rounds {
			off := loop(perRound)
			if err := p.Watch(uint32(os.Getpid()), 1); err != nil {
				b.Fatal(err)
			}
			on := loop(perRound)
			if _, err := p.Unwatch(1); err != nil {
				b.Fatal(err)
			}
			diffs = append(diffs, float64(on-off)/perRound)
		}
	}
	after, _ := p.Counters()
	slices.Sort(diffs)
	b.ReportMetric(diffs[len(diffs)/2], "added_ns/open")
	b.ReportMetric(float64(after.RingDrops-before.RingDrops+after.QueueDrops-before.QueueDrops), "drops")
}
