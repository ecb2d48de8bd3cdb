// Package wrap puts `mcpwarden run` in front of every stdio server of an
// MCP client's configuration file, and takes it away again.
//
// For each stdio server it finds the directories the server is given, runs
// the server once under the fence (`mcpwarden run --proxy=false`, enforce
// mode unless told audit) to list its tools, writes a starting scope and a
// review next to it (package scopegen), and rewrites the entry's command
// and args to `mcpwarden run --scope FILE --base DIR [--env NAME]... --
// COMMAND ARGS...`. Nothing else in the file changes, byte for byte. The
// entry's original text is recorded in the state directory, so unwrap puts
// it back exactly. Servers reached by URL are left alone and listed.
package wrap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mcpwarden/mcpwarden/adopt/clientconfig"
	"github.com/mcpwarden/mcpwarden/adopt/jsonedit"
	"github.com/mcpwarden/mcpwarden/adopt/probe"
	"github.com/mcpwarden/mcpwarden/adopt/scopegen"
	"github.com/mcpwarden/mcpwarden/adopt/textdiff"
	"github.com/mcpwarden/mcpwarden/schema"
)

// Options are one wrap or unwrap.
type Options struct {
	Config string              // the client's configuration file
	Format clientconfig.Format // "" detects it
	// Mcpwarden is the absolute path of the mcpwarden binary the entries
	// will start (and the probe runs).
	Mcpwarden string
	// ScopeDir receives the scopes (0600) and reviews; StateDir the record
	// unwrap restores from (STATE_DIR/wrap/).
	ScopeDir, StateDir string
	// Base is the approved base of every wrapped server; "" picks the
	// file's project directory, else the home directory.
	Base string
	// ProbeMode is "enforce" (default) or "audit".
	ProbeMode    string
	ProbeTimeout time.Duration
	// ExpiresAfterMinutes of the starting scopes; 0: scopegen's default.
	ExpiresAfterMinutes int
	// Servers limits the wrap to these names (default every stdio server).
	Servers []string
	DryRun  bool
	// Force overwrites an existing scope file that differs.
	Force bool
	// Environ is the environment the client would start servers with
	// (default os.Environ()); Home the user's home directory.
	Environ []string
	Home    string
	// ProbeStderr receives the probed servers' stderr (default: discarded).
	ProbeStderr io.Writer
	Logger      *slog.Logger
}

// Status is what happened to one entry.
type Status string

const (
	StatusWrapped  Status = "wrapped"
	StatusAlready  Status = "already-wrapped"
	StatusRemote   Status = "remote"
	StatusFailed   Status = "failed"
	StatusSkipped  Status = "skipped" // not named by --server
	StatusRestored Status = "restored"
	StatusNotOurs  Status = "not-wrapped"
)

// EntryReport is one server's outcome.
type EntryReport struct {
	Name    string   `json:"name"`
	Status  Status   `json:"status"`
	Reason  string   `json:"reason,omitempty"`
	Scope   string   `json:"scope,omitempty"`
	Review  string   `json:"review,omitempty"`
	Base    string   `json:"base,omitempty"`
	Tools   int      `json:"tools,omitempty"`
	Unknown []string `json:"unknown_tools,omitempty"`
	URL     string   `json:"url,omitempty"`
	// Exact says unwrap restored the entry's original text byte for byte
	// (else it was rebuilt from the wrapped arguments).
	Exact bool `json:"exact,omitempty"`
}

// Report is the outcome of one wrap or unwrap.
type Report struct {
	Config  string        `json:"config"`
	Format  string        `json:"format"`
	Entries []EntryReport `json:"servers"`
	Changed bool          `json:"changed"`
	DryRun  bool          `json:"dry_run,omitempty"`
	// Diff is the change to the configuration file (unified diff).
	Diff string `json:"diff,omitempty"`
	// Record is the state file unwrap reads.
	Record string `json:"record,omitempty"`
}

