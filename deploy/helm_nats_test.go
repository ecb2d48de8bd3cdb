package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mcpwarden/mcpwarden/internal/natstest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestHelmChartNATSCluster renders the chart with nats.cluster.enabled and
// checks the NATS part: a StatefulSet of three nodes started together
// behind a headless Service that names every pod, unprivileged, no host
// path, the accounts and the keys from Secrets; its cluster.conf is
// deploy/nats/cluster.conf (which TestDeployNATSCluster runs on real
// servers) with the pods' names for the routes, and loads into nats-server
// with deploy/nats/accounts.conf; the daemons and the collectors are given
// every pod's URL and only ca.pem of the TLS Secret. Without its Secrets,
// or with nats.url as well, the chart refuses to render.
func TestHelmChartNATSCluster(t *testing.T) {
	sets := []string{"nats.url=", "nats.cluster.enabled=true", "nats.cluster.accountsSecret=nats-accounts", "nats.cluster.tlsSecret=nats-tls"}
	docs, out, ok := render(t, sets...)
	if !ok {
		t.Fatalf("helm template: %s", out)
	}
	o := decode(t, docs)
	if len(o.statefulSets) != 1 || len(o.configMaps) != 1 {
		t.Fatalf("rendered %d StatefulSets and %d ConfigMaps, want 1 and 1", len(o.statefulSets), len(o.configMaps))
	}
	ss := o.statefulSets[0]
	checkMeta(t, "StatefulSet", ss.Name, ss.Labels)
	checkSelector(t, "StatefulSet", ss.Name, ss.Spec.Selector.MatchLabels, ss.Spec.Template.Labels)
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 3 || ss.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("NATS: %v replicas, pod management %q; want 3, Parallel", ss.Spec.Replicas, ss.Spec.PodManagementPolicy)
	}
	var headless *corev1.Service
	for i, s := range o.services {
		if s.Name == ss.Spec.ServiceName {
			headless = &o.services[i]
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("NATS: no headless Service %q publishing pods that are not ready: %+v", ss.Spec.ServiceName, headless)
	}
	checkMeta(t, "Service", headless.Name, headless.Labels)
	checkSelector(t, "Service", headless.Name, headless.Spec.Selector, ss.Spec.Template.Labels)
	checkNATSPod(t, ss.Spec.Template.Spec)

	// The chart's cluster.conf is the deploy file, routes to the pods.
	cm := o.configMaps[0]
	conf := cm.Data["cluster.conf"]
	want, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "nats", "cluster.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var pods []string
	for i := 0; i < 3; i++ {
		pods = append(pods, ss.Name+"-"+strconv.Itoa(i)+"."+headless.Name+".mcpwarden.svc")
	}
	got := conf
	for i, p := range pods {
		got = strings.ReplaceAll(got, "nats-route://"+p+":6222", "nats-route://nats-"+strconv.Itoa(i+1)+":6222")
	}
	if a, b := confLines(got), confLines(string(want)); !slices.Equal(a, b) {
		t.Errorf("the chart's cluster.conf is not deploy/nats/cluster.conf:\n chart %q\n  file %q", a, b)
	}
	dir := t.TempDir()
	accounts, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "nats", "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	natstest.WriteTLS(t, dir)
	testenv.WriteFiles(t, map[string]string{filepath.Join(dir, "cluster.conf"): strings.ReplaceAll(conf, "/etc/nats/tls/", dir+"/"),
		filepath.Join(dir, "accounts.conf"): string(accounts)})
	for _, v := range []string{"NATS_SERVER_NAME", "HOST_WEB_1_PASSWORD", "HOST_WEB_2_PASSWORD", "COLLECTOR_PASSWORD", "ANALYST_PASSWORD"} {
		t.Setenv(v, "p"+strings.ToLower(v[:4]))
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "cluster.conf"))
	if err != nil {
		t.Fatalf("the chart's cluster.conf does not load into nats-server: %v", err)
	}
	if len(opts.Routes) != 3 || opts.Cluster.TLSConfig == nil || opts.Cluster.TLSConfig.ClientAuth == 0 {
		t.Errorf("the chart's cluster.conf: %d routes, route TLS %v; want 3 routes over TLS that verifies the peer", len(opts.Routes), opts.Cluster.TLSConfig)
	}

	// Daemons and collectors: every pod's URL, only the CA of the TLS Secret.
	var urls []string
	for _, p := range pods {
		urls = append(urls, "tls://"+p+":4222")
	}
	natsArg := "--nats=" + strings.Join(urls, ",")
	specs := map[string]corev1.PodSpec{}
	for _, ds := range o.daemonSets {
		specs["daemon"] = ds.Spec.Template.Spec
	}
	for _, d := range o.deployments {
		specs["collector"] = d.Spec.Template.Spec
	}
	if len(specs) != 2 {
		t.Fatalf("rendered pods %v, want a daemon and a collector", specs)
	}
	for what, spec := range specs {
		c := spec.Containers[0]
		if !slices.Contains(c.Args, natsArg) || !slices.Contains(c.Args, "--nats-tls-ca=/etc/mcpwarden/tls/ca.pem") {
			t.Errorf("%s: args %q lack %q and the CA", what, c.Args, natsArg)
		}
		for _, v := range spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == "nats-tls" {
				if len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "ca.pem" {
					t.Errorf("%s mounts %v of the NATS TLS Secret, which holds the servers' keys: want ca.pem only", what, v.Secret.Items)
				}
			}
		}
	}
	if slices.Contains(specs["collector"].Containers[0].Args, "--stream-replicas=1") {
		t.Error("the collectors pin the stream to R1 on the chart's cluster")
	}

	for _, r := range []struct {
		sets []string
		want string
	}{
		{[]string{"nats.url=", "nats.cluster.enabled=true", "nats.cluster.tlsSecret=nats-tls"}, "nats.cluster.accountsSecret is required"},
		{[]string{"nats.url=", "nats.cluster.enabled=true", "nats.cluster.accountsSecret=a"}, "nats.cluster.tlsSecret is required"},
		{[]string{"nats.cluster.enabled=true", "nats.cluster.accountsSecret=a", "nats.cluster.tlsSecret=b"}, "nats.url and nats.cluster.enabled both given"},
	} {
		if _, out, ok := render(t, r.sets...); ok || !strings.Contains(out, r.want) {
			t.Errorf("helm template with %v: ok=%v, want a refusal saying %q; got %s", r.sets, ok, r.want, out)
		}
	}
}

