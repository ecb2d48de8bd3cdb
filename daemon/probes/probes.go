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
	"path/filepath"
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
	// PinDir, when set, is a directory in bpffs where the maps and the
	// attached hooks are pinned, so they outlive the daemon: a restarted
	// daemon adopts them (Resumed says what it found) and the runs it
	// watched were never unobserved by the kernel. Empty: nothing is
	// pinned and Close detaches everything.
	PinDir string
	// LazySyscalls leaves the syscall hooks (sys_enter, sys_exit) detached
	// until SetSyscallHooks(true): a daemon with no run costs the host's
	// syscalls nothing.
	LazySyscalls bool
	Logger       *slog.Logger
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
	cfg  Config
	log  *slog.Logger
	objs bpf.WatchObjects // programs are nil when the probes were adopted
	// maps the daemon works with; set whether loaded or adopted.
	watched, flagsMap, inflight, events, stats, state *ebpf.Map

	mu      sync.Mutex
	links   map[string]link.Link // by hook name
	dir     string               // pin directory of this object ("" when not pinned)
	resumed Resumed

	reader  *ringbuf.Reader
	flags   *ebpf.Memory // watched_flags, one byte per pid
	missing []string

	queueDrops   atomic.Uint64
	decodeErrors atomic.Uint64
	readRecords  atomic.Uint64

	closeOnce sync.Once
}

// Resumed is what Load found pinned by an earlier daemon.
type Resumed struct {
	// Adopted: the probes of an earlier daemon were still attached and are
	// used as they are; what the kernel recorded meanwhile is in the ring.
	Adopted bool
	// Replaced: probes of another mcpwarden version were attached; the
	// watched processes were carried over to the new ones, but records that
	// version left unread are lost.
	Replaced bool
	// Watched is how many processes the kernel still watched.
	Watched int
	// LastAlive is when the earlier daemon last showed it was alive, Stopped
	// whether it stopped cleanly (zero when it was killed).
	LastAlive, Stopped time.Time
}

// Syscalls lists the operations the syscall hooks decode (each with its
// native and, on x86_64, its i386 syscall number; arm64 has only the *at
// variants). Every other syscall leaves the hooks on its number.
var Syscalls = []string{
	"open", "openat", "openat2", "creat",
	"rename", "renameat", "renameat2",
	"unlink", "unlinkat", "rmdir", "mkdir", "mkdirat", "truncate",
	"link", "linkat", "symlink", "symlinkat", "open_by_handle_at", "io_uring_setup",
}

