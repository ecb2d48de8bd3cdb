package probes

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/bpf"
)

// BPFFS is where bpffs is mounted (and mounted by EnsureBPFFS if missing).
const BPFFS = "/sys/fs/bpf"

const bpffsMagic = 0xcafe4a11

// EnsureBPFFS mounts bpffs at /sys/fs/bpf when nothing is mounted there.
func EnsureBPFFS() error {
	var st unix.Statfs_t
	if err := unix.Statfs(BPFFS, &st); err == nil && st.Type == bpffsMagic {
		return nil
	}
	if err := os.MkdirAll(BPFFS, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", BPFFS, err)
	}
	if err := unix.Mount("bpf", BPFFS, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("bpffs is not mounted at %s and mounting it failed (%w): run 'mount -t bpf bpf %s' as root", BPFFS, err, BPFFS)
	}
	return nil
}

// PinRoot holds one pin directory per daemon state directory.
var PinRoot = filepath.Join(BPFFS, "mcpwarden")

// IDFile is the file of a daemon's state directory that names its pin
// directory under PinRoot.
const IDFile = "probes.id"

// StatePinDir is the pin directory of the daemon of stateDir: PinRoot/<id>,
// the id read from stateDir/probes.id. A missing id is written when create
// is set; without it, StatePinDir returns "" (that daemon never pinned
// anything).
func StatePinDir(stateDir string, create bool) (string, error) {
	path := filepath.Join(stateDir, IDFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && !create:
		return "", nil
	case errors.Is(err, os.ErrNotExist):
		var id [8]byte
		if _, err := rand.Read(id[:]); err != nil {
			return "", err
		}
		b = []byte(hex.EncodeToString(id[:]))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return "", fmt.Errorf("write the probes id: %w", err)
		}
	case err != nil:
		return "", fmt.Errorf("read the probes id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if len(id) != 16 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%s holds no probes id: remove it (the daemon writes a new one)", path)
	}
	return filepath.Join(PinRoot, id), nil
}

// Pinned map names (files in the pin directory).
var pinnedMaps = []string{bpf.WatchMapWatched, bpf.WatchMapWatchedFlags, bpf.WatchMapInflight, bpf.WatchMapEvents, bpf.WatchMapStats, bpf.WatchMapDaemonState}

func (p *Probes) mapRefs() []**ebpf.Map {
	return []**ebpf.Map{&p.watched, &p.flagsMap, &p.inflight, &p.events, &p.stats, &p.state}
}

// adopt opens the maps and hooks an earlier daemon of this same object
// left pinned in p.dir. It reports false when there is nothing (complete)
// to adopt; an incomplete directory is moved aside for replaceOthers.
func (p *Probes) adopt() (bool, error) {
	if _, err := os.Stat(p.dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	complete := true
	for _, name := range pinnedMaps {
		if _, err := os.Stat(filepath.Join(p.dir, name)); err != nil {
			complete = false
		}
	}
	for _, h := range hookNames[2:] { // the scheduler hooks are always attached
		if _, err := os.Stat(filepath.Join(p.dir, "hook_"+h)); err != nil {
			complete = false
		}
	}
	if !complete {
		aside := fmt.Sprintf("%s.incomplete-%d", p.dir, time.Now().UnixNano())
		if err := os.Rename(p.dir, aside); err != nil {
			return false, fmt.Errorf("move incomplete pinned probes aside: %w", err)
		}
		return false, nil
	}
	refs := p.mapRefs()
	for i, name := range pinnedMaps {
		m, err := ebpf.LoadPinnedMap(filepath.Join(p.dir, name), nil)
		if err != nil {
			return false, fmt.Errorf("open pinned map %s: %w", name, err)
		}
		*refs[i] = m
	}
	for _, h := range hookNames {
		l, err := link.LoadPinnedLink(filepath.Join(p.dir, "hook_"+h), nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("open pinned hook %s: %w", h, err)
		}
		p.links[h] = l
	}
	var err error
	if p.flags, err = p.flagsMap.Memory(); err != nil {
		return false, fmt.Errorf("map the watched flags: %w", err)
	}
	p.resumed = Resumed{Adopted: true}
	p.resumed.LastAlive, p.resumed.Stopped, err = readState(p.state)
	if err != nil {
		return false, err
	}
	if p.resumed.Watched, err = countKeys(p.watched); err != nil {
		return false, err
	}
	p.log.Info("adopted pinned probes", "dir", p.dir, "watched", p.resumed.Watched, "syscall_hooks", p.links["sys_enter"] != nil)
	return true, nil
}

// pinNew pins the freshly loaded maps into p.dir.
func (p *Probes) pinNew() error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return fmt.Errorf("create pin directory %s: %w", p.dir, err)
	}
	refs := p.mapRefs()
	for i, name := range pinnedMaps {
		if err := (*refs[i]).Pin(filepath.Join(p.dir, name)); err != nil {
			return fmt.Errorf("pin map %s: %w", name, err)
		}
	}
	return nil
}

