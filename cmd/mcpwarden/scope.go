package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/internal/runcmd"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/cgroup"
	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox/seccomp"
	"github.com/mcpwarden/mcpwarden/schema"
)

const scopeUsage = `usage: mcpwarden scope check FILE [--base DIR] [--json] [-- CMD [ARGS...]]

Validates the scope record FILE against the approved base DIR (default: the
current directory) and prints the canonical scope, its scope_hash and the
Landlock ruleset it yields. With "-- CMD ARGS", the runtime profile of that
server command is resolved and shown too, as 'mcpwarden run' would grant it.

Exit status: 0 valid; 65 scope refused; 69 this kernel cannot enforce it
strictly; 64 usage.
`

func cmdScope(ctx context.Context, args []string) int {
	if code, ok := cli.Subcommand("scope", "check", scopeUsage, args); !ok {
		return code
	}
	fs := cli.NewFlags("scope check", scopeUsage)
	base := fs.String("base", ".", "approved base `DIR` the scope's paths are relative to")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	var allowRuntime, allowExec cli.StringList
	fs.Var(&allowRuntime, "allow-runtime", "extra read-only runtime `PATH`, as for run (repeatable)")
	fs.Var(&allowExec, "allow-exec", "a helper `PROGRAM` the server spawns, as for run (repeatable)")
	lim := runcmd.AddLimitFlags(fs.FlagSet)
	requireNS := fs.Bool("require-namespaces", false, "as for run: exit 69 when the server's namespaces cannot be made here")
	noNS := fs.Bool("no-namespaces", false, "as for run: without the server's namespaces")
	owner := fs.String("owner", "", "as for run: `USER[:GROUP]` owning the files the server creates")
	var unmask cli.StringList
	fs.Var(&unmask, "unmask", "as for run: a secret `PATTERN` left visible to the server (repeatable)")
	secretWalkLimit := fs.Int("secret-walk-limit", launcher.DefaultSecretWalkLimit, "as for run: most `ENTRIES` of the scope read looking for secrets")
	pos, command, err := cli.ParseInterspersed(fs.FlagSet, args[1:])
	if err != nil {
		return fs.Exit(err)
	}
	if len(pos) != 1 {
		return fs.UsageError("give exactly one scope FILE")
	}
	scope, err := runcmd.LoadScope(pos[0], *base)
	if err != nil {
		return cli.Fail(cli.ExitBadScope, err)
	}
	report, code, err := buildScopeReport(scope, command, allowRuntime, allowExec)
	if err != nil {
		return cli.Fail(code, err)
	}
	if c, err := report.addLimits(scope, lim); err != nil {
		return cli.Fail(c, err)
	} else if code == cli.ExitOK {
		code = c
	}
	if c, err := report.addLayers(launcher.Config{Scope: scope, RequireNamespaces: *requireNS, NoNamespaces: *noNS, Owner: *owner, Unmask: unmask, SecretWalkLimit: *secretWalkLimit}); err != nil {
		return cli.Fail(c, err)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return cli.Fail(cli.ExitInternal, err)
		}
	} else {
		report.writeText(os.Stdout)
	}
	return code
}

type scopeReport struct {
	Scope     *schema.CanonicalScope `json:"scope"`
	ScopeHash string                 `json:"scope_hash"`
	NotAfter  time.Time              `json:"not_after"`
	Kernel    kernelReport           `json:"kernel"`
	Ruleset   rulesetReport          `json:"ruleset"`
	Seccomp   seccompReport          `json:"seccomp"`
	Limits    limitsReport           `json:"limits"`
	// Layers are the fence's layers as a run of this scope would get them
	// here, as its launch records would carry them (docs/events.md).
	Layers []schema.Layer `json:"layers"`
}

