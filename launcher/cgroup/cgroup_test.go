package cgroup_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/internal/rawproc"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/cgroup"
)

// envChild makes the test binary one of the test's own child programs;
// envWait makes it wait for a byte on stdin first.
const (
	envChild = "MCPWARDEN_CGROUP_TEST_CHILD"
	envWait  = "MCPWARDEN_CGROUP_TEST_WAIT"
)

func init() {
	if os.Getenv(envChild) == "leaderexit" {
		runtime.LockOSThread() // main() then runs on the main thread
	}
}

func TestMain(m *testing.M) {
	mode := os.Getenv(envChild)
	if mode == "" {
		// Orphans of the test's children come back here to be reaped,
		// as they come back to the launcher in a run.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
		os.Exit(m.Run())
	}
	if os.Getenv(envWait) != "" {
		// Started by startIn: wait until the process is in the group, as
		// the fence helper waits for its spec.
		var b [1]byte
		_, _ = os.Stdin.Read(b[:])
	}
	switch mode {
	case "sleep":
		time.Sleep(time.Hour)
	case "tree":
		// A daemonised grandchild in a process group of its own, a child
		// whose main thread exited, and forks that only sleep.
		for _, mode := range []string{"daemon", "leaderexit"} {
			c := child(mode)
			if err := c.Start(); err != nil {
				fmt.Println("start", mode, err)
				os.Exit(1)
			}
		}
		for i := 0; i < 3; i++ {
			if _, err := rawproc.ForkPause(); err != nil {
				fmt.Println("fork", err)
				os.Exit(1)
			}
		}
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "daemon":
		c := child("sleep")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			os.Exit(1)
		}
		os.Exit(0) // the grandchild is an orphan in its own process group
	case "leaderexit":
		go func() { time.Sleep(time.Hour) }()
		rawproc.ExitMainThread()
	case "forkbomb":
		n, _ := strconv.Atoi(os.Args[len(os.Args)-1])
		made := 0
		var err error
		for ; made < n; made++ {
			if _, err = rawproc.ForkPause(); err != nil {
				break
			}
		}
		fmt.Println(made, err)
		time.Sleep(time.Hour)
	case "dial":
		dialAll(os.Args[2:])
	case "hog":
		n, _ := strconv.Atoi(os.Args[len(os.Args)-1])
		var keep [][]byte
		for i := 0; i < n; i++ {
			b := make([]byte, 1<<20)
			for j := range b {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		fmt.Println("allocated", len(keep))
		time.Sleep(time.Hour)
	}
	os.Exit(0)
}

func child(mode string, args ...string) *exec.Cmd {
	exe, _ := os.Executable()
	c := exec.Command(exe, append([]string{"-test.run=^$"}, args...)...)
	c.Env = append(os.Environ(), envChild+"="+mode, "GOGC=off")
	return c
}

func TestParseHost(t *testing.T) {
	hybrid := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	pure := `30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	nsroot := `30 23 0:26 /user.slice/app /sys/fs/cgroup rw shared:4 - cgroup2 cgroup2 rw
`
	escaped := `30 23 0:26 / /run/my\040cgroup rw - cgroup2 cgroup2 rw
`
	cases := []struct {
		name, mountinfo, self, version string
		want                           cgroup.Handle // directories New would use for a group named "g"
	}{
		{"hybrid", hybrid, "9:name=systemd:/\n8:pids:/\n6:freezer:/\n4:memory:/process_api/abc\n0::/\n", "hybrid",
			cgroup.Handle{V2: "/sys/fs/cgroup/unified/g", V1: map[string]string{"pids": "/sys/fs/cgroup/pids/g", "memory": "/sys/fs/cgroup/memory/process_api/abc/g", "freezer": "/sys/fs/cgroup/freezer/g"}}},
		{"pure v2", pure, "0::/user.slice/user-1000.slice/session-2.scope\n", "v2",
			cgroup.Handle{V2: "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope/g"}},
		{"v2 mounted below its root", nsroot, "0::/user.slice/app/sub\n", "v2",
			cgroup.Handle{V2: "/sys/fs/cgroup/sub/g"}},
		{"v2 own cgroup outside the mount", nsroot, "0::/system.slice/x\n", "",
			cgroup.Handle{}},
		{"v2 escaped mount point", escaped, "0::/a\n", "v2",
			cgroup.Handle{V2: "/run/my cgroup/a/g"}},
		{"v2 cgroup namespace outside", pure, "0::/../../x\n", "",
			cgroup.Handle{}},
		{"nothing", "", "", "", cgroup.Handle{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := cgroup.ParseHostForTest([]byte(c.mountinfo), []byte(c.self))
			if got := h.Version(); got != c.version {
				t.Errorf("version %q, want %q", got, c.version)
			}
			got := h.PlanForTest("g")
			if got.V2 != c.want.V2 || fmt.Sprint(got.V1) != fmt.Sprint(c.want.V1) {
				t.Errorf("plan %+v, want %+v", got, c.want)
			}
		})
	}
}

// requireCgroups demands root and a writable cgroup hierarchy of the kind
// the test exercises.
func requireCgroups(t *testing.T, v2 bool) *cgroup.Host {
	t.Helper()
	testenv.RequireRoot(t)
	h, err := cgroup.Probe()
	if err != nil {
		t.Fatal(err)
	}
	switch v := h.Version(); {
	case v2 && v != "v2" && v != "hybrid":
		testenv.Missing(t, "no cgroup2 mount here (version "+v+")")
	case !v2 && v != "v1" && v != "hybrid":
		testenv.Missing(t, "no cgroup v1 pids/memory hierarchies here (version "+v+")")
	}
	return h
}

type layout struct {
	name string
	noV2 bool
	kill cgroup.KillMethod
}

var layouts = []layout{
	{"cgroup2", false, cgroup.KillCgroupKill},
	{"v1", true, cgroup.KillFreezer},
}

func newGroup(t *testing.T, h *cgroup.Host, l layout, lim cgroup.Limits) *cgroup.Group {
	t.Helper()
	g, err := h.New(cgroup.Options{Name: fmt.Sprintf("mcpwarden-test-%d-%d", os.Getpid(), time.Now().UnixNano()), Limits: lim, NoV2: l.noV2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Remove(10 * time.Second); err != nil {
			t.Errorf("remove: %v", err)
		}
	})
	r := g.Report()
	if r.Kill != l.kill {
		t.Fatalf("kill method %q, want %q (report %+v)", r.Kill, l.kill, r)
	}
	if r.State != cgroup.On {
		t.Fatalf("state %q: %s", r.State, r.Reason)
	}
	return g
}

// startIn starts c inside g the way the launcher starts the helper: joined
// to the group, and only then let go.
func startIn(t *testing.T, g *cgroup.Group, c *exec.Cmd) {
	t.Helper()
	c.Env = append(c.Env, envWait+"=1")
	gate, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	// Forks hold c's output pipe: kill them all before waiting for c, then
	// reap the orphans that came back to the test.
	t.Cleanup(func() {
		_ = g.Kill(10 * time.Second)
		_ = c.Wait()
		for {
			if pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
	})
	if err := g.Join(c.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := gate.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
}

// TestKillLeavesNothing: a tree made of a daemonised grandchild in its own
// process group, a process whose main thread exited while its threads run,
// and raw forks, all in the group, is gone after one Kill.
func TestKillLeavesNothing(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			h := requireCgroups(t, !l.noV2)
			g := newGroup(t, h, l, cgroup.Limits{Processes: 64})
			c := child("tree")
			var out testenv.LockedBuffer
			c.Stdout = &out
			startIn(t, g, c)
			waitFor(t, func() bool { return strings.Contains(out.String(), "ready") })
			// tree + daemon's grandchild + leaderexit + 3 forks, once the
			// leaderexit child's main thread has exited.
			var pids []int
			waitFor(t, func() bool {
				pids, _ = g.Procs()
				return len(pids) >= 6 && slices.ContainsFunc(pids, zombieLeader)
			})
			if err := g.Kill(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			for _, p := range pids {
				if testenv.Alive(p) {
					t.Errorf("process %d outlived the kill", p)
				}
			}
			if left, _ := g.Procs(); len(left) != 0 {
				t.Errorf("group still lists %v", left)
			}
		})
	}
}

// TestKillSeesTheGroupEmptyWhenItEmpties: Kill waits between rounds on
// cgroup.events, which the kernel marks changed when the group's last
// process exits; the wait must be woken by that change (not run out), and
// the file then read as not populated.
func TestKillSeesTheGroupEmptyWhenItEmpties(t *testing.T) {
	h := requireCgroups(t, true)
	g := newGroup(t, h, layouts[0], cgroup.Limits{Processes: 64})
	c := child("sleep")
	startIn(t, g, c)
	populated, wait, closeEvents := g.EventsForTest()
	defer closeEvents()
	if !populated() {
		t.Fatal("cgroup.events says not populated with a process in the group")
	}
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
	// The kill may have emptied the group before this wait began: the
	// change since the last read is what wakes it either way.
	if !wait(10 * time.Minute) {
		t.Fatal("the wait on cgroup.events ran out although the group emptied")
	}
	if populated() {
		t.Error("cgroup.events still says populated after the only process exited")
	}
	if wait(time.Millisecond) {
		t.Error("the wait reported a change when nothing changed since the last read")
	}
}

// zombieLeader reports whether pid's main thread has exited while the
// process still runs.
func zombieLeader(pid int) bool {
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return leaderState(st) == 'Z' && testenv.Alive(pid)
}

func leaderState(stat []byte) byte {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}

// TestProcessLimit: a fork bomb stops at pids.max (threads count too).
func TestProcessLimit(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			h := requireCgroups(t, !l.noV2)
			const limit = 40
			g := newGroup(t, h, l, cgroup.Limits{Processes: limit})
			if g.Report().Processes != limit {
				t.Fatalf("report %+v", g.Report())
			}
			c := child("forkbomb", "500")
			var out testenv.LockedBuffer
			c.Stdout = &out
			startIn(t, g, c)
			waitFor(t, func() bool { return strings.Contains(out.String(), "\n") })
			var made int
			var errText string
			fmt.Sscanf(out.String(), "%d", &made)
			errText = strings.TrimSpace(strings.TrimPrefix(out.String(), strconv.Itoa(made)))
			if made >= limit || !strings.Contains(errText, "resource temporarily unavailable") {
				t.Fatalf("the fork bomb made %d processes (%s); the limit is %d", made, errText, limit)
			}
			if s := g.Stats(); s.ProcessLimitHits == 0 {
				t.Errorf("stats %+v: no pids.max hit counted", s)
			}
		})
	}
}

// TestMemoryLimit: a process that allocates past the limit is killed by
// the kernel's OOM killer inside the group.
func TestMemoryLimit(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			h := requireCgroups(t, !l.noV2)
			g := newGroup(t, h, l, cgroup.Limits{MemoryBytes: 64 << 20})
			c := child("hog", "256")
			var out testenv.LockedBuffer
			c.Stdout = &out
			startIn(t, g, c)
			err := c.Wait()
			var ee *exec.ExitError
			if err == nil || !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the hog was not killed: %v (%s)", err, out.String())
			}
			if s := g.Stats(); s.OOMKills == 0 {
				t.Errorf("stats %+v: no OOM kill counted", s)
			}
		})
	}
}

// TestWatchKillsWhenTheLifelineCloses: the watcher kills and removes the
// group once the launcher's end of its pipe is gone.
func TestWatchKillsWhenTheLifelineCloses(t *testing.T) {
	h := requireCgroups(t, true)
	g := newGroup(t, h, layouts[0], cgroup.Limits{})
	c := child("sleep")
	startIn(t, g, c)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	opened, err := h.Open(g.Handle())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cgroup.Watch(r, opened, 10*time.Second) }()
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err == nil {
		t.Fatal("the member exited cleanly; it should have been killed")
	}
	if _, err := os.Stat(g.Handle().V2); !os.IsNotExist(err) {
		t.Errorf("the group's directory is still there: %v", err)
	}
}

// TestOpenRefusesForeignDirectories: a handle cannot name anything but a
// group below this host's cgroup mounts.
func TestOpenRefusesForeignDirectories(t *testing.T) {
	h, err := cgroup.Probe()
	if err != nil {
		t.Fatal(err)
	}
	if h.Version() == "" {
		testenv.Missing(t, "no cgroups mounted")
	}
	for _, hd := range []cgroup.Handle{
		{},
		{V2: "/tmp"},
		{V2: "/sys/fs/cgroup/../../etc"},
		{V2: "relative"},
		{V1: map[string]string{"cpu": "/sys/fs/cgroup/cpu/x"}},
		{V1: map[string]string{"pids": "/etc"}},
		{V1: map[string]string{"pids": "/sys/fs/cgroup/pids"}}, // the root itself
	} {
		if _, err := h.Open(hd); err == nil {
			t.Errorf("Open(%+v) accepted", hd)
		}
	}
}

func TestOptionsChecked(t *testing.T) {
	h := cgroup.ParseHostForTest(nil, nil)
	for _, o := range []cgroup.Options{
		{Name: ""}, {Name: "a/b"}, {Name: ".."}, {Name: "x", Parent: "rel"},
		{Name: "x", Limits: cgroup.Limits{Processes: -1}},
	} {
		if _, err := h.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	g, err := h.New(cgroup.Options{Name: "x", Limits: cgroup.Limits{Processes: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if r := g.Report(); r.State != cgroup.Off || r.Reason == "" {
		t.Errorf("no cgroups: report %+v", r)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStartBornInTheGroup: Start puts the child in every hierarchy of the
// group from its first instruction, leaves no thread of the caller behind
// in the group, and still works after the group was killed (where a clone
// into the cgroup would be SIGKILLed by the kernel at once).
func TestStartBornInTheGroup(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			h := requireCgroups(t, !l.noV2)
			g := newGroup(t, h, l, cgroup.Limits{Processes: 64, MemoryBytes: 256 << 20})
			dirs := g.Handle()
			// Round 2: the group was killed. Round 3: the same directories
			// through a Group that does not know it (Open), so that the
			// clone is tried, killed by the kernel, and retried.
			starters := []*cgroup.Group{g, g, nil}
			for round := 0; round < 3; round++ {
				c := child("sleep")
				start := starters[round]
				if start == nil {
					var err error
					if start, err = h.Open(dirs); err != nil {
						t.Fatal(err)
					}
				}
				if err := start.Start(c); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				pid := c.Process.Pid
				if !testenv.Alive(pid) {
					_ = c.Wait()
					t.Fatalf("round %d: the child is dead at once (%v)", round, c.ProcessState)
				}
				for _, d := range append([]string{dirs.V2}, values(dirs.V1)...) {
					if d == "" {
						continue
					}
					b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Contains(strings.Fields(string(b)), strconv.Itoa(pid)) {
						t.Errorf("round %d: child %d not in %s", round, pid, d)
					}
					if slices.Contains(strings.Fields(string(b)), strconv.Itoa(os.Getpid())) {
						t.Errorf("round %d: a thread of the test stayed in %s", round, d)
					}
				}
				if err := g.Kill(10 * time.Second); err != nil {
					t.Fatal(err)
				}
				_ = c.Wait()
			}
		})
	}
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestSweepRemovesAbandonedGroupsOnly: making a group removes the empty
// groups with the same prefix that no live launcher holds, and nothing else.
func TestSweepRemovesAbandonedGroupsOnly(t *testing.T) {
	h := requireCgroups(t, true)
	defer cgroup.SetStaleAgeForTest(0)()
	prefix := fmt.Sprintf("mcpwarden-sweep-%d-", os.Getpid())
	mk := func(n string, memory int64) *cgroup.Group {
		g, err := h.New(cgroup.Options{Name: prefix + n, Limits: cgroup.Limits{Processes: 10, MemoryBytes: memory}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Remove(10 * time.Second) })
		return g
	}
	// The abandoned run had a memory limit, the sweeping one has none: on a
	// hybrid host the abandoned run's v1 memory directory must go too.
	dead := mk("dead", 64<<20)
	live := mk("live", 0)
	busy := mk("busy", 0)
	busy.AbandonForTest() // abandoned, but a member still runs in it
	c := child("sleep")
	startIn(t, busy, c)
	dead.AbandonForTest()
	g, err := h.New(cgroup.Options{Name: prefix + "sweeper", Stale: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Remove(10 * time.Second) })
	exists := func(hd cgroup.Handle) bool {
		_, err := os.Stat(hd.V2)
		return err == nil
	}
	if exists(dead.Handle()) {
		t.Error("the abandoned empty group was not removed")
	}
	for _, d := range values(dead.Handle().V1) {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("its v1 directory %s was not removed", d)
		}
	}
	if !exists(live.Handle()) {
		t.Error("a live launcher's group was removed")
	}
	if !exists(busy.Handle()) {
		t.Error("a group with a running member was removed")
	}
}
