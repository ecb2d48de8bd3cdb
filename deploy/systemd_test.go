package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// units are deploy/systemd's files and the exposure systemd-analyze
// security may at most give each (0 fully sandboxed, 10 not at all).
var units = []struct {
	name        string
	maxExposure float64
}{
	{"mcpwarden-daemon.service", 2.5},
	{"mcpwarden-collector.service", 1.5},
}

// installedBin is where the units expect the binary.
const installedBin = "/usr/local/bin/mcpwarden"

// withBinary returns the unit's text with the binary path replaced by
// bin, written to dir (systemd-analyze verify checks that ExecStart's
// binary exists and is executable).
func withBinary(t *testing.T, name, bin, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), installedBin+" ") {
		t.Fatalf("%s does not run %s", name, installedBin)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), installedBin, bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSystemdUnitsVerify: systemd's own checker finds nothing to say about
// either unit, and its security analysis scores each at most its bound.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze := testenv.RequireCommand(t, "systemd-analyze")
	bin := testenv.Mcpwarden(t)
	dir := t.TempDir()
	exposure := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)
	for _, u := range units {
		t.Run(u.name, func(t *testing.T) {
			p := withBinary(t, u.name, bin, dir)
			out, err := exec.Command(analyze, "verify", p).CombinedOutput()
			if err != nil || len(strings.TrimSpace(string(out))) > 0 {
				t.Fatalf("systemd-analyze verify %s: %v\n%s", u.name, err, out)
			}
			out, err = exec.Command(analyze, "security", "--offline=yes", "--no-pager", p).CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze security: %v\n%s", err, out)
			}
			m := exposure.FindSubmatch(out)
			if m == nil {
				t.Fatalf("no exposure level in:\n%s", out)
			}
			level, _ := strconv.ParseFloat(string(m[1]), 64)
			if level > u.maxExposure {
				t.Errorf("%s: exposure %.1f, at most %.1f allowed:\n%s", u.name, level, u.maxExposure, out)
			}
			t.Logf("%s: exposure %.1f", u.name, level)
		})
	}
	// verify is not a rubber stamp: a typo in a directive is reported.
	broken := filepath.Join(dir, "broken.service")
	if err := os.WriteFile(broken, []byte("[Service]\nExecStart="+bin+" daemon\nProtectSystm=strict\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command(analyze, "verify", broken).CombinedOutput(); !strings.Contains(string(out), "ProtectSystm") {
		t.Fatalf("systemd-analyze verify let an unknown directive through: %s", out)
	}
}

// unitFile is a unit's settings by section and key (a key may repeat).
type unitFile map[string]map[string][]string

func parseUnit(t *testing.T, name string) unitFile {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), "deploy", "systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: cannot read %q", name, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// one is the single value of key, failing when it is missing or repeated.
func (u unitFile) one(t *testing.T, key string) string {
	t.Helper()
	v := u["Service"][key]
	if len(v) != 1 {
		t.Fatalf("[Service] %s: %q, want exactly one value", key, v)
	}
	return v[0]
}

// TestSystemdUnitsPolicy pins what the units promise (deploy/README.md):
// the daemon is root with exactly the four capabilities it needs, its
// socket where `mcpwarden run` looks, root-only; the collector holds no
// privilege, and no secret is on a command line.
func TestSystemdUnitsPolicy(t *testing.T) {
	d := parseUnit(t, "mcpwarden-daemon.service")
	caps := strings.Fields(d.one(t, "CapabilityBoundingSet"))
	slices.Sort(caps)
	if want := []string{"CAP_AUDIT_CONTROL", "CAP_AUDIT_READ", "CAP_BPF", "CAP_PERFMON"}; !slices.Equal(caps, want) {
		t.Errorf("daemon CapabilityBoundingSet %v, want %v", caps, want)
	}
	for key, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "ProtectKernelModules": "yes",
		// ProtectKernelTunables spelled out, so that bpffs (the pinned
		// probes) stays writable.
		"ReadOnlyPaths":      "/sys /proc/sys -/proc/sysrq-trigger -/proc/latency_stats -/proc/acpi -/proc/timer_stats -/proc/fs -/proc/irq",
		"ReadWritePaths":     "/sys/fs/bpf",
		"RestrictNamespaces": "yes", "MemoryDenyWriteExecute": "yes", "SystemCallArchitectures": "native",
		"RuntimeDirectory": "mcpwarden", "RuntimeDirectoryMode": "0700", "StateDirectory": "mcpwarden",
		"StateDirectoryMode": "0700", "UMask": "0077",
		"RestrictAddressFamilies": "AF_UNIX AF_NETLINK AF_INET AF_INET6",
	} {
		if got := d.one(t, key); got != want {
			t.Errorf("daemon %s=%s, want %s", key, got, want)
		}
	}
	if _, ok := d["Service"]["User"]; ok {
		t.Error("the daemon must run as root (it refuses otherwise): no User=")
	}
	if got := d["Service"]["SystemCallFilter"]; !slices.Equal(got, []string{"@system-service", "~@privileged @resources", "bpf perf_event_open"}) {
		t.Errorf("daemon SystemCallFilter %q", got)
	}
	exec := d.one(t, "ExecStart")
	for _, want := range []string{" daemon ", "--socket %t/mcpwarden/daemon.sock", "--state-dir %S/mcpwarden", "--enable-audit", "--metrics-listen 127.0.0.1:"} {
		if !strings.Contains(exec, want) {
			t.Errorf("daemon ExecStart %q lacks %q", exec, want)
		}
	}

	c := parseUnit(t, "mcpwarden-collector.service")
	for key, want := range map[string]string{
		"DynamicUser": "yes", "CapabilityBoundingSet": "", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
		"PrivateUsers": "no", "ProtectProc": "invisible", "RestrictNamespaces": "yes", "UMask": "0077",
		"LoadCredential":  "nats.nk:/var/lib/mcpwarden/nats-auth/collector.nk",
		"EnvironmentFile": "-/etc/mcpwarden/collector.env",
	} {
		if got := c.one(t, key); got != want {
			t.Errorf("collector %s=%s, want %s", key, got, want)
		}
	}
	cexec := c.one(t, "ExecStart")
	for _, want := range []string{" collect ", "--nats-nkey %d/nats.nk", "--metrics-listen 127.0.0.1:"} {
		if !strings.Contains(cexec, want) {
			t.Errorf("collector ExecStart %q lacks %q", cexec, want)
		}
	}
	// A DSN or password on the command line is readable by every local
	// user (/proc/PID/cmdline); they come from the environment file.
	for _, bad := range []string{"clickhouse://", "--clickhouse", "--nats-password", "@"} {
		if strings.Contains(cexec, bad) || strings.Contains(exec, bad) {
			t.Errorf("a secret-bearing argument %q on a command line: %q / %q", bad, exec, cexec)
		}
	}
}