// addLayers fills in every layer: Landlock from the kernel decision,
// seccomp from its filter, the namespaces and identity as probed here
// (namespaces made for real), the cgroup from its probe. Namespaces that
// are required and cannot be made exit 69, as the run would.
func (r *scopeReport) addLayers(cfg launcher.Config) (int, error) {
	ll := schema.Layer{Name: schema.LayerLandlock, State: schema.LayerOn, Reason: fmt.Sprintf("abi%d", r.Kernel.FenceABI)}
	if !r.Kernel.Strict {
		ll.State, ll.Reason = schema.LayerDegraded, strings.Join(r.Kernel.Missing, ",")
	}
	if r.Kernel.FenceABI == 0 {
		ll.State, ll.Reason = schema.LayerOff, "kernel_without_landlock"
	}
	sc := schema.Layer{Name: schema.LayerSeccomp, State: schema.LayerOn}
	if r.Seccomp.Error != "" {
		sc.State, sc.Reason = schema.LayerOff, "cannot_build"
	} else if !r.Ruleset.BlockIOUring {
		sc.State, sc.Reason = schema.LayerDegraded, "io_uring_allowed"
	}
	ns, err := launcher.ProbeIsolation(cfg)
	if err != nil {
		var ie *launcher.IsolationError
		switch {
		case errors.As(err, &ie):
			return cli.ExitKernel, err
		case errors.Is(err, launcher.ErrUsage):
			return cli.ExitUsage, err
		}
		return cli.ExitInternal, err
	}
	// The destination filter lives on the run's cgroup2 group: none
	// without a group (--cgroup=false, no cgroup writable here).
	cfg.NoCgroup = r.Limits.Cgroup.State == cgroup.Off
	if err := launcher.ProbeNetDest(cfg, ns); err != nil {
		return cli.ExitKernel, err
	}
	cg := schema.Layer{Name: schema.LayerCgroup, State: schema.LayerState(r.Limits.Cgroup.State), Reason: r.Limits.Cgroup.Token}
	mountNS := false
	for _, l := range ns {
		if l.Name == schema.LayerMountNS && l.State != schema.LayerOff {
			mountNS = true
		}
	}
	sec, err := launcher.ProbeSecrets(cfg, mountNS)
	if err != nil {
		return cli.ExitUsage, err
	}
	r.Layers = append(append([]schema.Layer{ll, sc}, ns...), cg, sec)
	return cli.ExitOK, nil
}

// limitsReport is the lifetime and bounds layer as a run of this scope
// would get it here: the limits in force and what the cgroup probe found.
type limitsReport struct {
	MaxProcesses  int64         `json:"max_processes"`
	MaxMemoryMB   int64         `json:"max_memory_mb"`
	MaxFileSizeMB int64         `json:"max_file_size_mb"`
	Cgroup        cgroup.Report `json:"cgroup"`
	Required      bool          `json:"required"` // the run is refused when a limit cannot be enforced
}

// addLimits fills in the limits; a scope asking for more than the flags
// allow is refused (exit 65), and required limits that this host cannot
// enforce make the check exit 69, as the run would.
func (r *scopeReport) addLimits(scope *schema.CanonicalScope, f *runcmd.LimitFlags) (int, error) {
	l, err := launcher.EffectiveLimits(f.Limits(), scope)
	if err != nil {
		return cli.ExitBadScope, err
	}
	r.Limits = limitsReport{MaxProcesses: l.MaxProcesses, MaxMemoryMB: l.MaxMemoryMB, MaxFileSizeMB: l.MaxFileSizeMB}
	if *f.Cgroup {
		r.Limits.Cgroup = launcher.ProbeCgroup(l, *f.CgroupParent)
	} else {
		r.Limits.Cgroup = cgroup.Report{State: cgroup.Off, Reason: "turned off by the operator (--cgroup=false)", Token: "turned_off"}
	}
	sl := scope.Limits
	reqProcs := f.Required() || (sl != nil && sl.MaxProcesses > 0)
	reqMem := f.Required() || (sl != nil && sl.MaxMemoryMB > 0)
	r.Limits.Required = reqProcs || reqMem
	c := r.Limits.Cgroup
	if (reqProcs && l.MaxProcesses > 0 && c.Processes != l.MaxProcesses) || (reqMem && l.MaxMemoryMB > 0 && c.Memory != l.MaxMemoryMB<<20) {
		return cli.ExitKernel, nil
	}
	return cli.ExitOK, nil
}

