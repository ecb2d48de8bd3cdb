// Package learn finds out what a server needs from a scope by running it,
// and proposes it for review; it never changes a scope itself.
//
// It runs the server through the real `mcpwarden run` (the proxy off, so
// every tool shows):
//
//  1. under the fence (enforce), again and again: each time the server
//     cannot start, the launcher names the path the fence denied and the
//     flag that grants it; learn adds that grant and tries again, up to
//     MaxRounds. Then it drives initialize, tools/list and the scripted
//     session under the fence, to see which calls fail there;
//  2. in audit mode (no fence) under the daemon's kernel view, when a
//     daemon runs: the same session, then the run's file operations as the
//     daemon saw them. An operation outside the scope and the runtime
//     profile (an "escape" in audit mode) is what the fence would deny.
//     The daemon publishes paths only as keyed hashes; learn names them by
//     hashing the paths it can see on this host (the runtime's usual
//     directories, the base, the home) with the same key, locally. What it
//     cannot name is counted, never guessed.
//
// Without a daemon only step 1 runs, and the proposal says so: what the
// fence denied at start-up is learned, what a server tried and did without
// during its calls is not.
package learn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/adopt/probe"
	"github.com/mcpwarden/mcpwarden/adopt/scopegen"
	"github.com/mcpwarden/mcpwarden/schema"
)

// MaxRounds bounds the enforce runs that each add one grant.
const MaxRounds = 8

// EventSource returns the events the daemon published for a run since a
// time (the caller reads them from NATS JetStream).
type EventSource func(ctx context.Context, runID string, since time.Time) ([]schema.Event, error)

// Config is one learning session.
type Config struct {
	Mcpwarden string   // the mcpwarden binary
	Command   []string // the server's command line
	Dir       string   // its working directory
	Environ   []string
	// Base and Paths: the approved base and the allowed paths (absolute,
	// inside Base) the server is meant to have.
	Base  string
	Paths []string
	// AllowRuntime and AllowExec are grants the operator already gives.
	AllowRuntime, AllowExec []string
	Script                  []probe.Request
	StateDir                string
	PathKey                 string // the runs' --path-key (the daemon's key file)
	Timeout                 time.Duration
	// DaemonSocket is the daemon to register the audit run with; "" means
	// none (no kernel view). Events reads what it saw; Hasher is the path
	// key it hashes with.
	DaemonSocket string
	Events       EventSource
	Hasher       *schema.PathHasher
	// Home is the user's home directory (one of the roots learn names
	// paths under).
	Home string
	// Settle is how long to wait after the audit run for the daemon's
	// last events to be published (default 3 s).
	Settle time.Duration
	Stderr io.Writer // the runs' stderr (default discarded)
}

// Grant is one addition learn proposes.
type Grant struct {
	Path string `json:"path,omitempty"`
	// Flag is the command-line flag that grants it (--allow-runtime P,
	// --allow-exec PROG), or the scope field ("allowed_paths").
	Flag string `json:"flag"`
	Why  string `json:"why"`
}

// Kernel is what the daemon saw of the audit run.
type Kernel struct {
	Used     bool   `json:"used"`
	Socket   string `json:"socket,omitempty"`
	RunID    string `json:"run_id,omitempty"`
	FileOps  int    `json:"file_ops"`
	Escapes  int    `json:"outside_scope_and_profile"` // distinct paths
	Secrets  int    `json:"secret_paths"`              // distinct paths of the secret class
	Named    int    `json:"named"`                     // distinct outside paths learn could name
	Unnamed  int    `json:"unnamed"`                   // distinct outside paths it could not
	Writes   int    `json:"writes_outside,omitempty"`  // distinct outside paths written
	Note     string `json:"note,omitempty"`
	Failures int    `json:"failed_ops,omitempty"`
}