// Failed reports whether a stdio server could not be wrapped.
func (r *Report) Failed() bool {
	return slices.ContainsFunc(r.Entries, func(e EntryReport) bool { return e.Status == StatusFailed })
}

// record is what wrap keeps for unwrap, per configuration file.
type record struct {
	Config  string                 `json:"config"`
	Entries map[string]recordEntry `json:"entries"`
}

type recordEntry struct {
	Original      string `json:"original"`       // the entry's text before wrap
	WrappedSHA256 string `json:"wrapped_sha256"` // of the entry's text after wrap
	Scope         string `json:"scope"`
}

// ErrConfig marks a client configuration that cannot be wrapped as it is.
var ErrConfig = errors.New("client configuration")

func (o *Options) defaults() error {
	if o.Environ == nil {
		o.Environ = os.Environ()
	}
	if o.Home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("no home directory: %w", err)
		}
		o.Home = h
	}
	if o.ProbeMode == "" {
		o.ProbeMode = "enforce"
	}
	if o.ProbeMode != "enforce" && o.ProbeMode != "audit" {
		return fmt.Errorf("probe mode %q: use enforce or audit", o.ProbeMode)
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ProbeStderr == nil {
		o.ProbeStderr = io.Discard
	}
	for _, p := range []struct{ name, v string }{{"mcpwarden binary", o.Mcpwarden}, {"scope directory", o.ScopeDir}, {"state directory", o.StateDir}} {
		if !filepath.IsAbs(p.v) {
			return fmt.Errorf("%s %q: give an absolute path", p.name, p.v)
		}
	}
	return nil
}