func (r *scopeReport) writeLimits(w io.Writer) {
	l := r.Limits
	c := l.Cgroup
	limit := func(v int64, unit string) string {
		if v == 0 {
			return "none"
		}
		return fmt.Sprint(v) + unit
	}
	fmt.Fprintf(w, "\nLifetime and limits (cgroup %s", c.State)
	if c.Version != "" {
		fmt.Fprintf(w, ", %s", c.Version)
	}
	if c.Kill != "" {
		fmt.Fprintf(w, ", the run is killed whole with %s", c.Kill)
	}
	fmt.Fprintf(w, "):\n")
	enforced := func(want, got int64) string {
		if want == 0 || want == got {
			return ""
		}
		if l.Required {
			return "  NOT ENFORCEABLE HERE: the run is refused"
		}
		return "  NOT ENFORCED HERE (degraded)"
	}
	fmt.Fprintf(w, "  max processes: %s (pids.max, threads count)%s\n", limit(l.MaxProcesses, ""), enforced(l.MaxProcesses, c.Processes))
	fmt.Fprintf(w, "  max memory:    %s (swap included; the OOM killer acts inside the run)%s\n", limit(l.MaxMemoryMB, " MiB"), enforced(l.MaxMemoryMB<<20, c.Memory))
	fmt.Fprintf(w, "  max file size: %s (RLIMIT_FSIZE: EFBIG past it; also the size of the private /tmp)\n", limit(l.MaxFileSizeMB, " MiB"))
	if c.Reason != "" {
		fmt.Fprintf(w, "  degraded:      %s\n", c.Reason)
	}
	if c.State == cgroup.Off {
		fmt.Fprintf(w, "  per run:       no cgroup: the launcher kills the server's session when the run ends; if the launcher is SIGKILLed, only the server itself dies with it\n")
	} else {
		fmt.Fprintf(w, "  per run:       a cgroup of its own, killed whole when the run ends, expires, is revoked or is narrowed; a watcher kills it if the launcher dies\n")
	}
}

// seccompReport is the seccomp layer as a run of this scope would get it,
// before the namespace layers lift what they make redundant.
type seccompReport struct {
	seccomp.Summary
	Error string `json:"error,omitempty"`
}

type kernelReport struct {
	LandlockABI int      `json:"landlock_abi"`
	FenceABI    int      `json:"fence_abi"`
	Strict      bool     `json:"strict"`
	Missing     []string `json:"missing,omitempty"`
	Error       string   `json:"error,omitempty"`
}

type ruleReport struct {
	Path   string   `json:"path"`
	Kind   string   `json:"kind"`
	Access []string `json:"access"`
	Origin string   `json:"origin"`
	Reason string   `json:"reason,omitempty"`
}

type rulesetReport struct {
	HandledFS    []string     `json:"handled_fs"`
	HandledNet   []string     `json:"handled_net"`
	Scoped       []string     `json:"scoped"`
	Rules        []ruleReport `json:"rules"`
	ConnectTCP   []uint16     `json:"connect_tcp"`
	BindTCP      []uint16     `json:"bind_tcp"`
	BlockIOUring bool         `json:"block_io_uring"`
	Exe          string       `json:"server_exe,omitempty"`
	PerRun       []string     `json:"per_run"`
}

