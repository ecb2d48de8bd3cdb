// Package probes loads mcpwarden's eBPF programs (package bpf), attaches them,
// keeps the kernel's map of watched processes, and moves ring buffer records
// into Go without ever blocking the kernel side.
package probes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/bpf"
	"github.com/mcpwarden/mcpwarden/daemon/kevent"
)

// Config tunes the probes.
type Config struct {
	// WakeupBytes batches ring buffer wake-ups: the kernel wakes the reader
	// only once this many bytes wait. 0 wakes on every record.
	WakeupBytes uint32
	// FlushInterval bounds how long a record may wait below WakeupBytes.
	FlushInterval time.Duration
	// RingBytes overrides the ring buffer's size (a power of two, at least a
	// page); 0 keeps the compiled-in 16 MiB.
	RingBytes uint32
	Logger    *slog.Logger
}

// DefaultConfig batches wake-ups at 64 KiB and flushes every 20 ms.
func DefaultConfig() Config {
	return Config{WakeupBytes: 64 << 10, FlushInterval: 20 * time.Millisecond}
}

// Counters are the loss and volume counters of the kernel side and of the
// reader.
type Counters struct {
	Events       uint64 // records the kernel submitted
	RingDrops    uint64 // records lost in the kernel: ring buffer full
	InflightFull uint64 // syscalls whose arguments could not be kept
	WatchFull    uint64 // forked children that could not be followed
	Truncated    uint64 // paths longer or deeper than the probes read
	QueueDrops   uint64 // records lost in user space: the consumer's queue was full
	DecodeErrors uint64 // records that did not decode
	ReadRecords  uint64 // records read from the ring
}

// Stat indexes of the per-CPU stats map (enum stat in watch.bpf.c).
const (
	statEvents = iota
	statRingDrops
	statInflightFull
	statWatchFull
	statTruncated
	statMax
)

// Probes is a loaded and attached set of programs.
type Probes struct {
	cfg     Config
	log     *slog.Logger
	objs    bpf.WatchObjects
	links   []link.Link
	reader  *ringbuf.Reader
	hooks   []string
	missing []string

	queueDrops   atomic.Uint64
	decodeErrors atomic.Uint64
	readRecords  atomic.Uint64

	closeOnce sync.Once
}

// syscallHooks are the syscalls whose enter and exit tracepoints are attached.
var syscallHooks = []string{
	"open", "openat", "openat2", "creat",
	"rename", "renameat", "renameat2",
	"unlink", "unlinkat", "rmdir", "mkdir", "mkdirat", "truncate",
	"link", "linkat", "symlink", "symlinkat", "open_by_handle_at", "io_uring_setup",
}

// ErrTracefs says the tracepoint ids could not be found.
var ErrTracefs = errors.New("tracefs is not mounted at /sys/kernel/tracing")

// EnsureTracefs mounts tracefs when it is missing: cilium/ebpf finds the
// ids of syscall tracepoints there.
func EnsureTracefs() error {
	if _, err := os.Stat("/sys/kernel/tracing/events"); err == nil {
		return nil
	}
	if _, err := os.Stat("/sys/kernel/debug/tracing/events"); err == nil {
		return nil
	}
	if err := unix.Mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, ""); err != nil {
		return fmt.Errorf("%w and mounting it failed (%w): run 'mount -t tracefs tracefs /sys/kernel/tracing' as root", ErrTracefs, err)
	}
	return nil
}

// Load loads the programs into the kernel and attaches every hook. Nothing
// is watched until Watch is called.
func Load(cfg Config) (*Probes, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultConfig().FlushInterval
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock rlimit: %w", err)
	}
	if err := EnsureTracefs(); err != nil {
		return nil, err
	}
	spec, err := bpf.LoadWatch()
	if err != nil {
		return nil, fmt.Errorf("read embedded bpf object: %w", err)
	}
	ring := spec.Maps[bpf.WatchMapEvents].MaxEntries
	if cfg.RingBytes != 0 {
		ring = cfg.RingBytes
		spec.Maps[bpf.WatchMapEvents].MaxEntries = ring
	}
	// A wake-up threshold near the ring's size would let it fill between polls.
	cfg.WakeupBytes = min(cfg.WakeupBytes, ring/4)
	if err := spec.Variables["wakeup_bytes"].Set(cfg.WakeupBytes); err != nil {
		return nil, fmt.Errorf("set wakeup_bytes: %w", err)
	}
	p := &Probes{cfg: cfg, log: cfg.Logger}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load bpf programs (verifier rejected them; Linux 6.2+ with BTF at /sys/kernel/btf/vmlinux is needed: bpf_loop, bpf_rdonly_cast): %w", err)
		}
		return nil, fmt.Errorf("load bpf programs (run as root with CAP_BPF and CAP_PERFMON): %w", err)
	}
	if err := p.attach(); err != nil {
		p.Close()
		return nil, err
	}
	p.reader, err = ringbuf.NewReader(p.objs.Events)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("open ring buffer reader: %w", err)
	}
	p.missing = probeOptional()
	return p, nil
}

