package launcher

import (
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcpwarden/mcpwarden/launcher/cgroup"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/schema"
)

// helperPlan is everything spawnHelper starts the fence helper from, but
// its pipes and its cgroup: comparable, so that a helper cloned ahead of
// Run (PrepareLife) is used only when Run would have started exactly that
// helper, in exactly that group.
type helperPlan struct {
	path   string  // the fence helper; its exec stage is next to it
	dir    string  // its working directory (the server's)
	name   string  // the server's name in the marks of its stderr lines
	flags  uintptr // the namespaces it is cloned into
	userNS bool    // with a user namespace of its own (an unprivileged launcher)
}

// helperPlan is the plan of the helper Run starts for l.
func (l *Launcher) helperPlan() helperPlan { return l.helperPlanWith(l.iso) }

// helperPlanWith is helperPlan with the namespaces iso.
func (l *Launcher) helperPlanWith(iso *isolation) helperPlan {
	return helperPlan{path: l.cfg.HelperPath, dir: l.cfg.Dir, name: filepath.Base(l.cfg.Command[0]), flags: iso.flags, userNS: iso.userNS}
}

// planHelper is the plan New and Run would start cfg's helper from, made
// the same way (the helper's path and checks, the working directory, the
// namespaces of planIsolation); ok is false when cfg does not say enough
// (no command, a stderr other than the process's), or when New would
// refuse it: Run then starts its own helper, or fails, as before.
func planHelper(cfg Config) (helperPlan, bool) {
	if len(cfg.Command) == 0 || (cfg.Stderr != nil && cfg.Stderr != io.Writer(os.Stderr)) {
		return helperPlan{}, false
	}
	if cfg.Mode == "" {
		cfg.Mode = schema.ModeEnforce
	}
	if cfg.Mode != schema.ModeEnforce && cfg.Mode != schema.ModeAudit {
		return helperPlan{}, false
	}
	if cfg.HelperPath == "" {
		p, err := DefaultHelperPath()
		if err != nil {
			return helperPlan{}, false
		}
		cfg.HelperPath = p
	}
	if checkHelper(cfg.HelperPath) != nil {
		return helperPlan{}, false
	}
	if cfg.Dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return helperPlan{}, false
		}
		cfg.Dir = wd
	}
	iso, err := planIsolation(&cfg)
	if err != nil {
		return helperPlan{}, false
	}
	return helperPlan{path: cfg.HelperPath, dir: cfg.Dir, name: filepath.Base(cfg.Command[0]), flags: iso.flags, userNS: iso.userNS}, true
}

// startHelper clones the helper of plan into grp (nil: none), with its
// exec stage opened and checked as spawn does. The helper waits for its
// spec and execs nothing without it; when its spec pipe closes (the
// launcher dropped it, or died) it exits.
//
// spec is its spec pipe, made ahead (sendPlanAhead); startHelper closes
// it when no helper was started.
func startHelper(plan helperPlan, grp *cgroup.Group, spec *specPipe) (*pending, error) {
	stage, err := openExecStage(plan.path)
	if err != nil {
		spec.close()
		return nil, err
	}
	defer stage.Close()
	return spawnHelper(plan.path, stage, plan.dir, os.Stderr, plan.name, grp, &isolation{flags: plan.flags, userNS: plan.userNS}, spec)
}

// sendPlanAhead writes the run's binary plan b into the spec pipe of the
// helper PrepareLife clones, while its clone and its exec may still be
// under way, when Run will take that helper over: Run took the prepared
// group over, and the helper is planned as Run would start it (takeHelper
// gives it to Run then, if its clone succeeded). The pipe holds the plan
// until the init reads it. It reports whether the whole plan is in the
// pipe; Run's sendSpec then does not send it again. A clone that failed
// leaves the plan in a pipe nobody reads, and Run starts its own helper
// and sends it its spec, as before. A plan larger than the pipe's buffer
// waits here for the init to read it (or for the pipe's read end to close:
// a clone that failed, an init that exited).
func (p *PreparedLife) sendPlanAhead(plan helperPlan, b []byte) bool {
	if p == nil || b == nil {
		return false
	}
	<-p.specMade
	p.mu.Lock()
	sp := p.spec
	ok := sp != nil && !p.helperTaken && p.lifeTaken && p.hplan == plan
	p.mu.Unlock()
	if !ok {
		return false
	}
	if _, err := sp.w.Write(b); err != nil {
		return false
	}
	sp.sent.Store(true)
	return true
}