func buildScopeReport(scope *schema.CanonicalScope, command, allowRuntime, allowExec []string) (*scopeReport, int, error) {
	var prof *runtimeprofile.Profile
	if len(command) > 0 {
		env := []string{"PATH=" + os.Getenv("PATH")}
		p, err := runtimeprofile.Resolve(command, runtimeprofile.Options{
			PATH:    envOr(env, "/usr/local/bin:/usr/bin:/bin"),
			Network: len(scope.Network.ConnectTCP) > 0 || len(scope.Network.BindTCP) > 0,
			Exec:    allowExec,
		})
		if err != nil {
			return nil, cli.ExitServerStart, fmt.Errorf("runtime profile of the server command: %w", err)
		}
		prof = p
	}
	rs, err := ruleset.Derive(scope, ruleset.Input{Profile: prof, AllowRuntime: allowRuntime})
	if err != nil {
		return nil, cli.ExitServerStart, err
	}
	abi := launcher.KernelABI()
	r := &scopeReport{Scope: scope, ScopeHash: scope.Hash, NotAfter: scope.NotAfter}
	r.Kernel.LandlockABI = abi
	code := cli.ExitOK
	d, derr := ruleset.Decide(abi, false)
	if derr != nil {
		var ke *ruleset.KernelError
		if errors.As(derr, &ke) {
			for _, f := range ke.Missing {
				r.Kernel.Missing = append(r.Kernel.Missing, f.Name)
			}
		}
		r.Kernel.Error = derr.Error()
		r.Kernel.FenceABI = min(abi, ruleset.MaxABI)
		code = cli.ExitKernel
	} else {
		r.Kernel.FenceABI = d.ABI
		r.Kernel.Strict = true
	}
	fsSet, netSet, scoped := ruleset.Handled(r.Kernel.FenceABI)
	r.Ruleset.HandledFS = ruleset.RightNames(fsSet)
	r.Ruleset.HandledNet = splitSet(netSet.String())
	r.Ruleset.Scoped = splitSet(scoped.String())
	for _, rule := range rs.Sorted() {
		r.Ruleset.Rules = append(r.Ruleset.Rules, ruleReport{
			Path: rule.Path, Kind: string(rule.Kind), Access: ruleset.RightNames(rule.Access & fsSet),
			Origin: string(rule.Origin), Reason: rule.Reason,
		})
	}
	r.Ruleset.ConnectTCP = nonNil(rs.ConnectTCP)
	r.Ruleset.BindTCP = nonNil(rs.BindTCP)
	r.Ruleset.BlockIOUring = rs.BlockIOUring
	if f, err := seccomp.Build(seccomp.Native, launcher.SeccompOptions(scope, rs)); err != nil {
		r.Seccomp.Error = err.Error()
		code = cli.ExitKernel
	} else {
		r.Seccomp.Summary = f.Summary()
	}
	if prof != nil {
		r.Ruleset.Exe = prof.Exe
	} else {
		r.Ruleset.PerRun = append(r.Ruleset.PerRun, "runtime profile of the server command (give it after '--' to see it)")
	}
	r.Ruleset.PerRun = append(r.Ruleset.PerRun, "a private TMPDIR (also HOME), read-write, removed when the run ends")
	return r, code, nil
}

func nonNil(p []uint16) []uint16 {
	if p == nil {
		return []uint16{}
	}
	return p
}

func splitSet(s string) []string {
	s = strings.Trim(s, "{}")
	if s == "" || s == "∅" {
		return []string{}
	}
	return strings.Split(s, ",")
}

func envOr(env []string, def string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok && v != "" {
			return v
		}
	}
	return def
}

func (r *scopeReport) writeText(w io.Writer) {
	r.writeBody(w)
	r.writeLayers(w)
}

