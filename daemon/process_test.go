package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/audit"
	"github.com/mcpwarden/mcpwarden/daemon/classify"
	"github.com/mcpwarden/mcpwarden/daemon/kevent"
	"github.com/mcpwarden/mcpwarden/daemon/procinfo"
	"github.com/mcpwarden/mcpwarden/daemon/runs"
	"github.com/mcpwarden/mcpwarden/schema"
)

// testProcessor is a processor of a daemon with one run (root pid 10,
// child 11) whose runtime profile holds its own /proc entries.
func testProcessor(t *testing.T) (*processor, *schema.PathHasher, uint32) {
	t.Helper()
	hasher, _ := schema.NewPathHasher(make([]byte, schema.PathKeySize))
	d, err := New(Config{Socket: "unused", Sink: &discardSink{}, Hasher: hasher, Origin: schema.Origin{Host: "h", BootID: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	slot, err := d.table.Add(&runs.Run{ID: "r1", ScopeID: "s", RootPID: 10, Policy: classify.Policy{
		Workspace: []string{"/srv/app"}, ReadOnly: true,
		Runtime: []classify.RuntimePath{{Path: "/proc/self"}, {Path: "/proc/10"}, {Path: "/proc/thread-self"}}}})
	if err != nil {
		t.Fatal(err)
	}
	d.table.Forked(slot, 10, 11)
	return newProcessor(d), hasher, slot
}

// TestProcSelfIsHashedByPid: a refused open of /proc/self/statm is hashed
// as the Landlock record names it (/proc/PID/statm), so the two halves of
// the denial pair up; two processes' own entries stay two paths.
func TestProcSelfIsHashedByPid(t *testing.T) {
	p, hasher, slot := testProcessor(t)
	for _, tc := range []struct {
		tgid, tid     uint32
		nsTGID, nsTID uint32 // in the process's own pid namespace
		path          string
		want          string
		class         schema.PathClass
	}{
		{10, 10, 10, 10, "/proc/self/statm", "/proc/10/statm", schema.PathRuntime},
		{11, 11, 11, 11, "/proc/self/statm", "/proc/11/statm", schema.PathRuntime}, // the run's own child: its own entry
		{10, 12, 10, 12, "/proc/thread-self/stat", "/proc/10/task/12/stat", schema.PathRuntime},
		{11, 11, 11, 11, "/proc/10/statm", "/proc/10/statm", schema.PathRuntime},
		{11, 11, 11, 11, "/proc/1/environ", "/proc/1/environ", schema.PathOutside},
		// In a pid namespace of its own (host pid 11, pid 3 there): its
		// /proc and Landlock name it 3; its own entry walked back from a
		// descriptor is its /proc/self; its neighbour's is not.
		{11, 11, 3, 3, "/proc/self/statm", "/proc/3/statm", schema.PathRuntime},
		{11, 11, 3, 3, "/proc/3/maps", "/proc/3/maps", schema.PathRuntime},
		{11, 11, 3, 3, "/proc/4/maps", "/proc/4/maps", schema.PathOutside},
		{11, 11, 3, 3, "/proc/11/maps", "/proc/11/maps", schema.PathOutside}, // its host pid means another process in its /proc
	} {
		p.batch = nil
		p.record(&kevent.Record{KtimeNS: 1, TGID: tc.tgid, PID: tc.tid, NSTGID: tc.nsTGID, NSPID: tc.nsTID, Slot: slot, Op: kevent.OpOpenat, Ret: -13, Comm: "node", Path1: tc.path, Path1OK: true})
		if len(p.batch) != 1 {
			t.Fatalf("%s: %d events", tc.path, len(p.batch))
		}
		f := p.batch[0].FileOp
		if f.PathHash != hasher.Hash(tc.want) || f.PathClass != tc.class {
			t.Errorf("%s of pid %d: hash of %q? %v, class %s, want %s", tc.path, tc.tgid, tc.want, f.PathHash == hasher.Hash(tc.want), f.PathClass, tc.class)
		}
	}
}

// TestOtherProgramsDomainsStayOut: denials in a Landlock domain another
// program created are dropped, the first ones (logged before the domain
// record) and every later one; a run's domain maps to the run; a domain
// the daemon never saw created is sent without a run.
func TestOtherProgramsDomainsStayOut(t *testing.T) {
	p, _, _ := testProcessor(t)
	now := time.Now()
	access := func(domain string) audit.LandlockAccess {
		return audit.LandlockAccess{TimeMS: now.UnixMilli(), Domain: domain, Blockers: []string{"fs.read_file"}, Path: "/etc/shadow"}
	}
	p.landlock(access("f00"), now) // logged before its domain record
	p.landlock(audit.LandlockDomain{Domain: "f00", Status: "allocated", PID: 999}, now)
	p.landlock(access("f00"), now.Add(time.Second))
	p.landlock(access("a11"), now)
	p.landlock(audit.LandlockDomain{Domain: "a11", Status: "allocated", PID: 11}, now)
	p.landlock(access("a11"), now)
	p.landlock(access("0dd"), now) // its domain predates the daemon
	p.expirePending(now.Add(time.Minute))
	var ours, runless int
	for _, e := range p.batch {
		switch {
		case e.LandlockDenial == nil:
			t.Fatalf("unexpected %s", e.Kind)
		case e.LandlockDenial.Domain == "f00":
			t.Fatalf("another program's denial was sent: %+v", e)
		case e.LandlockDenial.Domain == "a11" && e.RunID == "r1":
			ours++
		case e.LandlockDenial.Domain == "0dd" && e.RunID == "":
			runless++
		default:
			t.Fatalf("unexpected %+v", e)
		}
	}
	if ours != 2 || runless != 1 {
		t.Fatalf("%d denials of the run, %d without a run; want 2 and 1", ours, runless)
	}
}

// TestLandlockRecordsOfTheCreatorsOwnProc: a Landlock record names the
// /proc entries of the domain's creator (the server) by the pid its own
// /proc gives it; they are classified as its /proc/self, like the probes'
// events of the same paths, and keep the record's path as their hash.
// Another process's entry stays outside, and so does every /proc entry
// of a domain whose creator was gone before the daemon could read its pid.
func TestLandlockRecordsOfTheCreatorsOwnProc(t *testing.T) {
	p, hasher, slot := testProcessor(t)
	now := time.Now()
	self := uint32(os.Getpid())
	p.d.table.Forked(slot, 11, self)
	own, err := procinfo.Of(int(self), nil)
	if err != nil {
		t.Fatal(err)
	}
	ownPID := strconv.Itoa(own.OwnPID)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	p.d.table.Forked(slot, 11, uint32(gone.Process.Pid))
	p.landlock(audit.LandlockDomain{Domain: "c1", Status: "allocated", PID: int(self)}, now)
	p.landlock(audit.LandlockDomain{Domain: "c2", Status: "allocated", PID: gone.Process.Pid}, now)
	if got := p.d.table.DomainCreator("c1"); got != uint32(own.OwnPID) {
		t.Fatalf("creator of c1: %d, want %d", got, own.OwnPID)
	}
	// Creators in pid namespaces of their own, known from their records
	// (host pids no process here has): read before the domain record
	// (c3), or only after it (c4, found at the domain's next denial).
	const host3, host4 = 1<<22 - 3, 1<<22 - 4
	p.d.table.Forked(slot, 11, host3)
	p.d.table.Forked(slot, 11, host4)
	p.record(&kevent.Record{KtimeNS: 1, TGID: host3, PID: host3, NSTGID: 3, NSPID: 3, Slot: slot, Op: kevent.OpOpenat, Ret: 3, Comm: "node", Path1: "/srv/app/x", Path1OK: true})
	p.landlock(audit.LandlockDomain{Domain: "c3", Status: "allocated", PID: host3}, now)
	p.landlock(audit.LandlockDomain{Domain: "c4", Status: "allocated", PID: host4}, now)
	p.record(&kevent.Record{KtimeNS: 1, TGID: host4, PID: host4, NSTGID: 4, NSPID: 4, Slot: slot, Op: kevent.OpOpenat, Ret: 3, Comm: "node", Path1: "/srv/app/x", Path1OK: true})
	for _, tc := range []struct {
		domain, path string
		class        schema.PathClass
	}{
		{"c1", "/proc/" + ownPID + "/comm", schema.PathRuntime},
		{"c1", "/proc/" + ownPID + "/task/" + ownPID + "/stat", schema.PathRuntime},
		{"c1", "/proc/" + ownPID, schema.PathRuntime},
		{"c1", "/proc/" + strconv.Itoa(own.OwnPID+1) + "/comm", schema.PathOutside},
		{"c1", "/proc/1/environ", schema.PathOutside},
		{"c1", "/etc/hostname", schema.PathOutside},
		{"c2", "/proc/" + strconv.Itoa(gone.Process.Pid) + "/comm", schema.PathOutside},
		{"c3", "/proc/3/statm", schema.PathRuntime},
		{"c3", "/proc/4/statm", schema.PathOutside},
		{"c4", "/proc/4/statm", schema.PathRuntime},
		{"c4", "/proc/3/statm", schema.PathOutside},
	} {
		p.batch = nil
		p.landlock(audit.LandlockAccess{TimeMS: now.UnixMilli(), Domain: tc.domain, Blockers: []string{"fs.write_file"}, Path: tc.path}, now)
		if len(p.batch) != 1 || p.batch[0].LandlockDenial == nil {
			t.Fatalf("%s: %d events", tc.path, len(p.batch))
		}
		ld := p.batch[0].LandlockDenial
		if ld.PathClass != tc.class || ld.PathHash != hasher.Hash(tc.path) || p.batch[0].RunID != "r1" {
			t.Errorf("%s in %s: class %s (want %s), hash of the record's path %v", tc.path, tc.domain, ld.PathClass, tc.class, ld.PathHash == hasher.Hash(tc.path))
		}
	}
}

// TestForeignDenialsTakeNoPlaceInTheQueue: once the processor knows a
// Landlock domain is another program's, the audit reader drops its denials
// before the queue. A flood from any Landlock user on the host (here
// 10,000 denials, the queue holds 4,096 and nobody drains it) leaves the
// queue empty and counts no drop, so the runs' own records still get in;
// a run's denials still fill the queue and count the overflow. Before, the
// flood filled the queue, counted 5,904 drops, and every live run got an
// events_dropped gap (seen in CI: another test's flood).
func TestForeignDenialsTakeNoPlaceInTheQueue(t *testing.T) {
	p, _, _ := testProcessor(t)
	d := p.d
	now := time.Now()
	access := func(domain string) audit.LandlockAccess {
		return audit.LandlockAccess{TimeMS: now.UnixMilli(), Domain: domain, Blockers: []string{"fs.read_file"}, Path: "/etc/shadow"}
	}
	p.landlock(audit.LandlockDomain{Domain: "f00", Status: "allocated", PID: 999}, now)
	p.landlock(audit.LandlockDomain{Domain: "a11", Status: "allocated", PID: 11}, now)
	for range 10_000 {
		d.offerAudit(access("f00"))
	}
	if n, drops := len(d.ll), d.auditDrops.Load(); n != 0 || drops != 0 {
		t.Fatalf("another program's flood: %d records queued, %d drops; want none", n, drops)
	}
	for range cap(d.ll) + 10 {
		d.offerAudit(access("a11"))
	}
	if n, drops := len(d.ll), d.auditDrops.Load(); n != cap(d.ll) || drops != 10 {
		t.Fatalf("the run's own denials: %d queued, %d drops; want %d and 10", n, drops, cap(d.ll))
	}
	// The foreign set is bounded: past maxForeign domains it starts again,
	// and the reader's copy with it.
	for i := range maxForeign {
		p.landlock(audit.LandlockDomain{Domain: fmt.Sprintf("b%d", i), Status: "allocated", PID: 999}, now)
	}
	n := 0
	d.foreignDomains.Range(func(any, any) bool { n++; return true })
	if n != len(p.foreign) || n > maxForeign {
		t.Fatalf("the reader's foreign set has %d domains, the processor's %d (bound %d)", n, len(p.foreign), maxForeign)
	}
}
