package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// chart is the Helm chart's directory under the repository.
const chart = "deploy/helm/mcpwarden"

// helmBin is helm from PATH or from `go install` (scripts/test-env.sh
// install puts it where go install does: testenv.GoTool).
func helmBin(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	return testenv.GoTool(t, "helm")
}

// kubeVersion is the Kubernetes release the chart is rendered for: the
// oldest it supports (Chart.yaml's kubeVersion; securityContext's
// appArmorProfile is 1.30's). helm built by go install knows no default.
const kubeVersion = "1.30.0"

// required are the values without which the chart refuses to render.
var required = []string{
	"nats.url=tls://nats.mcpwarden:4222",
	"daemon.credentialsSecret=mcpwarden-host-creds",
	"collector.secret=mcpwarden-collector",
}

// render runs helm template with the required values and sets; it returns
// the manifests, or helm's error output with ok false.
func render(t *testing.T, sets ...string) (docs []string, out string, ok bool) {
	t.Helper()
	args := []string{"template", "fleet", filepath.Join(testenv.RepoRoot(), chart), "--namespace", "mcpwarden", "--kube-version", kubeVersion}
	for _, s := range append(slices.Clone(required), sets...) {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, stderr.String(), false
	}
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(stdout.String(), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, d)
		}
	}
	return docs, stdout.String(), true
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// objects are the rendered manifests, decoded strictly (an unknown or
// misplaced field is an error) into the Kubernetes API types.
type objects struct {
	daemonSets   []appsv1.DaemonSet
	deployments  []appsv1.Deployment
	jobs         []batchv1.Job
	services     []corev1.Service
	statefulSets []appsv1.StatefulSet
	configMaps   []corev1.ConfigMap
}

func decode(t *testing.T, docs []string) objects {
	t.Helper()
	var o objects
	for _, d := range docs {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(d), &meta); err != nil {
			t.Fatalf("a rendered document is not YAML: %v\n%s", err, d)
		}
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 DaemonSet":
			decodeInto(t, d, meta.Kind, &o.daemonSets)
		case "apps/v1 Deployment":
			decodeInto(t, d, meta.Kind, &o.deployments)
		case "batch/v1 Job":
			decodeInto(t, d, meta.Kind, &o.jobs)
		case "v1 Service":
			decodeInto(t, d, meta.Kind, &o.services)
		case "apps/v1 StatefulSet":
			decodeInto(t, d, meta.Kind, &o.statefulSets)
		case "v1 ConfigMap":
			decodeInto(t, d, meta.Kind, &o.configMaps)
		default:
			t.Fatalf("the chart renders %s %s, which this test does not know: add it here", meta.APIVersion, meta.Kind)
		}
	}
	return o
}

// decodeInto decodes the manifest d strictly into its API type T and
// appends it to list.
func decodeInto[T any](t *testing.T, d, kind string, list *[]T) {
	t.Helper()
	var x T
	if err := yaml.UnmarshalStrict([]byte(d), &x); err != nil {
		t.Fatalf("%s does not decode strictly into its API type: %v\n%s", kind, err, d)
	}
	*list = append(*list, x)
}

// checkMeta applies the API server's rules for names and labels, and
// checks that the selector matches the pod template.
func checkMeta(t *testing.T, kind, name string, labels map[string]string) {
	t.Helper()
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 || len(name) > 63 {
		t.Errorf("%s name %q: %v", kind, name, errs)
	}
	for k, v := range labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("%s %s: label key %q: %v", kind, name, k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("%s %s: label %s=%q: %v", kind, name, k, v, errs)
		}
	}
}

func checkSelector(t *testing.T, kind, name string, sel map[string]string, pod map[string]string) {
	t.Helper()
	if len(sel) == 0 {
		t.Errorf("%s %s selects every pod", kind, name)
	}
	for k, v := range sel {
		if pod[k] != v {
			t.Errorf("%s %s: selector %s=%s does not match its pods' labels %v", kind, name, k, v, pod)
		}
	}
}

