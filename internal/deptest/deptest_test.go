// Package deptest pins the dependency layout of the tree: which packages
// may import which. The tree is the data flow, so a package that starts to
// depend on a stage it should not know about is a defect, caught here.
package deptest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/mcpwarden/mcpwarden"

func TestLayout(t *testing.T) {
	cases := []struct {
		pkgs      string
		forbidden []string
		why       string
	}{
		{
			pkgs:      "./launcher/...",
			forbidden: []string{"github.com/nats-io/nats-server", "github.com/ClickHouse/", "github.com/cilium/ebpf", "github.com/prometheus/", module + "/collector", module + "/daemon", module + "/crosscheck", module + "/metrics"},
			why:       "the launcher runs on every agent host and talks to the daemon over its socket; it must not link a NATS server, ClickHouse, eBPF or a metrics library",
		},
		{
			pkgs:      "./transport/...",
			forbidden: []string{"github.com/ClickHouse/", "github.com/cilium/ebpf", "github.com/prometheus/", module + "/collector", module + "/daemon", module + "/launcher", module + "/metrics"},
			why:       "the transport is shared by producers and consumers and depends on none of them",
		},
		{
			pkgs:      "./crosscheck/...",
			forbidden: []string{"github.com/ClickHouse/", "github.com/cilium/ebpf", module + "/collector", module + "/daemon", module + "/launcher"},
			why:       "the cross-check is pure logic over events",
		},
		{
			pkgs:      "./schema/...",
			forbidden: []string{module + "/collector", module + "/daemon", module + "/launcher", module + "/transport", module + "/crosscheck", module + "/internal"},
			why:       "schema holds the contracts and depends on nothing of ours",
		},
		{
			pkgs:      "./adopt/...",
			forbidden: []string{"github.com/nats-io/nats-server", "github.com/ClickHouse/", "github.com/cilium/ebpf", module + "/collector", module + "/daemon", module + "/crosscheck", module + "/launcher/sandbox"},
			why:       "adoption reads client files and drives servers through the real 'mcpwarden run'; it must not link the fence, the daemon or the fleet store",
		},
		{
			pkgs:      "./cmd/mcpwarden",
			forbidden: []string{"github.com/nats-io/", "github.com/klauspost/", "encoding/gob", "net/http", "crypto/tls", "github.com/ClickHouse/", "github.com/cilium/ebpf", module + "/collector", module + "/daemon/probes", module + "/daemon/kevent", module + "/daemon/audit", module + "/daemon/runs", module + "/daemon/xcheck", module + "/transport/natsserver", module + "/transport/stream", module + "/transport/publish", module + "/explain", module + "/cmd/mcpwarden-pipeline", "github.com/prometheus/", module + "/metrics"},
			why:       "mcpwarden starts for every server launch and pays the start-up of everything it links (the NATS client alone: ~100 packages, 1.3 ms a start); the daemon, collect, query, events, why and profile commands, and a run whose records go to NATS, are cmd/mcpwarden-pipeline's, which it execs",
		},
		{
			pkgs:      "./daemon/...",
			forbidden: []string{"github.com/ClickHouse/", module + "/collector", module + "/launcher"},
			why:       "the daemon observes the kernel and publishes through the transport; ClickHouse is the collector's",
		},
		{
			pkgs:      "./daemon/... ./collector/... ./crosscheck/... ./schema/...",
			forbidden: []string{"github.com/prometheus/", module + "/metrics"},
			why:       "components keep their own counters behind Stats(); metrics/ alone turns them into Prometheus series",
		},
	}
	for _, c := range cases {
		t.Run(c.pkgs, func(t *testing.T) {
			cmd := exec.Command("go", append([]string{"list", "-deps", "-test=false"}, strings.Fields(c.pkgs)...)...)
			cmd.Dir = "../.."
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", c.pkgs, err, out)
			}
			deps := strings.Fields(string(out))
			if len(deps) < 5 {
				t.Fatalf("go list -deps %s listed only %d packages: %q", c.pkgs, len(deps), deps)
			}
			for _, d := range deps {
				for _, f := range c.forbidden {
					if strings.HasPrefix(d, f) {
						t.Errorf("%s depends on %s: %s", c.pkgs, d, c.why)
					}
				}
			}
		})
	}
}

// TestFenceHelperLinksOnlyTheFence pins what the fence helper may link:
// the standard library, x/sys, its own package and the cgroup watcher's. It starts for every run,
// so everything it links is start-up time; and it is the last code that
// runs with the launcher's privileges before the server.
func TestFenceHelperLinksOnlyTheFence(t *testing.T) {
	allowed := []string{"golang.org/x/sys/unix", module + "/launcher/sandbox", module + "/launcher/cgroup", module + "/cmd/mcpwarden-fence"}
	cmd := exec.Command("go", "list", "-deps", "-test=false", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./cmd/mcpwarden-fence")
	cmd.Dir = "../.."
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/mcpwarden-fence: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 2 {
		t.Fatalf("go list listed only %q", deps)
	}
	for _, d := range deps {
		ok := false
		for _, a := range allowed {
			if d == a || strings.HasPrefix(d, a+"/") {
				ok = true
			}
		}
		if !ok {
			t.Errorf("cmd/mcpwarden-fence links %s: the fence helper may link only the standard library, x/sys, launcher/sandbox and launcher/cgroup (no NATS, ClickHouse, eBPF, proxy or Landlock library)", d)
		}
	}
}