// Proposal is what learn writes for review.
type Proposal struct {
	Command []string `json:"command"`
	Base    string   `json:"base"`
	// Rounds are the enforce runs: what each was refused.
	Rounds []Round `json:"rounds"`
	// Started says the server started under the fence with the grants.
	Started bool `json:"started_under_the_fence"`
	// Runtime are --allow-runtime and --allow-exec grants; ScopePaths
	// paths inside the base the scope may need.
	Runtime    []Grant `json:"runtime_additions"`
	ScopePaths []Grant `json:"scope_paths,omitempty"`
	NeedsWrite bool    `json:"needs_write,omitempty"`
	// Scope is a starting scope with the learned paths (never written
	// anywhere but the proposal).
	Scope json.RawMessage `json:"scope,omitempty"`
	// Tools: each tool's class (mcpwarden's table) or the class its hints
	// suggest, and its path arguments.
	Tools   []scopegen.ToolNote  `json:"tools"`
	Server  string               `json:"server,omitempty"`
	Enforce []probe.ScriptResult `json:"script_under_the_fence,omitempty"`
	Audit   []probe.ScriptResult `json:"script_in_audit_mode,omitempty"`
	// Verified is the session under the fence with every proposed grant
	// (and a write scope when writes were seen).
	Verified []probe.ScriptResult `json:"script_with_the_proposal,omitempty"`
	Kernel   Kernel               `json:"kernel_view"`
	Notes    []string             `json:"notes,omitempty"`
}

// Round is one enforce run.
type Round struct {
	Grants  []string `json:"grants"`            // the flags it ran with
	Started bool     `json:"started"`           // the probe got its answers
	Denied  string   `json:"denied,omitempty"`  // the path the fence denied
	Hint    string   `json:"hint,omitempty"`    // what the launcher said grants it
	Failure string   `json:"failure,omitempty"` // another failure
}

// deniedMessage is the launcher's exit-70 message (launcher.StartError).
// Compiled on first use, like grantFlag: `mcpwarden run` links this package.
var deniedMessage = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`Denied or missing: (\S+) — ([^\n]*)`) })

