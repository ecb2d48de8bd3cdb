package cgroup

import (
	"path/filepath"
	"syscall"
	"time"
)

// ParseHostForTest exposes parseHost.
func ParseHostForTest(mountinfo, self []byte) *Host { return parseHost(mountinfo, self) }

// PlanForTest is the directories of a group named name with a memory limit,
// without making them.
func (h *Host) PlanForTest(name string) Handle {
	return h.plan(Options{Name: name, Limits: Limits{MemoryBytes: 1}})
}

// SetStaleAgeForTest changes how old an abandoned group must be.
func SetStaleAgeForTest(d time.Duration) (restore func()) {
	old := staleAge
	staleAge = d
	return func() { staleAge = old }
}

// AbandonForTest drops the group's lock without removing it, as a
// launcher that died would.
func (g *Group) AbandonForTest() {
	if g.lockFD >= 0 {
		syscall.Close(g.lockFD)
		g.lockFD = -1
	}
}

// EventsForTest opens the group's cgroup.events as Kill watches it.
func (g *Group) EventsForTest() (populated func() bool, wait func(time.Duration) bool, closeFn func()) {
	e := newEventsFile(filepath.Join(g.v2, "cgroup.events"))
	return e.populated, e.wait, e.close
}
