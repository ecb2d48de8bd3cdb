package loadgen

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Mix is what one simulated run produces, modelled on what real runs of
// the npm filesystem server through `mcpwarden run` store (docs/fleet.md,
// "The simulated host"): the launch records, the server runtime's start-up
// reads, the protocol's opening calls, tools/call decisions each followed
// by the file operations that serve it, and, in one run in DenyEvery, a
// denied call with the kernel's denial and the finding it raises. Health
// events come once per HealthEvery per host, outside any run.
type Mix struct {
	// RuntimeOps are the file operations of the server's start-up (the
	// runtime reading its modules and libraries).
	RuntimeOps int
	// Calls are the tools/call decisions of a run; OpsPerCall the
	// workspace file operations that serve each.
	Calls, OpsPerCall int
	// DenyEvery: one run in DenyEvery (0: none) also has a denied call, a
	// blocked file operation, a Landlock denial and a finding.
	DenyEvery int
	// HealthEvery is the daemon's health interval (0: no health events).
	HealthEvery time.Duration
}

// DefaultMix is the mix `mcpwarden-loadgen` and the fleet benchmark use.
// RuntimeOps is what the npm filesystem server's start-up stored in
// TestCleanRunsAreClean (347 file operations: 321 allowed, 26 that failed
// with ENOENT); Calls and OpsPerCall are assumptions (that test makes one
// call per run, which read one file).
var DefaultMix = Mix{RuntimeOps: 340, Calls: 20, OpsPerCall: 2, DenyEvery: 10, HealthEvery: 60 * time.Second}

// Validate refuses a mix that makes no sense.
func (m Mix) Validate() error {
	switch {
	case m.RuntimeOps < 0 || m.Calls < 0 || m.OpsPerCall < 0 || m.DenyEvery < 0:
		return fmt.Errorf("loadgen mix: negative count in %+v", m)
	case m.Calls > 100_000 || m.RuntimeOps > 1_000_000 || m.OpsPerCall > 10_000:
		return fmt.Errorf("loadgen mix: a run of %d runtime operations, %d calls of %d operations each is beyond what one run produces; lower them", m.RuntimeOps, m.Calls, m.OpsPerCall)
	case m.HealthEvery < 0:
		return fmt.Errorf("loadgen mix: negative health interval %s", m.HealthEvery)
	}
	return nil
}

// EventsPerRun is how many events one run of this mix produces, counting a
// denied run's extra events by their share (1/DenyEvery).
func (m Mix) EventsPerRun() float64 {
	n := float64(3 + m.RuntimeOps + 1 + m.Calls*(1+m.OpsPerCall))
	if m.DenyEvery > 0 {
		n += 4 / float64(m.DenyEvery)
	}
	return n
}

// host is one simulated host's generator: its identity, its runs and its
// path-hash key (every host has its own, as real daemons do).
type host struct {
	origin schema.Origin
	hasher *schema.PathHasher
	comm   string
	runs   int
	// spread starts the host's cycle of scopes (and of denied runs) at a
	// point of its own, from its name.
	spread uint32
}

func newHost(name string) (*host, error) {
	key := make([]byte, schema.PathKeySize)
	copy(key, name)
	h, err := schema.NewPathHasher(key)
	if err != nil {
		return nil, err
	}
	f := fnv.New32a()
	f.Write([]byte(name))
	return &host{origin: schema.Origin{Host: name, BootID: schema.NewID()[:8] + "-4a4d-4f3b-9a55-" + schema.NewID()[:12]}, hasher: h, comm: "node", spread: f.Sum32()}, nil
}

// scopes are the scopes hosts run under; a host's runs cycle through a few
// of them, as a developer's projects do.
const scopes = 20

// run is one simulated run: its envelope and the steps it emits, each a
// group of events that happen together and are published together.
type run struct {
	h                    *host
	id, scope, scopeHash string
	mix                  Mix
	denied               bool
	start                time.Time
	seq                  int
}

func (h *host) newRun(m Mix) *run {
	h.runs++
	s := int((h.spread + uint32(h.runs)) % scopes)
	return &run{
		h: h, id: schema.NewID(), mix: m,
		scope:     "scope-" + strconv.Itoa(s),
		scopeHash: fmt.Sprintf("sha256:%064x", s+1),
		// Not in step with the scopes: denied runs fall in every scope.
		denied: m.DenyEvery > 0 && (int(h.spread/scopes%uint32(m.DenyEvery))+h.runs)%m.DenyEvery == 0,
	}
}

// steps is the number of steps of the run: start-up, the opening calls,
// every call, the denied call if any, the exit.
func (r *run) steps() int {
	n := 3 + r.mix.Calls
	if r.denied {
		n++
	}
	return n
}

func (r *run) event(kind schema.Kind, now time.Time) schema.Event {
	r.seq++
	// Events of one step share the instant they are published at, a
	// nanosecond apart so that their order is kept.
	return r.h.origin.NewEvent(kind, r.id, r.scope, r.scopeHash, now.Add(time.Duration(r.seq)))
}

