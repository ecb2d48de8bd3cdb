// Package explain is `mcpwarden why RUN_ID`: for the operator on the host,
// who holds the path-hash key, it reads one run's events back, turns the
// keyed path hashes of its denials and findings back into paths where it
// can (hashing candidate paths: the scope's trees, the runtime profile,
// common system paths, the run's own /proc entries, and any the operator
// names) and says, for each, which scope field or run flag would grant it.
// The records themselves stay hashed: the paths exist only in this report.
package explain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Source reads one run's events: the local stream (StreamSource) or the
// fleet store (StoreSource).
type Source interface {
	// RunEvents returns every event of the run it holds, and names where
	// they came from for the report.
	RunEvents(ctx context.Context, runID string) ([]schema.Event, error)
	Name() string
}

// Config is one explanation.
type Config struct {
	RunID  string
	Source Source
	// Hasher holds the deployment's path key: without the key no hash can
	// be turned back into a path.
	Hasher *schema.PathHasher
	// Scope is the run's scope, when the operator gives it (it must hash to
	// the run's scope_hash): its trees are candidates, and only with it can
	// the report tell whether the scope grants a path.
	Scope *schema.CanonicalScope
	// ScopeRecord and Base, when Scope is nil, are the scope file the
	// operator gives and its --base: canonicalised as of the run's start
	// (an expired scope still explains the run it governed).
	ScopeRecord *schema.Scope
	Base        string
	// Profile is the runtime profile of the server's command, when known;
	// else Command (the server's command line) is resolved, else the
	// executable the launch record names, looked up on PATH.
	Profile *runtimeprofile.Profile
	Command []string
	// Paths are extra candidate paths the operator names.
	Paths []string
	// MaxCandidates bounds the paths hashed (default 1,000,000).
	MaxCandidates int
	Logger        *slog.Logger
}

// Report is the explanation of one run.
type Report struct {
	RunID         string `json:"run_id"`
	Host          string `json:"host"`
	ScopeID       string `json:"scope_id"`
	ScopeHash     string `json:"scope_hash"`
	Mode          string `json:"mode,omitempty"`
	Server        string `json:"server,omitempty"`
	ServerVersion string `json:"server_version,omitempty"`
	ProtocolEra   string `json:"protocol_era,omitempty"`
	Source        string `json:"source"`
	Events        int    `json:"events"`
	// Candidates is how many paths were hashed; Resolved and Unresolved
	// count the distinct path hashes of the items.
	Candidates int    `json:"candidates"`
	Resolved   int    `json:"resolved"`
	Unresolved int    `json:"unresolved"`
	Items      []Item `json:"items"`
}

// Item is one denial or finding (identical ones counted together).
type Item struct {
	// Kind is "finding" or "denial" (the proxy's).
	Kind string `json:"kind"`
	// What: the finding's type, severity and reason, or the denial's error
	// code and tool.
	What     string `json:"what"`
	Tool     string `json:"tool,omitempty"`
	Access   string `json:"access,omitempty"` // read, write, create, execute
	Class    string `json:"class,omitempty"`  // the path class the daemon gave it
	PathHash string `json:"path_hash,omitempty"`
	// Path is the path the hash stands for, when a candidate matched.
	Path string `json:"path,omitempty"`
	// Process is the comm and pid of the process, when the evidence names one.
	Process string `json:"process,omitempty"`
	// Grant says what would allow it (a scope field or a flag), or why
	// nothing should.
	Grant   string `json:"grant"`
	Count   int    `json:"count"`
	FirstNS int64  `json:"first_ns"`
}

// ErrNoSuchRun: the source holds no event of the run.
var ErrNoSuchRun = errors.New("no events of this run")