// takeHelper hands Run the helper PrepareLife cloned, when Run took the
// prepared group over and would start its helper from the same plan; it
// kills it otherwise, and returns nil (Run then starts its own). Only the
// first call can get it: a restart starts a new helper.
func (p *PreparedLife) takeHelper(plan helperPlan) *pending {
	if p == nil {
		return nil
	}
	<-p.helperDone
	p.mu.Lock()
	if p.helperTaken {
		p.mu.Unlock()
		return nil
	}
	p.helperTaken = true
	h := p.helper
	p.helper = nil
	ok := p.lifeTaken && p.hplan == plan
	p.mu.Unlock()
	if h != nil && !ok {
		h.kill()
		return nil
	}
	return h
}

// dropHelper kills the prepared helper unless Run took it; it waits for
// PrepareLife to have started it (or given up).
func (p *PreparedLife) dropHelper() {
	<-p.helperDone
	p.mu.Lock()
	h := p.helper
	p.helper = nil
	p.helperTaken = true
	p.mu.Unlock()
	if h != nil {
		h.kill()
	}
}

// profilePlan is everything the server's runtime profile is resolved from
// (runtimeprofile.Options and the command): comparable, so that a profile
// resolved ahead of Run (PrepareLife) is used only when Run would have
// resolved exactly that one.
type profilePlan struct {
	command string // the command's words, NUL-separated
	path    string // the PATH the server gets
	dir     string
	network bool
	exec    string // --allow-exec, NUL-separated
	cache   string
}

// newProfilePlan is the plan of cfg's runtime profile, for a server whose
// PATH is path.
func newProfilePlan(cfg *Config, path string) profilePlan {
	return profilePlan{
		command: strings.Join(cfg.Command, "\x00"),
		path:    path,
		dir:     cfg.Dir,
		network: networkGranted(cfg.Scope),
		exec:    strings.Join(cfg.AllowExec, "\x00"),
		cache:   cfg.CacheDir,
	}
}

// resolve resolves the runtime profile of p.
func (p profilePlan) resolve() (*runtimeprofile.Profile, error) {
	var exec []string
	if p.exec != "" {
		exec = strings.Split(p.exec, "\x00")
	}
	return runtimeprofile.Resolve(strings.Split(p.command, "\x00"), runtimeprofile.Options{
		PATH:        p.path,
		Dir:         p.dir,
		Network:     p.network,
		Exec:        exec,
		NativeCache: p.cache,
	})
}

// planProfile is the plan New and Run would resolve cfg's runtime profile
// from (the server's PATH from the same environment policy, the same
// working directory); ok is false when cfg does not say enough or New
// would refuse it: Run then resolves it itself, as before.
func planProfile(cfg Config) (profilePlan, bool) {
	if len(cfg.Command) == 0 || cfg.Scope == nil {
		return profilePlan{}, false
	}
	for _, w := range append(append([]string(nil), cfg.Command...), cfg.AllowExec...) {
		if strings.ContainsRune(w, 0) {
			return profilePlan{}, false
		}
	}
	if cfg.Dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return profilePlan{}, false
		}
		cfg.Dir = wd
	}
	env, _, err := serverEnv(EnvPolicy{Extra: cfg.Env, Clean: cfg.CleanEnv}, os.Environ())
	if err != nil {
		return profilePlan{}, false
	}
	return newProfilePlan(&cfg, envValue(env, "PATH")), true
}

// takeProfile hands Run the runtime profile (or the error) PrepareLife
// resolved, when it was resolved from plan; ok is false otherwise (Run
// resolves it itself). Only the first call can get it: a restart derives
// its ruleset from the profile Run kept.
func (p *PreparedLife) takeProfile(plan profilePlan) (prof *runtimeprofile.Profile, ok bool, err error) {
	if p == nil {
		return nil, false, nil
	}
	<-p.profDone
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.profTaken || !p.pok || p.pplan != plan {
		p.profTaken = true
		return nil, false, nil
	}
	p.profTaken = true
	return p.profile, true, p.profErr
}