// grantFlag finds the flag a hint names.
var grantFlag = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(--allow-runtime|--allow-exec) (\S+)`) })

// Learn runs the server and returns the proposal.
func Learn(ctx context.Context, c Config) (*Proposal, error) {
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = 3 * time.Second
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	p := &Proposal{Command: c.Command, Base: c.Base, Tools: []scopegen.ToolNote{}, Runtime: []Grant{}}
	tmp, err := os.MkdirTemp("", "mcpwarden-learn-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	scopeFile := filepath.Join(tmp, "learn-scope.json")
	if err := writeProbeScope(scopeFile, c.Base, c.Paths); err != nil {
		return nil, err
	}
	runtime := append([]string{}, c.AllowRuntime...)
	execs := append([]string{}, c.AllowExec...)
	var res *probe.Result
	for round := 0; round < MaxRounds; round++ {
		r := Round{Grants: grants(runtime, execs)}
		out, err := c.run(ctx, tmp, scopeFile, "enforce", runtime, execs, "off", fmt.Sprintf("enforce-%d", round))
		if err == nil {
			r.Started, res = true, out.res
			p.Rounds = append(p.Rounds, r)
			break
		}
		tail := ""
		var pe *probe.Error
		if errors.As(err, &pe) {
			tail = pe.StderrTail
		}
		m := deniedMessage().FindStringSubmatch(tail)
		if m == nil {
			r.Failure = err.Error()
			p.Rounds = append(p.Rounds, r)
			break
		}
		r.Denied, r.Hint = m[1], m[2]
		p.Rounds = append(p.Rounds, r)
		f := grantFlag().FindStringSubmatch(m[2])
		switch {
		case f != nil && f[1] == "--allow-exec" && !slices.Contains(execs, f[2]):
			execs = append(execs, f[2])
			p.Runtime = append(p.Runtime, Grant{Path: m[1], Flag: "--allow-exec " + f[2], Why: fmt.Sprintf("the fence denied running it at start-up (round %d)", round+1)})
			continue
		case f != nil && f[1] == "--allow-runtime" && !slices.Contains(runtime, f[2]):
			runtime = append(runtime, f[2])
			p.Runtime = append(p.Runtime, Grant{Path: m[1], Flag: "--allow-runtime " + f[2], Why: fmt.Sprintf("the fence denied it at start-up (round %d)", round+1)})
			continue
		case schema.IsWithin(c.Base, m[1]):
			p.ScopePaths = append(p.ScopePaths, Grant{Path: m[1], Flag: "allowed_paths", Why: fmt.Sprintf("the fence denied it at start-up (round %d): %s", round+1, m[2])})
		default:
			p.Notes = append(p.Notes, fmt.Sprintf("start-up was denied %s, and learn proposes no grant for it: %s", m[1], m[2]))
		}
		break
	}
	p.Started = res != nil
	if res != nil {
		p.Server = strings.TrimSpace(res.ServerName + " " + res.ServerVersion)
		p.Enforce = res.Script
	}

	// The audit run: the whole session without the fence, under the
	// daemon's view when there is one.
	socket := "off"
	if c.DaemonSocket != "" && c.Events != nil && c.Hasher != nil {
		socket = c.DaemonSocket
	}
	since := time.Now().Add(-time.Second)
	aud, err := c.run(ctx, tmp, scopeFile, "audit", runtime, execs, socket, "audit")
	if err != nil {
		if res == nil {
			return p, fmt.Errorf("the server did not answer even in audit mode (without the fence): %w", err)
		}
		p.Notes = append(p.Notes, "the audit run failed: "+err.Error())
	} else {
		p.Audit = aud.res.Script
		if res == nil {
			res = aud.res
			p.Server = strings.TrimSpace(res.ServerName + " " + res.ServerVersion)
		}
	}
	for i, e := range p.Enforce {
		if i < len(p.Audit) && p.Audit[i].OK && !e.OK {
			p.Notes = append(p.Notes, fmt.Sprintf("script request %d (%s) works without the fence and fails under it: %s", i+1, e.Method, e.Error))
		}
	}
	before := len(p.Runtime)
	if socket == "off" {
		p.Kernel.Note = "no daemon: only what the fence denied at start-up is learned; run 'mcpwarden daemon' (as root) to see what the server does during its calls"
	} else if aud != nil {
		p.Kernel = Kernel{Used: true, Socket: socket, RunID: aud.runID}
		if aud.runID == "" {
			p.Kernel.Note = "the audit run's id is unknown (its start record is missing), so its events cannot be read"
		} else {
			time.Sleep(c.Settle)
			evs, err := c.Events(ctx, aud.runID, since)
			if err != nil {
				p.Kernel.Note = "the daemon's events could not be read: " + err.Error()
			} else {
				c.kernelView(p, evs)
			}
		}
	}

	// With grants learned from the kernel view, run the session under the
	// fence once more with everything proposed: does it work now?
	if p.Started && len(c.Script) > 0 && (len(p.Runtime) > before || p.NeedsWrite) {
		rt, ex := append([]string{}, runtime...), append([]string{}, execs...)
		for _, g := range p.Runtime {
			if v, ok := strings.CutPrefix(g.Flag, "--allow-runtime "); ok && !slices.Contains(rt, v) {
				rt = append(rt, v)
			}
		}
		verifyScope := scopeFile
		if p.NeedsWrite {
			verifyScope = filepath.Join(tmp, "learn-scope-write.json")
			if err := writeScopeMode(verifyScope, c.Base, c.Paths, "write"); err != nil {
				return p, err
			}
		}
		if out, err := c.run(ctx, tmp, verifyScope, "enforce", rt, ex, "off", "verify"); err == nil {
			p.Verified = out.res.Script
		} else {
			p.Notes = append(p.Notes, "the run with every proposed grant failed: "+err.Error())
		}
	}

	// The tools and a starting scope with what was learned.
	if res != nil {
		in := scopegen.Input{ID: scopegen.ScopeID("learn", filepath.Base(c.Command[0]), strings.Join(c.Command, "\x00")), Base: c.Base, Paths: c.Paths, Probe: res}
		for _, g := range p.ScopePaths {
			if g.Path != "" && schema.IsWithin(c.Base, g.Path) && !slices.Contains(in.Paths, g.Path) {
				if st, err := os.Stat(g.Path); err == nil && st.IsDir() || err == nil && st.Mode().IsRegular() {
					in.Paths = append(in.Paths, g.Path)
				}
			}
		}
		if out, err := scopegen.Generate(in); err == nil {
			if p.NeedsWrite {
				out.Scope.AccessMode = schema.AccessWrite
				if b, err := scopegen.Marshal(out.Scope); err == nil {
					out.JSON = b
				}
			}
			p.Scope, p.Tools = out.JSON, out.Tools
		} else {
			p.Notes = append(p.Notes, "no starting scope: "+err.Error())
			for _, t := range res.Tools {
				p.Tools = append(p.Tools, scopegen.ToolNote{Name: t.Name, PathArgs: scopegen.PathArgs(t)})
			}
		}
	}
	return p, nil
}

func grants(runtime, execs []string) []string {
	var out []string
	for _, r := range runtime {
		out = append(out, "--allow-runtime "+r)
	}
	for _, e := range execs {
		out = append(out, "--allow-exec "+e)
	}
	return out
}

// writeProbeScope writes the scope the learning runs use: the paths
// read-only (writes are what audit mode shows), one placeholder tool (the
// proxy is off).
func writeProbeScope(path, base string, paths []string) error {
	return writeScopeMode(path, base, paths, "read")
}

func writeScopeMode(path, base string, paths []string, mode string) error {
	var rel []string
	for _, p := range paths {
		r, err := filepath.Rel(base, p)
		if err != nil || strings.HasPrefix(r, "..") {
			return fmt.Errorf("%s is not inside the base %s", p, base)
		}
		rel = append(rel, r)
	}
	if len(rel) == 0 {
		return errors.New("no allowed path: give the directories the server works on")
	}
	b, _ := json.Marshal(map[string]any{"scope_id": "learn", "allowed_paths": rel, "resource_refs": []string{}, "access_mode": mode,
		"tool_allowlist": []string{"mcpwarden-learn"}, "approval": "none", "expires_after_minutes": 60})
	return os.WriteFile(path, b, 0o600)
}

type runOut struct {
	res   *probe.Result
	runID string
}

// run starts the server once through `mcpwarden run`.
func (c *Config) run(ctx context.Context, tmp, scopeFile, mode string, runtime, execs []string, socket, name string) (*runOut, error) {
	audit := filepath.Join(tmp, name+".jsonl")
	argv := []string{c.Mcpwarden, "run", "--proxy=false", "--mode", mode, "--daemon-socket", socket, "--scope", scopeFile, "--base", c.Base, "--audit-log", audit}
	if c.StateDir != "" {
		argv = append(argv, "--state-dir", c.StateDir)
	}
	if c.PathKey != "" {
		argv = append(argv, "--path-key", c.PathKey)
	}
	for _, r := range runtime {
		argv = append(argv, "--allow-runtime", r)
	}
	for _, e := range execs {
		argv = append(argv, "--allow-exec", e)
	}
	argv = append(append(argv, "--"), c.Command...)
	res, err := probe.Run(ctx, probe.Config{Argv: argv, Env: c.Environ, Dir: c.Dir, Roots: c.Paths, Timeout: c.Timeout, Script: c.Script, Stderr: c.Stderr})
	out := &runOut{res: res, runID: runIDOf(audit)}
	if err != nil {
		return out, err
	}
	return out, nil
}

// runIDOf reads the run id from the start record of a run's audit log.
func runIDOf(auditLog string) string {
	b, err := os.ReadFile(auditLog)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		var e schema.Event
		if json.Unmarshal([]byte(line), &e) == nil && e.Launch != nil && e.RunID != "" {
			return e.RunID
		}
	}
	return ""
}

// kernelView turns the daemon's events of the audit run into grants.
func (c *Config) kernelView(p *Proposal, evs []schema.Event) {
	type seen struct {
		class schema.PathClass
		write bool
		count int
	}
	byHash := map[schema.PathHash]*seen{}
	for _, e := range evs {
		f := e.FileOp
		if f == nil {
			continue
		}
		p.Kernel.FileOps++
		write := f.FlagsClass == schema.OpWrite || f.FlagsClass == schema.OpCreate
		if f.PathClass == schema.PathWorkspace && write && f.Verdict != schema.VerdictFailed && !p.NeedsWrite {
			p.NeedsWrite = true
			p.Notes = append(p.Notes, "the server wrote inside its allowed paths: a read-only scope refuses that; the proposed scope has access_mode write (writes then wait for approval)")
		}
		if f.PathClass != schema.PathOutside && f.PathClass != schema.PathSecret {
			continue
		}
		if f.Verdict == schema.VerdictFailed {
			p.Kernel.Failures++
			continue // the file was not there, or the host refused it: nothing to grant
		}
		s := byHash[f.PathHash]
		if s == nil {
			s = &seen{class: f.PathClass}
			byHash[f.PathHash] = s
		}
		s.count++
		s.write = s.write || write
	}
	if len(byHash) == 0 {
		p.Kernel.Note = "every file the server opened in audit mode is inside the scope or its runtime profile"
		return
	}
	names, links := NameHashes(c.Hasher, c.roots(), 400_000)
	var grants []Grant
	for h, s := range byHash {
		if s.class == schema.PathSecret {
			p.Kernel.Secrets++
			continue
		}
		p.Kernel.Escapes++
		if s.write {
			p.Kernel.Writes++
		}
		path, ok := names[h]
		if !ok {
			p.Kernel.Unnamed++
			continue
		}
		p.Kernel.Named++
		why := fmt.Sprintf("opened %d time(s) in audit mode outside the scope and the runtime profile (kernel view)", s.count)
		switch {
		case schema.IsWithin(c.Base, path):
			if s.write {
				p.NeedsWrite = true
				why = strings.Replace(why, "opened", "written", 1)
			}
			p.ScopePaths = append(p.ScopePaths, Grant{Path: path, Flag: "allowed_paths", Why: why})
		case s.write:
			p.Notes = append(p.Notes, fmt.Sprintf("the server wrote %s, outside the base: a runtime grant is read-only, so under the fence that write fails; point the server elsewhere (a path in the scope) or give it a --base that holds it", path))
		case schema.DefaultSecrets.Match(path):
			p.Kernel.Secrets++
		default:
			grants = append(grants, Grant{Path: path, Flag: "--allow-runtime " + path, Why: why})
			// The kernel names the file a symlink led to; the server may
			// have opened it by the link's name, which a run with its own
			// minimal root needs too.
			for _, l := range links[path] {
				grants = append(grants, Grant{Path: l, Flag: "--allow-runtime " + l, Why: "a symlink to " + path + " the server may open it by"})
			}
		}
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].Path < grants[j].Path })
	sort.Slice(p.ScopePaths, func(i, j int) bool { return p.ScopePaths[i].Path < p.ScopePaths[j].Path })
	p.Runtime = append(p.Runtime, grants...)
	if p.Kernel.Secrets > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("the server opened %d path(s) of the secret class (keys, tokens, credentials): learn never proposes them", p.Kernel.Secrets))
	}
	if p.Kernel.Unnamed > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("%d path(s) outside the scope could not be named (the daemon sends keyed hashes; learn names only paths it finds on this host under %s)", p.Kernel.Unnamed, strings.Join(c.roots(), ", ")))
	}
}

// roots are the directories learn hashes the paths of.
func (c *Config) roots() []string {
	r := []string{"/etc", "/usr", "/opt", "/var/lib", "/run", "/dev", "/sys/kernel/mm", "/sys/devices/system/cpu", "/tmp"}
	if c.Home != "" {
		r = append(r, c.Home)
	}
	if c.Base != "" && !slices.ContainsFunc(r, func(x string) bool { return schema.IsWithin(x, c.Base) }) {
		r = append(r, c.Base)
	}
	return r
}

// NameHashes hashes every path under roots (each root itself included,
// symlinks not followed, at most limit paths) with the key: the daemon's
// hashes of those paths, named. links maps each symlink's resolved target
// to the links found.
func NameHashes(h *schema.PathHasher, roots []string, limit int) (names map[schema.PathHash]string, links map[string][]string) {
	names, links = map[schema.PathHash]string{}, map[string][]string{}
	n := 0
	for _, root := range roots {
		real, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		_ = filepath.WalkDir(real, func(p string, d os.DirEntry, err error) error {
			if n >= limit {
				return filepath.SkipAll
			}
			if err != nil {
				return nil
			}
			if d.IsDir() && p != real && (d.Name() == ".git" || d.Name() == "proc") {
				return filepath.SkipDir
			}
			if d.Type()&os.ModeSymlink != 0 {
				if t, err := filepath.EvalSymlinks(p); err == nil && !slices.Contains(links[t], p) {
					links[t] = append(links[t], p)
				}
			}
			names[h.Hash(p)] = p
			n++
			return nil
		})
	}
	return names, links
}