// Run builds the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Hasher == nil {
		return nil, errors.New("why: no path key: the paths can only be told by the key they were hashed with (STATE_DIR/path.key, root-only)")
	}
	if !schema.IsToken(cfg.RunID) {
		return nil, fmt.Errorf("why: %q is not a run id (find them with 'mcpwarden query runs' or 'mcpwarden events')", cfg.RunID)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxCandidates <= 0 {
		cfg.MaxCandidates = 1_000_000
	}
	evs, err := cfg.Source.RunEvents(ctx, cfg.RunID)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("why: run %s: %w in %s (a run older than the stream's 7 days is in ClickHouse: pass --clickhouse DSN)", cfg.RunID, ErrNoSuchRun, cfg.Source.Name())
	}
	rep := &Report{RunID: cfg.RunID, Source: cfg.Source.Name(), Events: len(evs)}
	exe, started := describe(rep, evs)
	if cfg.Scope == nil && cfg.ScopeRecord != nil {
		if cfg.Scope, err = schema.Canonicalize(cfg.ScopeRecord, cfg.Base, started); err != nil {
			return nil, fmt.Errorf("why: the scope given: %w", err)
		}
	}
	if cfg.Profile == nil {
		cfg.Profile = profileOf(cfg.Command, exe, cfg.Logger)
	}
	if cfg.Scope != nil && rep.ScopeHash != "" && cfg.Scope.Hash != rep.ScopeHash {
		return nil, fmt.Errorf("why: the scope given is not the run's: it hashes to %s, the run ran under %s; pass the scope file and --base the run used", cfg.Scope.Hash, rep.ScopeHash)
	}
	r := &run{cfg: cfg, evs: evs, byID: map[string]*schema.Event{}, pids: map[int]bool{}}
	for i := range evs {
		e := &evs[i]
		r.byID[e.EventID] = e
		if e.FileOp != nil && e.FileOp.PID > 0 {
			r.pids[e.FileOp.PID] = true
		}
	}
	r.items()
	targets := map[schema.PathHash]bool{}
	for _, it := range r.out {
		if it.PathHash != "" {
			targets[schema.PathHash(it.PathHash)] = true
		}
	}
	found, n := resolve(targets, candidates(cfg, r.pids), cfg.Hasher, cfg.MaxCandidates)
	rep.Candidates = n
	for i := range r.out {
		it := &r.out[i]
		if it.PathHash == "" {
			continue
		}
		it.Path = found[schema.PathHash(it.PathHash)]
		if it.Grant == "" {
			it.Grant = r.grant(it, n)
		}
	}
	rep.Resolved, rep.Unresolved = 0, 0
	for h := range targets {
		if found[h] != "" {
			rep.Resolved++
		} else {
			rep.Unresolved++
		}
	}
	rep.Items = collapse(r.out)
	return rep, nil
}

// describe fills the run's envelope facts from its events, and returns the
// server's executable and when the run started.
func describe(rep *Report, evs []schema.Event) (exe string, started time.Time) {
	first := int64(math.MaxInt64)
	for i := range evs {
		e := &evs[i]
		if rep.Host == "" {
			rep.Host = e.Host
		}
		if rep.ScopeID == "" {
			rep.ScopeID = e.ScopeID
		}
		if rep.ScopeHash == "" {
			rep.ScopeHash = e.ScopeHash
		}
		if l := e.Launch; l != nil {
			if rep.Mode == "" {
				rep.Mode = string(l.Mode)
			}
			if l.ServerName != "" {
				rep.Server, rep.ServerVersion, rep.ProtocolEra = l.ServerName, l.ServerVersion, l.ProtocolEra
			} else if rep.Server == "" {
				rep.Server = l.ServerExe
			}
			if l.ServerExe != "" {
				exe = l.ServerExe
			}
			if l.Phase == schema.PhaseStart {
				first = min(first, e.TimeNS)
			}
		}
	}
	if first == math.MaxInt64 {
		for i := range evs {
			first = min(first, evs[i].TimeNS)
		}
	}
	return exe, time.Unix(0, first)
}

// profileOf resolves the runtime profile of the server's command, or of
// the executable the launch record names (its base name, looked up on
// PATH); nil when neither resolves.
func profileOf(command []string, exe string, log *slog.Logger) *runtimeprofile.Profile {
	if len(command) == 0 && exe == "" {
		return nil
	}
	if len(command) == 0 {
		command = []string{exe}
	}
	p, err := runtimeprofile.Resolve(command, runtimeprofile.Options{PATH: os.Getenv("PATH")})
	if err != nil {
		log.Debug("no runtime profile for the server's command", "err", err.Error())
		return nil
	}
	return p
}