// replaceOthers carries the watched processes of every other pinned object
// in the pin directory (another mcpwarden version, or an incomplete one)
// over to these probes, then detaches and removes it.
func (p *Probes) replaceOthers() error {
	entries, err := os.ReadDir(p.cfg.PinDir)
	if err != nil {
		return fmt.Errorf("list pin directory: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(p.cfg.PinDir, e.Name())
		if !e.IsDir() || dir == p.dir {
			continue
		}
		if err := p.replace(dir); err != nil {
			return fmt.Errorf("replace the probes pinned in %s: %w", dir, err)
		}
	}
	return nil
}

func (p *Probes) replace(dir string) error {
	old, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.WatchMapWatched), nil)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	copyWatched := func() (int, error) {
		if old == nil {
			return 0, nil
		}
		var k, v uint32
		n := 0
		it := old.Iterate()
		for it.Next(&k, &v) {
			if err := p.Watch(k, v); err != nil {
				return n, err
			}
			n++
		}
		return n, it.Err()
	}
	if old != nil {
		defer old.Close()
	}
	// The syscall hooks of the old probes were attached: a run was live.
	if _, err := os.Stat(filepath.Join(dir, "hook_sys_enter")); err == nil {
		if err := p.SetSyscallHooks(true); err != nil {
			return err
		}
	}
	if _, err := copyWatched(); err != nil {
		return err
	}
	if st, err := ebpf.LoadPinnedMap(filepath.Join(dir, bpf.WatchMapDaemonState), nil); err == nil {
		p.resumed.LastAlive, p.resumed.Stopped, _ = readState(st)
		st.Close()
	}
	if err := removePins(dir); err != nil {
		return err
	}
	// What the old probes followed until they were detached.
	n, err := copyWatched()
	if err != nil {
		return err
	}
	p.resumed.Replaced = true
	p.resumed.Watched = n
	p.log.Warn("replaced the probes of another mcpwarden version", "dir", dir, "watched", n)
	return nil
}

// removePins detaches the pinned hooks in dir (unpinning a link's last
// reference detaches it) and removes every pin and the directory.
func removePins(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), "hook_") {
			if l, err := link.LoadPinnedLink(path, nil); err == nil {
				errs = append(errs, l.Unpin(), l.Close())
				continue
			}
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Unload detaches and removes every probe pinned under pinDir (the
// operator's way to stop observing for good while runs are still live).
func Unload(pinDir string) (int, error) {
	entries, err := os.ReadDir(pinDir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		if e.IsDir() {
			if err := removePins(filepath.Join(pinDir, e.Name())); err != nil {
				return n, err
			}
			n++
		}
	}
	if err := os.Remove(pinDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return n, err
	}
	return n, nil
}

// Alive records that the daemon is alive now (its restart measures the gap
// from the last time it was).
func (p *Probes) Alive(now time.Time) error {
	return p.writeState(func(s *bpf.WatchDstate) {
		s.AliveNs = uint64(now.UnixNano())
		s.StoppedNs = 0
	})
}

func (p *Probes) writeState(f func(*bpf.WatchDstate)) error {
	if p.state == nil {
		return nil
	}
	var s bpf.WatchDstate
	if err := p.state.Lookup(uint32(0), &s); err != nil {
		return fmt.Errorf("read daemon state: %w", err)
	}
	f(&s)
	if err := p.state.Update(uint32(0), &s, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write daemon state: %w", err)
	}
	return nil
}

func readState(m *ebpf.Map) (alive, stopped time.Time, err error) {
	var s bpf.WatchDstate
	if err := m.Lookup(uint32(0), &s); err != nil {
		return alive, stopped, fmt.Errorf("read daemon state: %w", err)
	}
	if s.AliveNs != 0 {
		alive = time.Unix(0, int64(s.AliveNs))
	}
	if s.StoppedNs != 0 {
		stopped = time.Unix(0, int64(s.StoppedNs))
	}
	return alive, stopped, nil
}

func countKeys(m *ebpf.Map) (int, error) {
	var k, v uint32
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	return n, it.Err()
}