func (o *Options) lookupEnv(name string) (string, bool) {
	for i := len(o.Environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(o.Environ[i], "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// recordPath is the state file for a configuration (by its real path).
func recordPath(stateDir, real string) string {
	sum := sha256.Sum256([]byte(real))
	return filepath.Join(stateDir, "wrap", hex.EncodeToString(sum[:8])+".json")
}

func readRecord(path, real string) (*record, error) {
	rec := &record{Config: real, Entries: map[string]recordEntry{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("wrap record %s: %w", path, err)
	}
	if rec.Entries == nil {
		rec.Entries = map[string]recordEntry{}
	}
	return rec, nil
}

func writeRecord(path string, rec *record) error {
	if len(rec.Entries) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), 0o600, -1, -1)
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Wrap wraps the configuration's stdio servers.
func Wrap(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	c, err := clientconfig.Read(o.Config, o.Format)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	rep := &Report{Config: c.Real, Format: string(c.Format), DryRun: o.DryRun, Record: recordPath(o.StateDir, c.Real)}
	if c.Servers == nil {
		return rep, fmt.Errorf("%w: %s has no %q: nothing to wrap", ErrConfig, o.Config, c.Format.ServersKey())
	}
	for _, name := range o.Servers {
		if c.Entry(name) == nil {
			return rep, fmt.Errorf("%w: %s has no server %q", ErrConfig, o.Config, name)
		}
	}
	rec, err := readRecord(rep.Record, c.Real)
	if err != nil {
		return rep, err
	}
	var edits []jsonedit.Edit
	type pending struct {
		entry      *clientconfig.Entry
		scope      string
		scopeJSON  []byte
		reviewPath string
		review     string
		empty      string // a directory to create for a server given none
		text       string // the entry's text after the edits
	}
	var todo []pending
	for _, e := range c.Entries {
		er := EntryReport{Name: e.Name}
		switch {
		case len(o.Servers) > 0 && !slices.Contains(o.Servers, e.Name):
			er.Status = StatusSkipped
		case e.Transport == clientconfig.Remote:
			er.Status, er.URL = StatusRemote, redactURL(e.URL)
			er.Reason = "reached by URL, not started by the client: there is no process to fence"
		case e.Wrapped != nil:
			er.Status, er.Scope, er.Base = StatusAlready, e.Wrapped.Scope, e.Wrapped.Base
		default:
			p, err := o.wrapEntry(ctx, c, e, &er)
			if err != nil {
				er.Status, er.Reason = StatusFailed, err.Error()
				break
			}
			er.Status = StatusWrapped
			edits = append(edits, p.edits...)
			todo = append(todo, pending{entry: e, scope: p.scope, scopeJSON: p.scopeJSON, reviewPath: p.reviewPath, review: p.review, empty: p.empty})
		}
		rep.Entries = append(rep.Entries, er)
	}
	if len(edits) == 0 {
		return rep, nil
	}
	out, err := jsonedit.Apply(c.Doc.Src, edits)
	if err != nil {
		return rep, err
	}
	// The result must read back as the same servers, now wrapped.
	back, err := clientconfig.Parse(out, c.Path, c.Format)
	if err != nil {
		return rep, fmt.Errorf("wrap: the rewritten file does not parse (a bug): %w", err)
	}
	for i := range todo {
		be := back.Entry(todo[i].entry.Name)
		if be == nil || be.Wrapped == nil || be.Wrapped.Command != todo[i].entry.Command {
			return rep, fmt.Errorf("wrap: server %q does not read back wrapped (a bug)", todo[i].entry.Name)
		}
		todo[i].text = back.Raw(be.Node)
	}
	rep.Changed = true
	rep.Diff = textdiff.Unified(c.Path, c.Path+" (wrapped)", string(c.Doc.Src), string(out))
	if o.DryRun {
		return rep, nil
	}
	// Scopes first, then the record, then the client's file: a failure
	// leaves the file as it was, or wrapped with its record.
	for _, p := range todo {
		if p.empty != "" {
			if err := os.MkdirAll(p.empty, 0o700); err != nil {
				return rep, fmt.Errorf("create the empty workspace %s: %w", p.empty, err)
			}
		}
		if err := writeScope(p.scope, p.scopeJSON, o.Force); err != nil {
			return rep, err
		}
		if err := writeFileAtomic(p.reviewPath, []byte(p.review), 0o600, -1, -1); err != nil {
			return rep, fmt.Errorf("write review: %w", err)
		}
		rec.Entries[p.entry.Name] = recordEntry{Original: c.Raw(p.entry.Node), WrappedSHA256: sha(p.text), Scope: p.scope}
	}
	if err := writeRecord(rep.Record, rec); err != nil {
		return rep, fmt.Errorf("write the wrap record: %w", err)
	}
	if err := replaceConfig(c, out); err != nil {
		return rep, err
	}
	return rep, nil
}

// entryPlan is one entry's wrap, before anything is written.
type entryPlan struct {
	edits      []jsonedit.Edit
	scope      string
	scopeJSON  []byte
	reviewPath string
	review     string
	empty      string
}

func (o *Options) wrapEntry(ctx context.Context, c *clientconfig.Config, e *clientconfig.Entry, er *EntryReport) (*entryPlan, error) {
	vars := clientconfig.Vars{Env: o.lookupEnv, Home: o.Home, WorkspaceFolder: c.WorkspaceFolder()}
	expand := func(s string) (string, error) { return c.Format.Expand(s, vars) }
	command, err := expand(e.Command)
	if err != nil {
		return nil, fmt.Errorf("command: %w", err)
	}
	args := make([]string, len(e.Args))
	for i, a := range e.Args {
		if args[i], err = expand(a); err != nil {
			return nil, fmt.Errorf("args[%d]: %w", i, err)
		}
	}
	cwd := c.WorkspaceFolder()
	if e.Cwd != "" {
		if cwd, err = expand(e.Cwd); err != nil {
			return nil, fmt.Errorf("cwd: %w", err)
		}
	}
	base := o.Base
	if base == "" {
		base = c.WorkspaceFolder()
	}
	if base == "" {
		base = o.Home
	}
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", base, err)
	}
	if cwd == "" {
		cwd = realBase
	}
	var notes []string
	dirs, rewritten, dirNotes := scopegen.DirectoryArgs(args, o.Home, cwd)
	notes = append(notes, dirNotes...)
	var paths []string
	for _, d := range dirs {
		if d != realBase && !strings.HasPrefix(d, realBase+"/") {
			return nil, fmt.Errorf("its directory argument %s is outside the base %s: pass --base with a directory that holds it", d, realBase)
		}
		paths = append(paths, d)
	}
	id := scopegen.ScopeID("wrap", e.Name, c.Real)
	scopeFile := filepath.Join(o.ScopeDir, id+".json")
	reviewFile := filepath.Join(o.ScopeDir, id+".review.md")
	runBase, empty := realBase, ""
	if len(paths) == 0 {
		// A server given no directory gets an empty one of its own.
		empty = filepath.Join(o.ScopeDir, "empty", id)
		runBase = empty
		paths = []string{empty}
	}
	envNames, envValues, envNotes, err := o.envBlock(c, e, expand)
	if err != nil {
		return nil, err
	}
	notes = append(notes, envNotes...)

	// Probe the server under the fence with the same paths, the proxy off
	// (it would hide the tools the probe is there to list).
	tmp, err := os.MkdirTemp("", "mcpwarden-wrap-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	probeBase, probePaths := runBase, paths
	if empty != "" {
		// The empty workspace must exist for the scope to resolve; a dry
		// run writes nothing, so a temporary one stands in for it.
		if o.DryRun {
			probeBase = filepath.Join(tmp, "empty")
			probePaths = []string{probeBase}
		}
		if err := os.MkdirAll(probeBase, 0o700); err != nil {
			return nil, err
		}
	}
	res, err := o.probe(ctx, tmp, command, args, rewritten, cwd, probeBase, probePaths, envNames, envValues)
	if err != nil {
		return nil, err
	}
	out, err := scopegen.Generate(scopegen.Input{ID: id, Base: probeBase, Paths: probePaths, Probe: res, ExpiresAfterMinutes: o.ExpiresAfterMinutes})
	if err != nil {
		return nil, err
	}
	if o.ProbeMode == "audit" {
		notes = append(notes, "the probe ran in audit mode (without the fence): the server may still fail to start under it; try `mcpwarden run` by hand")
	}
	info := strings.TrimSpace(res.ServerName + " " + res.ServerVersion)
	review := scopegen.Review(scopegen.ReviewHeader{Server: e.Name, Config: c.Real, ScopeFile: scopeFile, Base: runBase,
		Command: strings.Join(append([]string{command}, args...), " "), ServerInfo: info, ProbeMode: o.ProbeMode, Home: realHome(o.Home)}, scopegen.Input{Paths: dirs}, out, notes)

	// The new command line: mcpwarden's part, then the server's own in
	// the file's own bytes (its escapes, its ${VAR}s for the client).
	lead := []string{"run", "--scope", scopeFile, "--base", runBase}
	for _, n := range envNames {
		lead = append(lead, "--env", n)
	}
	lead = append(lead, "--")
	var newArgs []string
	for _, a := range lead {
		newArgs = append(newArgs, jsonedit.Quote(a))
	}
	newArgs = append(newArgs, c.CommandRaw(e))
	for i := range e.Args {
		if r, ok := rewritten[i]; ok {
			newArgs = append(newArgs, jsonedit.Quote(r))
		} else {
			newArgs = append(newArgs, c.ArgRaw(e, i))
		}
	}
	scopeJSON := out.JSON
	if old, err := os.ReadFile(scopeFile); err == nil && !bytes.Equal(old, out.JSON) && !o.Force {
		// A scope of the same id exists (wrapped before, reviewed since):
		// it is never overwritten without --force; the entry uses it, if
		// it is still a valid scope for this base.
		sc, err := schema.ParseScope(old)
		if err == nil {
			_, err = schema.Canonicalize(sc, runBase, time.Now())
		}
		if err != nil {
			return nil, fmt.Errorf("scope %s exists, differs from the one wrap would write and is not valid for base %s (%v): fix or remove it, or pass --force", scopeFile, runBase, err)
		}
		scopeJSON = old
		er.Reason = "kept the existing scope file, which differs from the one wrap would write (reviewed since?); --force replaces it"
	}
	er.Scope, er.Review, er.Base, er.Tools, er.Unknown = scopeFile, reviewFile, runBase, len(out.Scope.ToolAllowlist), out.Unknown
	return &entryPlan{
		edits: c.SetCommand(e, jsonedit.Quote(o.Mcpwarden), newArgs),
		scope: scopeFile, scopeJSON: scopeJSON, reviewPath: reviewFile, review: review, empty: empty,
	}, nil
}

// probe runs the server once under `mcpwarden run` and lists its tools.
func (o *Options) probe(ctx context.Context, tmp, command string, args []string, rewritten map[int]string, cwd, base string, paths, envNames, envValues []string) (*probe.Result, error) {
	var rel []string
	for _, p := range paths {
		r, _ := filepath.Rel(base, p)
		rel = append(rel, r)
	}
	scope := map[string]any{"scope_id": "wrap-probe", "allowed_paths": rel, "resource_refs": []string{}, "access_mode": "read",
		"tool_allowlist": []string{"mcpwarden-probe"}, "approval": "none", "expires_after_minutes": 10}
	b, _ := json.Marshal(scope)
	scopeFile := filepath.Join(tmp, "probe-scope.json")
	if err := os.WriteFile(scopeFile, b, 0o600); err != nil {
		return nil, err
	}
	// The probe runs the server's code like any run, so it is watched like
	// any run: registered with the host's daemon as the wrapped entry will
	// be (the configuration's daemon_socket, else the default socket when a
	// daemon is there), and refused when that daemon cannot watch it. With
	// --daemon-socket off its launch records still reached NATS, and a run
	// the kernel never watched is an OBSERVATION_GAP (no_kernel_events):
	// every probe read REVIEW.
	argv := []string{o.Mcpwarden, "run", "--proxy=false", "--mode", o.ProbeMode, "--state-dir", o.StateDir,
		"--scope", scopeFile, "--base", base}
	for _, n := range envNames {
		argv = append(argv, "--env", n)
	}
	argv = append(argv, "--", command)
	for i, a := range args {
		if r, ok := rewritten[i]; ok {
			a = r
		}
		argv = append(argv, a)
	}
	env := append(append([]string{}, o.Environ...), envValues...)
	res, err := probe.Run(ctx, probe.Config{Argv: argv, Env: env, Dir: cwd, Roots: paths, Timeout: o.ProbeTimeout, Stderr: o.ProbeStderr})
	if err != nil {
		return nil, fmt.Errorf("probe under `mcpwarden run --mode %s` failed: %w", o.ProbeMode, err)
	}
	return res, nil
}

// forbiddenEnv are names the launcher sets or refuses (--env NAME fails).
var forbiddenEnv = []string{"HOME", "TMPDIR", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"}

// envBlock turns the entry's env block (and envFile) into --env NAME
// flags, so the client's variables reach the server even when the
// launcher would hold them back as credentials; it returns the expanded
// NAME=VALUE pairs for the probe.
func (o *Options) envBlock(c *clientconfig.Config, e *clientconfig.Entry, expand func(string) (string, error)) (names, values, notes []string, err error) {
	add := func(name, value, from string) {
		switch {
		case slices.Contains(forbiddenEnv, name):
			notes = append(notes, fmt.Sprintf("%s sets %s, which the launcher replaces (HOME and TMPDIR are the run's private directory) or refuses (the loader's variables): the server will not see your value", from, name))
			return
		case strings.HasPrefix(name, "MCPWARDEN_"):
			values = append(values, name+"="+value)
			notes = append(notes, fmt.Sprintf("%s sets %s: it configures mcpwarden itself and is not passed to the server", from, name))
			return
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		values = append(values, name+"="+value)
		if v := value; filepath.IsAbs(v) && !strings.Contains(v, ":") {
			if _, err := os.Stat(filepath.Dir(v)); err == nil {
				notes = append(notes, fmt.Sprintf("%s sets %s=%s, a path: if the server reads or writes it, grant it (or its directory) in allowed_paths, with access_mode write for writes, under a --base that holds it", from, name, v))
			}
		}
	}
	for _, v := range e.Env {
		if !v.Set {
			continue
		}
		val, err := expand(v.Value)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("env %s: %w", v.Name, err)
		}
		add(v.Name, val, "the env block")
	}
	if e.EnvFile != "" {
		p, err := expand(e.EnvFile)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("envFile: %w", err)
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(c.Real), p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("envFile %s: %w", p, err)
		}
		for _, kv := range parseEnvFile(b) {
			add(kv[0], kv[1], "envFile "+filepath.Base(p))
		}
		notes = append(notes, fmt.Sprintf("the variables of envFile %s are passed by name as wrap found them; a name added to the file later is held back if it looks like a credential, until added with --env", p))
	}
	return names, values, notes, nil
}

// parseEnvFile reads KEY=VALUE lines (dotenv: '#' comments, optional
// "export ", quotes around the value).
func parseEnvFile(b []byte) [][2]string {
	var out [][2]string
	for _, line := range bytes.Split(b, []byte("\n")) {
		l := strings.TrimSpace(string(line))
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		l = strings.TrimPrefix(l, "export ")
		k, v, ok := strings.Cut(l, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out = append(out, [2]string{k, v})
	}
	return out
}

// writeScope writes a scope 0600, never over a different existing one
// unless force.
func writeScope(path string, content []byte, force bool) error {
	old, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(old, content):
		return os.Chmod(path, 0o600)
	case err == nil && !force:
		return fmt.Errorf("scope %s exists and differs from the one wrap would write: review it, then remove it or pass --force", path)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return writeFileAtomic(path, content, 0o600, -1, -1)
}

// writeFileAtomic writes content to path through a temporary file in the
// same directory (created 0700 if missing), then renames it into place.
func writeFileAtomic(path string, content []byte, mode os.FileMode, uid, gid int) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".mcpwarden-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if uid >= 0 && os.Geteuid() == 0 {
		if err := f.Chown(uid, gid); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// replaceConfig writes the client's file: to its real path (a symlinked
// configuration stays a symlink), keeping its mode and owner, and only if
// nobody changed it since it was read.
func replaceConfig(c *clientconfig.Config, out []byte) error {
	now, err := os.ReadFile(c.Real)
	if err != nil {
		return err
	}
	if !bytes.Equal(now, c.Doc.Src) {
		return fmt.Errorf("%w: %s changed while wrap ran (the client rewrote it?): run wrap again", ErrConfig, c.Path)
	}
	if err := writeFileAtomic(c.Real, out, c.Mode, c.UID, c.GID); err != nil {
		return fmt.Errorf("write %s: %w", c.Real, err)
	}
	return nil
}

// realHome is h with its symlinks resolved, as the directory arguments
// are; h itself when it cannot be resolved.
func realHome(h string) string {
	if r, err := filepath.EvalSymlinks(h); err == nil {
		return r
	}
	return h
}

// redactURL keeps a remote server's URL without user info or query (where
// tokens travel).
func redactURL(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	if s := strings.Index(u, "://"); s >= 0 {
		if at := strings.LastIndex(u[s+3:], "@"); at >= 0 {
			u = u[:s+3] + u[s+3+at+1:]
		}
	}
	return u
}