// run is the working state of one explanation.
type run struct {
	cfg  Config
	evs  []schema.Event
	byID map[string]*schema.Event
	pids map[int]bool // the run's processes (tgids seen in its file operations)
	out  []Item
}

// items lists the run's findings (those stored, and those its events
// support: a run that no cross-check saw is explained too) and the proxy's
// denials.
func (r *run) items() {
	findings := map[string]schema.Event{}
	for _, e := range r.evs {
		if e.Finding != nil && e.Finding.Status == schema.StatusFinal {
			findings[e.EventID] = e
		}
	}
	for _, f := range crosscheck.Check(r.evs, crosscheck.Config{}, time.Unix(0, math.MaxInt64)) {
		findings[f.EventID] = f
	}
	for _, f := range findings {
		r.out = append(r.out, r.finding(&f))
	}
	for i := range r.evs {
		e := &r.evs[i]
		d := e.Decision
		if d == nil || d.Decision != schema.OutcomeDeny {
			continue
		}
		what := "proxy denial " + d.ErrorCode
		it := Item{Kind: "denial", What: what, Tool: d.Tool, Access: string(d.ActionClass), FirstNS: e.TimeNS, Count: 1}
		if len(d.PathHashes) == 0 {
			it.Grant = denialGrant(schema.ErrorCode(d.ErrorCode), d.Tool, "", r.cfg.Scope)
			r.out = append(r.out, it)
			continue
		}
		for _, h := range d.PathHashes {
			p := it
			p.PathHash = string(h)
			r.out = append(r.out, p)
		}
	}
}

// finding turns a finding into an item, with what its evidence tells: the
// access and the process.
func (r *run) finding(f *schema.Event) Item {
	ff := f.Finding
	it := Item{Kind: "finding", What: fmt.Sprintf("%s %s %s", ff.Type, ff.Severity, ff.Reason), Tool: ff.Tool,
		Class: string(ff.PathClass), PathHash: string(ff.PathHash), FirstNS: f.TimeNS, Count: 1}
	for _, id := range ff.EvidenceIDs {
		e := r.byID[id]
		switch {
		case e == nil:
		case e.FileOp != nil:
			it.Access = string(e.FileOp.FlagsClass)
			it.Process = fmt.Sprintf("%s, pid %d", e.FileOp.Comm, e.FileOp.PID)
		case e.LandlockDenial != nil && it.Access == "":
			it.Access = blockedAccess(e.LandlockDenial.Blockers)
		}
	}
	if ff.PathHash == "" {
		it.Grant = gapGrant(ff)
	}
	return it
}

// blockedAccess maps Landlock's blockers to the access refused.
func blockedAccess(blockers []string) string {
	for _, b := range blockers {
		switch b {
		case "fs.write_file", "fs.truncate", "fs.remove_file", "fs.remove_dir", "fs.refer":
			return string(schema.OpWrite)
		case "fs.make_reg", "fs.make_dir", "fs.make_sym", "fs.make_sock", "fs.make_fifo", "fs.make_char", "fs.make_block":
			return string(schema.OpCreate)
		case "fs.execute":
			return "execute"
		}
	}
	return string(schema.OpRead)
}

// collapse counts identical items once, in time order.
func collapse(items []Item) []Item {
	type key struct{ kind, what, tool, hash, access string }
	idx := map[key]int{}
	var out []Item
	sort.SliceStable(items, func(i, j int) bool { return items[i].FirstNS < items[j].FirstNS })
	for _, it := range items {
		k := key{it.Kind, it.What, it.Tool, it.PathHash, it.Access}
		if i, ok := idx[k]; ok {
			out[i].Count++
			continue
		}
		idx[k] = len(out)
		out = append(out, it)
	}
	return out
}

// severityOrder sorts the report's lines for a person: findings by
// severity, then denials.
func severityOrder(items []Item) []Item {
	rank := func(it Item) int {
		for i, s := range []string{" critical ", " high ", " medium ", " low "} {
			if strings.Contains(it.What, s) {
				return i
			}
		}
		return 4
	}
	out := slices.Clone(items)
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}