// Load loads the programs into the kernel and attaches the hooks (the
// syscall hooks only if not LazySyscalls). With PinDir it first adopts the
// probes an earlier daemon left pinned there. Nothing new is watched until
// Watch is called.
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
	p := &Probes{cfg: cfg, log: cfg.Logger, links: map[string]link.Link{}}
	if cfg.PinDir != "" {
		if err := EnsureBPFFS(); err != nil {
			return nil, err
		}
		p.dir = filepath.Join(cfg.PinDir, fmt.Sprintf("%s-%d-%d", bpf.ObjectHash(), ring, cfg.WakeupBytes))
		ok, err := p.adopt()
		if err != nil {
			p.Close()
			return nil, err
		}
		if ok {
			if err := p.finish(); err != nil {
				p.Close()
				return nil, err
			}
			return p, nil
		}
	}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load bpf programs (verifier rejected them; Linux 6.2+ with BTF at /sys/kernel/btf/vmlinux is needed: bpf_loop, bpf_rdonly_cast, tp_btf): %w", err)
		}
		return nil, fmt.Errorf("load bpf programs (run as root with CAP_BPF and CAP_PERFMON): %w", err)
	}
	m := &p.objs.WatchMaps
	p.watched, p.flagsMap, p.inflight, p.events, p.stats, p.state = m.Watched, m.WatchedFlags, m.Inflight, m.Events, m.Stats, m.DaemonState
	if p.flags, err = p.flagsMap.Memory(); err != nil {
		p.Close()
		return nil, fmt.Errorf("map the watched flags: %w", err)
	}
	if p.dir != "" {
		if err := p.pinNew(); err != nil {
			p.Close()
			return nil, err
		}
	}
	for _, h := range p.hookList() {
		if cfg.LazySyscalls && isSyscallHook(h.name) {
			continue
		}
		if err := p.attach(h.name, h.prog); err != nil {
			p.Close()
			return nil, err
		}
	}
	if p.dir != "" {
		// Probes of another version still attached: their processes move
		// over to the new probes (attached by now, so nothing forked in
		// between is missed), then they are detached.
		if err := p.replaceOthers(); err != nil {
			p.Close()
			return nil, err
		}
	}
	if err := p.finish(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// finish opens the ring reader and probes the optional hooks.
func (p *Probes) finish() error {
	var err error
	p.reader, err = ringbuf.NewReader(p.events)
	if err != nil {
		return fmt.Errorf("open ring buffer reader: %w", err)
	}
	p.missing = probeOptional()
	return nil
}

func isSyscallHook(name string) bool { return name == "sys_enter" || name == "sys_exit" }

// hookNames are the BTF tracepoints the programs attach to.
var hookNames = []string{"sys_enter", "sys_exit", "sched_process_fork", "sched_process_exec", "sched_process_exit"}

// hookList pairs each hook with its program (nil when adopted: the pinned
// link holds the program).
func (p *Probes) hookList() []struct {
	name string
	prog *ebpf.Program
} {
	ps := &p.objs.WatchPrograms
	progs := []*ebpf.Program{ps.SysEnter, ps.SysExit, ps.SchedFork, ps.SchedExec, ps.SchedExit}
	out := make([]struct {
		name string
		prog *ebpf.Program
	}, len(hookNames))
	for i, n := range hookNames {
		out[i].name, out[i].prog = n, progs[i]
	}
	return out
}

// attach attaches prog to its BTF tracepoint and, when pinned, pins the link.
func (p *Probes) attach(name string, prog *ebpf.Program) error {
	if prog == nil {
		return fmt.Errorf("hook %s cannot be attached: its program was not loaded by this daemon", name)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: prog, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		return fmt.Errorf("attach tp_btf/%s: %w", name, err)
	}
	if p.dir != "" {
		if err := l.Pin(filepath.Join(p.dir, "hook_"+name)); err != nil {
			l.Close()
			return fmt.Errorf("pin hook %s: %w", name, err)
		}
	}
	p.links[name] = l
	return nil
}

// detach detaches a hook (and removes its pin).
func (p *Probes) detach(name string) error {
	l := p.links[name]
	if l == nil {
		return nil
	}
	delete(p.links, name)
	if p.dir != "" {
		if err := l.Unpin(); err != nil {
			l.Close()
			return fmt.Errorf("unpin hook %s: %w", name, err)
		}
	}
	return l.Close()
}

// SetSyscallHooks attaches (on) or detaches the syscall hooks. A daemon
// keeps them attached while any run is live.
func (p *Probes) SetSyscallHooks(on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.hookList() {
		if !isSyscallHook(h.name) {
			continue
		}
		if on && p.links[h.name] == nil {
			if err := p.attach(h.name, h.prog); err != nil {
				return err
			}
		}
		if !on {
			if err := p.detach(h.name); err != nil {
				return err
			}
		}
	}
	return nil
}

// SyscallHooks reports whether the syscall hooks are attached.
func (p *Probes) SyscallHooks() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.links["sys_enter"] != nil && p.links["sys_exit"] != nil
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

// Hooks lists the hooks in use (attached now).
func (p *Probes) Hooks() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, h := range hookNames {
		if p.links[h] != nil {
			out = append(out, "tp_btf/"+h)
		}
	}
	return out
}

// Resumed says what Load found pinned by an earlier daemon.
func (p *Probes) Resumed() Resumed { return p.resumed }

// Unavailable lists the optional hooks that were probed and why they are not used.
func (p *Probes) Unavailable() []string { return append([]string(nil), p.missing...) }

// pidsFlagged is PIDS_FLAGGED in watch.bpf.c: pids below it have a byte in
// watched_flags.
const pidsFlagged = 1 << 22