func (p *Probes) attach() error {
	progs := map[string]*ebpf.Program{}
	for name, prog := range programsByName(&p.objs.WatchPrograms) {
		progs[name] = prog
	}
	for _, sc := range syscallHooks {
		for _, dir := range []string{"enter", "exit"} {
			prog := progs[dir+"_"+sc]
			if prog == nil {
				return fmt.Errorf("bpf object has no program %s_%s: rebuild with 'make generate'", dir, sc)
			}
			l, err := link.Tracepoint("syscalls", "sys_"+dir+"_"+sc, prog, nil)
			if err != nil {
				return fmt.Errorf("attach tracepoint syscalls/sys_%s_%s: %w", dir, sc, err)
			}
			p.links = append(p.links, l)
		}
		p.hooks = append(p.hooks, "tracepoint/syscalls/"+sc)
	}
	for _, rt := range []struct {
		name string
		prog *ebpf.Program
	}{
		{"sched_process_fork", p.objs.SchedFork},
		{"sched_process_exec", p.objs.SchedExec},
		{"sched_process_exit", p.objs.SchedExit},
	} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: rt.name, Program: rt.prog})
		if err != nil {
			return fmt.Errorf("attach raw tracepoint %s: %w", rt.name, err)
		}
		p.links = append(p.links, l)
		p.hooks = append(p.hooks, "raw_tracepoint/"+rt.name)
	}
	return nil
}

func programsByName(ps *bpf.WatchPrograms) map[string]*ebpf.Program {
	return map[string]*ebpf.Program{
		"enter_open": ps.EnterOpen, "exit_open": ps.ExitOpen,
		"enter_openat": ps.EnterOpenat, "exit_openat": ps.ExitOpenat,
		"enter_openat2": ps.EnterOpenat2, "exit_openat2": ps.ExitOpenat2,
		"enter_creat": ps.EnterCreat, "exit_creat": ps.ExitCreat,
		"enter_rename": ps.EnterRename, "exit_rename": ps.ExitRename,
		"enter_renameat": ps.EnterRenameat, "exit_renameat": ps.ExitRenameat,
		"enter_renameat2": ps.EnterRenameat2, "exit_renameat2": ps.ExitRenameat2,
		"enter_unlink": ps.EnterUnlink, "exit_unlink": ps.ExitUnlink,
		"enter_unlinkat": ps.EnterUnlinkat, "exit_unlinkat": ps.ExitUnlinkat,
		"enter_rmdir": ps.EnterRmdir, "exit_rmdir": ps.ExitRmdir,
		"enter_mkdir": ps.EnterMkdir, "exit_mkdir": ps.ExitMkdir,
		"enter_mkdirat": ps.EnterMkdirat, "exit_mkdirat": ps.ExitMkdirat,
		"enter_truncate": ps.EnterTruncate, "exit_truncate": ps.ExitTruncate,
		"enter_link": ps.EnterLink, "exit_link": ps.ExitLink,
		"enter_linkat": ps.EnterLinkat, "exit_linkat": ps.ExitLinkat,
		"enter_symlink": ps.EnterSymlink, "exit_symlink": ps.ExitSymlink,
		"enter_symlinkat": ps.EnterSymlinkat, "exit_symlinkat": ps.ExitSymlinkat,
		"enter_open_by_handle_at": ps.EnterOpenByHandleAt, "exit_open_by_handle_at": ps.ExitOpenByHandleAt,
		"enter_io_uring_setup": ps.EnterIoUringSetup, "exit_io_uring_setup": ps.ExitIoUringSetup,
	}
}

// probeOptional tries the program types that would observe opens more
// directly (LSM file_open, fentry) and reports why each is not used. The
// syscall tracepoints already cover every operation, so these are reported,
// not required.
func probeOptional() []string {
	ret := asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	var out []string
	for _, c := range []struct {
		name string
		spec ebpf.ProgramSpec
	}{
		{"lsm/file_open", ebpf.ProgramSpec{Type: ebpf.LSM, AttachType: ebpf.AttachLSMMac, AttachTo: "file_open", License: "GPL", Instructions: ret}},
		{"fentry/do_sys_openat2", ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: "do_sys_openat2", License: "GPL", Instructions: ret}},
	} {
		prog, err := ebpf.NewProgram(&c.spec)
		if err != nil {
			out = append(out, c.name+": "+shortErr(err))
			continue
		}
		prog.Close()
		out = append(out, c.name+": loads (not used: syscall tracepoints cover every operation)")
	}
	return out
}

func shortErr(err error) string {
	switch {
	case errors.Is(err, unix.EPERM):
		return "unavailable (EPERM)"
	case errors.Is(err, unix.EINVAL):
		return "unavailable (EINVAL)"
	case errors.Is(err, ebpf.ErrNotSupported):
		return "unavailable (not supported)"
	}
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return "unavailable (" + s + ")"
}

