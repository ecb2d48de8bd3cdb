package cgroup

// ParseHostForTest exposes parseHost.
func ParseHostForTest(mountinfo, self []byte) *Host { return parseHost(mountinfo, self) }

// PlanForTest is the directories of a group named name with a memory limit,
// without making them.
func (h *Host) PlanForTest(name string) Handle {
	return h.plan(Options{Name: name, Limits: Limits{MemoryBytes: 1}})
}