func (r *scopeReport) writeBody(w io.Writer) {
	s := r.Scope
	fmt.Fprintf(w, "scope OK\n")
	fmt.Fprintf(w, "  scope_id:      %s\n", s.ScopeID)
	fmt.Fprintf(w, "  scope_hash:    %s\n", r.ScopeHash)
	fmt.Fprintf(w, "  base:          %s\n", s.Base)
	fmt.Fprintf(w, "  access_mode:   %s\n", s.AccessMode)
	fmt.Fprintf(w, "  approval:      %s\n", s.Approval)
	fmt.Fprintf(w, "  tools:         %s\n", strings.Join(s.ToolAllowlist, ", "))
	fmt.Fprintf(w, "  valid until:   %s\n", r.NotAfter.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "  allowed paths:\n")
	for _, p := range s.AllowedPaths {
		fmt.Fprintf(w, "    %-4s %s\n", p.Kind, p.Path)
	}
	fmt.Fprintf(w, "\nLandlock ruleset (kernel ABI %d, built for ABI %d):\n", r.Kernel.LandlockABI, r.Kernel.FenceABI)
	if r.Kernel.Strict {
		fmt.Fprintf(w, "  kernel:        strict enforcement available\n")
	} else {
		fmt.Fprintf(w, "  kernel:        CANNOT ENFORCE STRICTLY: %s\n", r.Kernel.Error)
	}
	fmt.Fprintf(w, "  handled fs:    %s\n", strings.Join(r.Ruleset.HandledFS, ","))
	fmt.Fprintf(w, "  handled net:   %s\n", strings.Join(r.Ruleset.HandledNet, ","))
	fmt.Fprintf(w, "  scoped:        %s\n", strings.Join(r.Ruleset.Scoped, ","))
	fmt.Fprintf(w, "  tcp connect:   %s\n", ports(r.Ruleset.ConnectTCP))
	fmt.Fprintf(w, "  tcp bind:      %s\n", ports(r.Ruleset.BindTCP))
	if r.Ruleset.BlockIOUring {
		fmt.Fprintf(w, "  io_uring:      blocked (seccomp, EPERM)\n")
	} else {
		fmt.Fprintf(w, "  io_uring:      allowed (allow_io_uring): its operations pass every seccomp argument check (socket families, vsock to the hypervisor included, xattrs and ACLs, set-id bits on new files); Landlock, the namespaces and the destination filter still hold; refused without the mount namespace\n")
	}
	fmt.Fprintf(w, "  allowed (everything else handled is denied):\n")
	for _, rule := range r.Ruleset.Rules {
		fmt.Fprintf(w, "    %-8s %-4s %-40s %s\n", rule.Origin, rule.Kind, strings.Join(rule.Access, ","), rule.Path)
	}
	for _, p := range r.Ruleset.PerRun {
		fmt.Fprintf(w, "  per run:       %s\n", p)
	}
	r.writeLimits(w)
	sc := r.Seccomp
	if sc.Error != "" {
		fmt.Fprintf(w, "\nSeccomp filter: CANNOT BUILD: %s\n", sc.Error)
		return
	}
	fmt.Fprintf(w, "\nSeccomp filter (%s, %d BPF instructions):\n", sc.Arch, sc.Instructions)
	fmt.Fprintf(w, "  allowlist:     %d syscalls, %d of them with argument checks; everything else %s\n", sc.Allowed, sc.Checked, sc.Default)
	fmt.Fprintf(w, "  checks:        %s\n", strings.Join(sc.Checks, ", "))
	if len(sc.Relaxed) == 0 {
		fmt.Fprintf(w, "  relaxed:       none\n")
	}
	for _, rl := range sc.Relaxed {
		fmt.Fprintf(w, "  relaxed:       %s\n", rl)
	}
	fmt.Fprintf(w, "  per run:       the namespace layers in force lift sysv-ipc (ipc namespace), inotify (watches: mount namespace; instances: the server's own user namespace) and the PIDFD_GET_INFO refusal in the ioctl check (pid namespace)\n")
}

func ports(p []uint16) string {
	if len(p) == 0 {
		return "none (denied)"
	}
	s := make([]string, len(p))
	for i, v := range p {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ",")
}

// writeLayers lists every layer as a run of this scope would get it here.
func (r *scopeReport) writeLayers(w io.Writer) {
	fmt.Fprintf(w, "\nLayers (as a run here would get them; every launch record carries them):\n")
	for _, l := range r.Layers {
		fmt.Fprintf(w, "  %-9s %-9s %s\n", l.Name, l.State, l.Reason)
	}
}