// confLines are a configuration's lines without comments, blank lines and
// surrounding or repeated spaces.
func confLines(s string) []string {
	var out []string
	space := regexp.MustCompile(`\s+`)
	for _, l := range strings.Split(s, "\n") {
		if i := strings.Index(l, "#"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(space.ReplaceAllString(l, " ")); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// checkNATSPod: a NATS node holds no privilege, no capability, no host
// namespace or path, no service account token, and a read-only root; its
// accounts and keys come from Secrets, its data from its claim.
func checkNATSPod(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("NATS mounts a service account token")
	}
	if spec.HostPID || spec.HostNetwork || spec.HostIPC {
		t.Error("NATS shares a namespace of the node")
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("NATS: want a non-root uid and the runtime's seccomp profile; got %+v", psc)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("NATS: %d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("NATS: want unprivileged, no privilege escalation, a read-only root and every capability dropped; got %+v", sc)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("NATS mounts the node's %s", v.HostPath.Path)
		}
		vols[v.Name] = v
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		if _, ok := vols[m.Name]; !ok && m.Name != "data" {
			t.Errorf("NATS mounts %s, which is no volume or claim", m.Name)
		}
		mounts[m.MountPath] = m.Name
	}
	if v := vols[mounts["/etc/nats/accounts.conf"]]; v.Secret == nil || v.Secret.SecretName != "nats-accounts" {
		t.Errorf("NATS: the accounts must come from the Secret nats-accounts: %+v", v)
	}
	if v := vols[mounts["/etc/nats/tls"]]; v.Secret == nil || v.Secret.SecretName != "nats-tls" {
		t.Errorf("NATS: the keys must come from the Secret nats-tls: %+v", v)
	}
	if mounts["/data"] != "data" {
		t.Error("NATS: JetStream's /data is not the pod's claim")
	}
	named := false
	for _, e := range c.Env {
		if e.Name == "NATS_SERVER_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			named = true
		}
	}
	if !named || !slices.Equal(c.Args, []string{"-c", "/etc/nats/cluster.conf"}) {
		t.Errorf("NATS: want nats-server -c /etc/nats/cluster.conf named by its pod; args %q env %+v", c.Args, c.Env)
	}
}