// Hooks lists the hooks in use.
func (p *Probes) Hooks() []string { return append([]string(nil), p.hooks...) }

// Unavailable lists the optional hooks that were probed and why they are not used.
func (p *Probes) Unavailable() []string { return append([]string(nil), p.missing...) }

// Watch makes process tgid (and, from now on, every child it forks) report
// to run slot.
func (p *Probes) Watch(tgid, slot uint32) error {
	if err := p.objs.Watched.Update(tgid, slot, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("watch pid %d: %w", tgid, err)
	}
	return nil
}

// inflightKeys lists the inflight map's keys (pid<<32 | tid) without
// reading its values, a 560-byte argument slot each. Like MapIterator it
// stops after MaxEntries steps, since concurrent inserts may restart the
// walk; a key seen twice is harmless to the caller.
func (p *Probes) inflightKeys() ([]uint64, error) {
	m := p.objs.Inflight
	var keys []uint64
	var cur uint64
	var prev any // nil asks for the first key
	for n := uint32(0); n <= m.MaxEntries(); n++ {
		err := m.NextKey(prev, &cur)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return keys, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list inflight syscalls: %w", err)
		}
		keys = append(keys, cur)
		prev = cur
	}
	return keys, nil
}

// Unwatch stops watching every process of slot and returns how many there were.
func (p *Probes) Unwatch(slot uint32) (int, error) {
	var (
		k, v  uint32
		stale []uint32
	)
	it := p.objs.Watched.Iterate()
	for it.Next(&k, &v) {
		if v == slot {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("list watched pids: %w", err)
	}
	gone := make(map[uint32]bool, len(stale))
	for _, k := range stale {
		if err := p.objs.Watched.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, fmt.Errorf("unwatch pid %d: %w", k, err)
		}
		gone[k] = true
	}
	// Free the argument slots of the unwatched processes' threads.
	keys, err := p.inflightKeys()
	if err != nil {
		return 0, err
	}
	var ids []uint64
	for _, id := range keys {
		if gone[uint32(id>>32)] {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if err := p.objs.Inflight.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, fmt.Errorf("free inflight slot: %w", err)
		}
	}
	return len(stale), nil
}

// Counters sums the kernel's per-CPU counters and adds the reader's.
func (p *Probes) Counters() (Counters, error) {
	var c Counters
	var vals []uint64
	for i := uint32(0); i < statMax; i++ {
		if err := p.objs.Stats.Lookup(i, &vals); err != nil {
			return c, fmt.Errorf("read bpf stats: %w", err)
		}
		var sum uint64
		for _, v := range vals {
			sum += v
		}
		switch i {
		case statEvents:
			c.Events = sum
		case statRingDrops:
			c.RingDrops = sum
		case statInflightFull:
			c.InflightFull = sum
		case statWatchFull:
			c.WatchFull = sum
		case statTruncated:
			c.Truncated = sum
		}
	}
	c.QueueDrops = p.queueDrops.Load()
	c.DecodeErrors = p.decodeErrors.Load()
	c.ReadRecords = p.readRecords.Load()
	return c, nil
}

// Run reads the ring buffer until ctx ends, decoding each record and handing
// it to out without blocking: when out is full the record is counted as a
// queue drop, so the ring never backs up into the kernel because of a slow
// consumer.
func (p *Probes) Run(ctx context.Context, out chan<- kevent.Record) error {
	return p.run(ctx, p.reader, out)
}

// run reads through reader, which it closes when ctx ends.
func (p *Probes) run(ctx context.Context, reader *ringbuf.Reader, out chan<- kevent.Record) error {
	stop := context.AfterFunc(ctx, func() { reader.Close() })
	defer stop()
	var rec ringbuf.Record
	// The deadline is moved only when it fired: while records flow it is
	// not touched per record.
	reader.SetDeadline(time.Now().Add(p.cfg.FlushInterval))
	for {
		err := reader.ReadInto(&rec)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			reader.SetDeadline(time.Now().Add(p.cfg.FlushInterval))
			continue
		case errors.Is(err, ringbuf.ErrClosed):
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("ring buffer closed: %w", err)
		default:
			return fmt.Errorf("read ring buffer: %w", err)
		}
		p.readRecords.Add(1)
		var r kevent.Record
		if err := kevent.Decode(rec.RawSample, &r); err != nil {
			p.decodeErrors.Add(1)
			continue
		}
		select {
		case out <- r:
		default:
			p.queueDrops.Add(1)
		}
	}
}

// Close detaches every hook and frees the programs and maps.
func (p *Probes) Close() error {
	var errs []error
	p.closeOnce.Do(func() {
		if p.reader != nil {
			errs = append(errs, p.reader.Close())
		}
		for _, l := range p.links {
			errs = append(errs, l.Close())
		}
		errs = append(errs, p.objs.Close())
	})
	return errors.Join(errs...)
}