// checkPod: what every pod of the chart must hold. Volume mounts name
// volumes that exist, env references are defined, and the container's
// command line parses with the real binary.
func checkPod(t *testing.T, what string, spec corev1.PodSpec) {
	t.Helper()
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		if vols[v.Name] {
			t.Errorf("%s: volume %s twice", what, v.Name)
		}
		vols[v.Name] = true
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s mounts a service account token it does not use", what)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", what, len(spec.Containers))
	}
	c := spec.Containers[0]
	for _, m := range c.VolumeMounts {
		if !vols[m.Name] {
			t.Errorf("%s mounts %s, which is no volume", what, m.Name)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s: want unprivileged, no privilege escalation, a read-only root and every capability dropped; got %+v", what, sc)
	}
	// Secrets only by reference: no value in the manifest.
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
		if strings.Contains(strings.ToLower(e.Value), "password") || strings.Contains(e.Value, "@") {
			t.Errorf("%s: %s has a credential in clear: %q", what, e.Name, e.Value)
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Z_]+)\)`)
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		for _, m := range ref.FindAllStringSubmatch(a, -1) {
			if !env[m[1]] {
				t.Errorf("%s: argument %q names $(%s), which the container's env does not define", what, a, m[1])
			}
		}
		if strings.Contains(a, "://") && strings.Contains(a, "@") {
			t.Errorf("%s: argument %q carries credentials", what, a)
		}
		args[i] = ref.ReplaceAllString(a, "192.0.2.1")
	}
	// The real binary parses the command line: flags it does not know, or
	// values of the wrong type, fail before -h prints the help.
	cmd := exec.Command(testenv.Mcpwarden(t), append(args, "-h")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: mcpwarden %s does not parse: %v\n%s", what, strings.Join(args, " "), err, out)
	}
}

// TestHelmChart renders the chart with helm (lint, then template with the
// defaults and with each option), decodes every manifest strictly into the
// Kubernetes API types (k8s.io/api: the schemas the API server decodes
// with; no cluster and no network here), and checks what the daemon needs
// from its node and what the collectors must not have.
func TestHelmChart(t *testing.T) {
	helm := helmBin(t)
	lint := exec.Command(helm, "lint", "--strict", "--kube-version", kubeVersion, filepath.Join(testenv.RepoRoot(), chart))
	for _, s := range required {
		lint.Args = append(lint.Args, "--set", s)
	}
	lint.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	if out, err := lint.CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}

	variants := []struct {
		name string
		sets []string
		// daemonArgs and collectorArgs must be among the containers' args.
		daemonArgs, collectorArgs []string
		notArgs                   []string
		jobs, services            int
		daemons, collectors       int
	}{
		{name: "defaults",
			daemonArgs:    []string{"daemon", "--socket=/run/mcpwarden/daemon.sock", "--state-dir=/var/lib/mcpwarden", "--nats=tls://nats.mcpwarden:4222", "--nats-creds=/etc/mcpwarden/nats/$(NODE_NAME).creds", "--enable-audit", "--metrics-listen=$(NODE_IP):9474"},
			collectorArgs: []string{"collect", "--nats=tls://nats.mcpwarden:4222", "--nats-user=collector", "--nats-password-file=/etc/mcpwarden/nats/password", "--metrics-listen=$(POD_IP):9475"},
			notArgs:       []string{"--nats-tls-ca=/etc/mcpwarden/tls/ca.pem"},
			jobs:          1, services: 1, daemons: 1, collectors: 1},
		{name: "tls-password-nometrics",
			sets:          []string{"nats.tlsCASecret=nats-ca", "daemon.auth=password", "daemon.metrics.enabled=false", "collector.metrics.enabled=false", "daemon.enableAudit=false", "collector.streamReplicas=3"},
			daemonArgs:    []string{"--nats-user=$(NODE_NAME)", "--nats-password-file=/etc/mcpwarden/nats/$(NODE_NAME)", "--nats-tls-ca=/etc/mcpwarden/tls/ca.pem"},
			collectorArgs: []string{"--nats-tls-ca=/etc/mcpwarden/tls/ca.pem", "--stream-replicas=3"},
			notArgs:       []string{"--enable-audit", "--metrics-listen=$(NODE_IP):9474", "--metrics-listen=$(POD_IP):9475", "--nats-creds=/etc/mcpwarden/nats/$(NODE_NAME).creds"},
			jobs:          1, services: 0, daemons: 1, collectors: 1},
		{name: "daemon-only",
			sets:    []string{"collector.enabled=false"},
			daemons: 1},
		{name: "collector-only-no-migrate",
			sets:       []string{"daemon.enabled=false", "collector.migrate=false"},
			services:   1,
			collectors: 1},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			docs, out, ok := render(t, v.sets...)
			if !ok {
				t.Fatalf("helm template: %s", out)
			}
			o := decode(t, docs)
			if len(o.daemonSets) != v.daemons || len(o.deployments) != v.collectors || len(o.jobs) != v.jobs || len(o.services) != v.services {
				t.Fatalf("rendered %d DaemonSets, %d Deployments, %d Jobs, %d Services; want %d, %d, %d, %d",
					len(o.daemonSets), len(o.deployments), len(o.jobs), len(o.services), v.daemons, v.collectors, v.jobs, v.services)
			}
			var allArgs []string
			for _, ds := range o.daemonSets {
				checkMeta(t, "DaemonSet", ds.Name, ds.Labels)
				checkSelector(t, "DaemonSet", ds.Name, ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
				checkDaemonPod(t, ds.Spec.Template.Spec)
				allArgs = append(allArgs, ds.Spec.Template.Spec.Containers[0].Args...)
				for _, a := range v.daemonArgs {
					if !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, a) {
						t.Errorf("the daemon's args lack %q: %q", a, ds.Spec.Template.Spec.Containers[0].Args)
					}
				}
			}
			for _, d := range o.deployments {
				checkMeta(t, "Deployment", d.Name, d.Labels)
				checkSelector(t, "Deployment", d.Name, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
				checkCollectorPod(t, "collector", d.Spec.Template.Spec)
				allArgs = append(allArgs, d.Spec.Template.Spec.Containers[0].Args...)
				for _, a := range v.collectorArgs {
					if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, a) {
						t.Errorf("the collector's args lack %q: %q", a, d.Spec.Template.Spec.Containers[0].Args)
					}
				}
				if *d.Spec.Replicas != 2 {
					t.Errorf("collector replicas %d, want the default 2", *d.Spec.Replicas)
				}
			}
			for _, j := range o.jobs {
				checkMeta(t, "Job", j.Name, j.Labels)
				checkCollectorPod(t, "migration job", j.Spec.Template.Spec)
				if got := j.Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, []string{"collect", "--migrate-only"}) {
					t.Errorf("the migration job runs %q, want collect --migrate-only", got)
				}
				if j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
					t.Errorf("the migration job's restart policy is %q", j.Spec.Template.Spec.RestartPolicy)
				}
			}
			for _, s := range o.services {
				checkMeta(t, "Service", s.Name, s.Labels)
				if len(o.deployments) == 1 {
					checkSelector(t, "Service", s.Name, s.Spec.Selector, o.deployments[0].Spec.Template.Labels)
				}
			}
			for _, a := range v.notArgs {
				if slices.Contains(allArgs, a) {
					t.Errorf("rendered %q, which %v turns off", a, v.sets)
				}
			}
		})
	}

	// Without its required values, or with a wrong one, the chart refuses
	// to render and says what is missing.
	refusals := []struct {
		unset, set, want string
	}{
		{unset: "nats.url", want: "nats.url is required"},
		{unset: "daemon.credentialsSecret", want: "daemon.credentialsSecret is required"},
		{unset: "collector.secret", want: "collector.secret is required"},
		{set: "daemon.auth=token", want: `daemon.auth is "token": want creds or password`},
		{set: "nats.url=tls://host-1:secret@nats:4222", want: "nats.url must not carry credentials"},
		{set: "daemon.socketDir=run/mcpwarden", want: `daemon.socketDir is "run/mcpwarden": want an absolute directory`},
		{set: "daemon.stateDir=/var/lib/../etc", want: `daemon.stateDir is "/var/lib/../etc"`},
		{set: "daemon.stateDir=/", want: `daemon.stateDir is "/"`},
	}
	for _, r := range refusals {
		t.Run("refuses/"+r.want, func(t *testing.T) {
			var sets []string
			if r.unset != "" {
				sets = append(sets, r.unset+"=")
			}
			if r.set != "" {
				sets = append(sets, r.set)
			}
			_, out, ok := render(t, sets...)
			if ok || !strings.Contains(out, r.want) {
				t.Fatalf("helm template with %v: ok=%v, want a refusal saying %q; got %s", sets, ok, r.want, out)
			}
		})
	}
}

// checkDaemonPod: the node's PID and network namespaces, root with exactly
// the four capabilities of the systemd unit, the kernel file systems and
// the host directories the launchers share.
func checkDaemonPod(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	checkPod(t, "daemon", spec)
	if !spec.HostPID || !spec.HostNetwork || spec.HostIPC {
		t.Errorf("daemon: hostPID %v hostNetwork %v hostIPC %v, want true, true, false", spec.HostPID, spec.HostNetwork, spec.HostIPC)
	}
	if spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("daemon: dnsPolicy %q: with the host network, ClusterFirstWithHostNet resolves the cluster's NATS", spec.DNSPolicy)
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("daemon: must run as uid 0 (mcpwarden daemon refuses otherwise)")
	}
	add := slices.Clone(sc.Capabilities.Add)
	slices.Sort(add)
	if want := []corev1.Capability{"AUDIT_CONTROL", "AUDIT_READ", "BPF", "PERFMON"}; !slices.Equal(add, want) {
		t.Errorf("daemon capabilities %v, want exactly %v", add, want)
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	for _, w := range []struct {
		path     string
		readOnly bool
	}{
		{"/sys/fs/bpf", false},
		{"/sys/kernel/tracing", true},
		{"/sys/kernel/security", true},
		{"/sys/kernel/btf", true},
		{"/run/mcpwarden", false},
		{"/var/lib/mcpwarden", false},
	} {
		m, ok := mounts[w.path]
		if !ok || hostPaths[m.Name] != w.path || m.ReadOnly != w.readOnly {
			t.Errorf("daemon: want the node's %s at %s (read-only %v); got mount %+v of host path %q", w.path, w.path, w.readOnly, m, hostPaths[m.Name])
		}
	}
	for name, p := range hostPaths {
		if !slices.Contains([]string{"/sys/fs/bpf", "/sys/kernel/tracing", "/sys/kernel/security", "/sys/kernel/btf", "/run/mcpwarden", "/var/lib/mcpwarden"}, p) {
			t.Errorf("daemon: host path %s (%s) is not one the daemon needs", p, name)
		}
	}
}

// checkCollectorPod: no root, no capability, the DSN from the Secret.
func checkCollectorPod(t *testing.T, what string, spec corev1.PodSpec) {
	t.Helper()
	checkPod(t, what, spec)
	if spec.HostPID || spec.HostNetwork || spec.HostIPC {
		t.Errorf("%s shares a namespace of the node", what)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: want a non-root uid and the runtime's seccomp profile; got %+v", what, psc)
	}
	c := spec.Containers[0]
	if len(c.SecurityContext.Capabilities.Add) > 0 {
		t.Errorf("%s adds capabilities %v", what, c.SecurityContext.Capabilities.Add)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("%s mounts the node's %s", what, v.HostPath.Path)
		}
	}
	dsn := false
	for _, e := range c.Env {
		if e.Name == "MCPWARDEN_CLICKHOUSE_DSN" {
			dsn = e.Value == "" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "mcpwarden-collector" && e.ValueFrom.SecretKeyRef.Key == "clickhouse-dsn"
		}
	}
	if !dsn {
		t.Errorf("%s: the ClickHouse DSN must come from the Secret's clickhouse-dsn key: %+v", what, c.Env)
	}
}
