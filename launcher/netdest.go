package launcher

import (
	"fmt"

	"github.com/mcpwarden/mcpwarden/launcher/cgroup"
	"github.com/mcpwarden/mcpwarden/schema"
)

// The link-local destination filter (docs/launcher.md, "The destination
// filter"): a run whose scope grants network has the host's network, and
// Landlock checks only the port of a connect. The run's cgroup2 group then
// carries BPF programs that refuse 169.254.0.0/16, fe80::/10,
// fd00:ec2::/32 and the other clouds' metadata addresses (the list is in
// launcher/cgroup/netdest.go), so a port grant does not reach the
// instance's credentials. It is reported in the netns layer:
// degraded (the host's network, less link-local) when in force, off with
// the reason when it could not be put in place.

// Reason tokens of the netns layer for a run with a network grant.
const (
	netDestOn     = "scope_grants_network,link_local_denied"
	netDestNoV2   = "scope_grants_network,no_link_local_filter,no_cgroup2"
	netDestNoBPF  = "scope_grants_network,no_link_local_filter,bpf_refused"
	netDestHint   = "run as root on a host with cgroup v2 mounted (the filter is a BPF program on the run's cgroup2 group), or drop --require-namespaces / require_isolation to run without it"
	netDestMissed = "no_link_local_filter"
)

// needsNetDest: the run is fenced and has the host's network.
func needsNetDest(cfg *Config) bool {
	return (cfg.Mode == schema.ModeEnforce || cfg.Mode == "") && networkGranted(cfg.Scope)
}

// netDestReason is the netns layer's reason for err (nil: in force).
func netDestReason(err error, noV2 bool) string {
	switch {
	case err == nil:
		return netDestOn
	case noV2:
		return netDestNoV2
	}
	return netDestNoBPF
}

// denyLinkLocal puts the filter on the run's group when the run needs it.
// Where it cannot, the run goes on with the netns layer saying so and a
// warning, or is refused (an *IsolationError) when isolation is required.
func (l *Launcher) denyLinkLocal(lf *life) error {
	if !needsNetDest(&l.cfg) {
		return nil
	}
	err := lf.grp.DenyLinkLocal()
	noV2 := lf.grp == nil || lf.grp.Handle().V2 == ""
	l.netDest = netDestReason(err, noV2)
	if err == nil {
		return nil
	}
	if l.cfg.RequireNamespaces || l.cfg.Scope.RequireIsolation { // not allow_io_uring's requirement: that one is the mount namespace
		return &IsolationError{Missing: netDestMissed, Err: err, Hint: netDestHint}
	}
	fmt.Fprintf(l.cfg.Stderr, "mcpwarden: WARNING: the server has the host's network and may reach link-local addresses, the cloud metadata service (169.254.169.254) among them, on its granted ports: %v\n", err)
	return nil
}

// netDestLayer rewrites the netns layer of a run with a network grant.
func netDestLayer(layers []schema.Layer, reason string) {
	for i := range layers {
		if layers[i].Name != schema.LayerNetNS {
			continue
		}
		layers[i].Reason = reason
		if reason == netDestOn {
			layers[i].State = schema.LayerDegraded
		} else {
			layers[i].State = schema.LayerOff
		}
	}
}

// ProbeNetDest says, for `scope check`, what a run of cfg would get from
// the filter here: layers' netns entry is rewritten when the scope grants
// network. With isolation required and no filter possible it is an
// *IsolationError, as the run would be refused.
func ProbeNetDest(cfg Config, layers []schema.Layer) error {
	if cfg.Scope == nil || !needsNetDest(&cfg) {
		return nil
	}
	noV2 := cfg.NoCgroup
	if h, err := cgroup.Probe(); err != nil || (h.Version() != "v2" && h.Version() != "hybrid") {
		noV2 = true
	}
	err := cgroup.ProbeLinkLocal()
	if noV2 && err == nil {
		err = fmt.Errorf("%w: no cgroup2 group for the run (cgroup v2 is not mounted, or --cgroup=false)", cgroup.ErrNoNetFilter)
	}
	netDestLayer(layers, netDestReason(err, noV2))
	if err != nil && (cfg.RequireNamespaces || cfg.Scope.RequireIsolation) {
		return &IsolationError{Missing: netDestMissed, Err: err, Hint: netDestHint}
	}
	return nil
}