func (r *run) fileOp(now time.Time, class schema.PathClass, path string, access schema.OpAccess) schema.Event {
	e := r.event(schema.KindFileOp, now)
	e.FileOp = &schema.FileOp{
		Syscall: "openat", FlagsClass: access, PathHash: r.h.hasher.Hash(path), PathClass: class,
		Verdict: schema.VerdictAllowed, PID: 4000 + r.h.runs%1000, Comm: r.h.comm,
	}
	return e
}

func (r *run) decision(now time.Time, method, tool string, class schema.ActionClass, out schema.Outcome, paths ...string) schema.Event {
	e := r.event(schema.KindDecision, now)
	d := &schema.Decision{
		OpID: "op-" + strconv.Itoa(r.seq), Method: method, ProtocolEra: "legacy", ProtocolVersion: "2025-11-25",
		ServerOrigin: "stdio", Tool: tool, ActionClass: class, Decision: out, Approval: schema.ApprovalNotRequired,
		LatencyMS: 0.8, StartNS: e.TimeNS - int64(800*time.Microsecond), EndNS: e.TimeNS,
	}
	for _, p := range paths {
		d.PathHashes = append(d.PathHashes, r.h.hasher.Hash(p))
	}
	if out == schema.OutcomeDeny {
		d.ErrorCode = "scope_violation"
	}
	e.Decision = d
	return e
}

// step returns the events of step i at now.
func (r *run) step(i int, now time.Time) []schema.Event {
	m := r.mix
	launch := func(phase schema.LaunchPhase) schema.Event {
		e := r.event(schema.KindLaunch, now)
		e.Launch = &schema.Launch{Phase: phase, Mode: schema.ModeEnforce, LandlockABI: 7, ServerExe: "node",
			ProtocolEra: "legacy", RootPID: 4000 + r.h.runs%1000, ServerUID: 61000}
		return e
	}
	switch {
	case i == 0:
		r.start = now
		out := make([]schema.Event, 0, 1+m.RuntimeOps)
		out = append(out, launch(schema.PhaseStart))
		for j := 0; j < m.RuntimeOps; j++ {
			op := r.fileOp(now, schema.PathRuntime, "/usr/lib/node_modules/m"+strconv.Itoa(j)+".js", schema.OpRead)
			if j%13 == 12 { // the runtime's probes of files that are not there
				op.FileOp.Result, op.FileOp.Verdict = -2, schema.VerdictFailed
			}
			out = append(out, op)
		}
		return out
	case i == 1:
		id := launch(schema.PhaseIdentified)
		id.Launch.ServerName, id.Launch.ServerVersion = "secure-filesystem-server", "0.2.0"
		// initialize is not a decision record; tools/list is.
		return []schema.Event{id, r.decision(now, "tools/list", "", schema.ActionNone, schema.OutcomeAllow)}
	case i == r.steps()-1:
		e := launch(schema.PhaseExit)
		e.Launch.ExitReason = schema.ExitExited
		e.Launch.DurationMS = now.Sub(r.start).Milliseconds()
		return []schema.Event{e}
	case i-2 < m.Calls:
		c := i - 2
		path := "/home/dev/project/src/file-" + strconv.Itoa(c%50) + ".go"
		out := make([]schema.Event, 0, 1+m.OpsPerCall)
		out = append(out, r.decision(now, "tools/call", "read_text_file", schema.ActionRead, schema.OutcomeAllow, path))
		for j := 0; j < m.OpsPerCall; j++ {
			out = append(out, r.fileOp(now, schema.PathWorkspace, path+strconv.Itoa(j), schema.OpRead))
		}
		return out
	default: // the denied call: a path outside the scope
		path := "/home/dev/.ssh/id_ed25519"
		d := r.decision(now, "tools/call", "read_text_file", schema.ActionRead, schema.OutcomeDeny, path)
		op := r.fileOp(now, schema.PathSecret, path, schema.OpRead)
		op.FileOp.Result, op.FileOp.Verdict = -13, schema.VerdictBlockedByKernel
		ld := r.event(schema.KindLandlockDenial, now)
		ld.LandlockDenial = &schema.LandlockDenial{Domain: "fs", Blockers: []string{"fs.read_file"}, PathHash: op.FileOp.PathHash,
			PathClass: schema.PathSecret, PID: op.FileOp.PID, Comm: r.h.comm}
		f := r.event(schema.KindFinding, now)
		f.Finding = &schema.Finding{Type: schema.FindingBlockedAttempt, Severity: schema.SeverityMedium,
			EvidenceIDs: []string{d.EventID, op.EventID, ld.EventID}, Tool: "read_text_file", OpID: d.Decision.OpID,
			Reason: "outside_scope", PathHash: op.FileOp.PathHash, PathClass: schema.PathSecret}
		return []schema.Event{d, op, ld, f}
	}
}

// health is the host's health event at now.
func (h *host) health(now time.Time) schema.Event {
	e := h.origin.NewEvent(schema.KindHealth, "", "", "", now)
	e.Health = &schema.Health{Component: "daemon", Hooks: []string{"lsm_file_open", "tp_openat"}, LandlockABI: 7, AuditStream: "on"}
	return e
}