// setFlag writes the watched flag byte of tgid through the memory mapping:
// one byte, so the kernel's own updates of neighbouring pids (forks,
// exits) are never overwritten.
func (p *Probes) setFlag(tgid uint32, on bool) error {
	if tgid >= pidsFlagged {
		return nil // the programs fall back to the hash for these
	}
	v := []byte{0}
	if on {
		v[0] = 1
	}
	if _, err := p.flags.WriteAt(v, int64(tgid)); err != nil {
		return fmt.Errorf("set watched flag of pid %d: %w", tgid, err)
	}
	return nil
}

// Watch makes process tgid (and, from now on, every child it forks) report
// to run slot.
func (p *Probes) Watch(tgid, slot uint32) error {
	if err := p.watched.Update(tgid, slot, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("watch pid %d: %w", tgid, err)
	}
	return p.setFlag(tgid, true)
}

// UnwatchPID stops watching process tgid alone (one that exited before
// it could be confirmed as a run's).
func (p *Probes) UnwatchPID(tgid uint32) error {
	if err := p.setFlag(tgid, false); err != nil {
		return err
	}
	if err := p.watched.Delete(tgid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unwatch pid %d: %w", tgid, err)
	}
	return nil
}

// WatchedBySlot lists the processes the kernel watches, by run slot.
func (p *Probes) WatchedBySlot() (map[uint32][]uint32, error) {
	out := map[uint32][]uint32{}
	var k, v uint32
	it := p.watched.Iterate()
	for it.Next(&k, &v) {
		out[v] = append(out[v], k)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list watched pids: %w", err)
	}
	return out, nil
}

// inflightKeys lists the inflight map's keys (pid<<32 | tid) without
// reading its values, a 560-byte argument slot each. Like MapIterator it
// stops after MaxEntries steps, since concurrent inserts may restart the
// walk; a key seen twice is harmless to the caller.
func (p *Probes) inflightKeys() ([]uint64, error) {
	m := p.inflight
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
	it := p.watched.Iterate()
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
		if err := p.setFlag(k, false); err != nil {
			return 0, err
		}
		if err := p.watched.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
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
		if err := p.inflight.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
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
		if err := p.stats.Lookup(i, &vals); err != nil {
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

// Close detaches every hook and frees the programs and maps; pinned ones
// are unpinned.
func (p *Probes) Close() error { return p.close(false) }

// Keep closes the daemon's handles but leaves the pinned probes attached,
// for the next daemon to adopt; stopped records that this was a clean stop.
// Without a pin directory it is Close.
func (p *Probes) Keep() error {
	if p.dir == "" {
		return p.Close()
	}
	if err := p.writeState(func(s *bpf.WatchDstate) { s.StoppedNs = uint64(time.Now().UnixNano()) }); err != nil {
		p.log.Warn("record clean stop", "err", err)
	}
	return p.close(true)
}

func (p *Probes) close(keep bool) error {
	var errs []error
	p.closeOnce.Do(func() {
		if p.reader != nil {
			errs = append(errs, p.reader.Close())
		}
		p.mu.Lock()
		for name, l := range p.links {
			if !keep && p.dir != "" {
				errs = append(errs, l.Unpin())
			}
			errs = append(errs, l.Close())
			delete(p.links, name)
		}
		p.mu.Unlock()
		if !keep && p.dir != "" {
			errs = append(errs, removePins(p.dir))
			// The daemon's own directory goes too once no other
			// object's probes are pinned in it.
			if err := os.Remove(p.cfg.PinDir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
				errs = append(errs, err)
			}
		}
		for _, m := range []*ebpf.Map{p.watched, p.flagsMap, p.inflight, p.events, p.stats, p.state} {
			if m != nil {
				errs = append(errs, m.Close())
			}
		}
		errs = append(errs, p.objs.WatchPrograms.Close())
		for _, m := range []*ebpf.Map{p.objs.Scratch, p.objs.ArgsZero} {
			if m != nil {
				errs = append(errs, m.Close())
			}
		}
	})
	return errors.Join(errs...)
}
