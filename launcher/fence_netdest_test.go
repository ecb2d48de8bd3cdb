package launcher_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/schema"
)

// linkLocalNet is a network namespace made by the test: loopback, and a
// 169.254.99.1/16, fe80::99, fd00:ec2::254 (the
// metadata service's v6 address), 100.100.100.200 (Alibaba Cloud's) and
// 168.63.129.16 (Azure's WireServer) on its loopback (this kernel has no dummy
// interfaces), with one listener on every address of the namespace. The
// host's network is not touched.
type linkLocalNet struct {
	name string
	port int
}

func newLinkLocalNet(t *testing.T) *linkLocalNet {
	t.Helper()
	n := &linkLocalNet{name: fmt.Sprintf("mcpw-nd-%d-%d", os.Getpid(), len(t.Name()))}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	_ = exec.Command("ip", "netns", "del", n.name).Run()
	ip("netns", "add", n.name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.name).Run() })
	ip("-n", n.name, "addr", "add", "169.254.99.1/16", "dev", "lo")
	ip("-n", n.name, "addr", "add", "fe80::99/64", "dev", "lo", "nodad")
	ip("-n", n.name, "addr", "add", "fd00:ec2::254/128", "dev", "lo", "nodad")
	ip("-n", n.name, "addr", "add", "100.100.100.200/32", "dev", "lo")
	ip("-n", n.name, "addr", "add", "168.63.129.16/32", "dev", "lo")
	ip("-n", n.name, "addr", "add", "192.0.0.192/32", "dev", "lo")
	for _, a := range moreMetadata6 {
		ip("-n", n.name, "addr", "add", a+"/128", "dev", "lo", "nodad")
	}
	ip("-n", n.name, "link", "set", "lo", "up")
	// The listener is made on a thread that enters the namespace and is
	// never given back (it ends with its goroutine).
	type res struct {
		l   net.Listener
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join("/run/netns", n.name))
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{err: err}
			return
		}
		l, err := net.Listen("tcp", ":0") // dual-stack: v4, v6 and v4-mapped
		ch <- res{l, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.l.Close() })
	go acceptAll(r.l)
	n.port = r.l.Addr().(*net.TCPAddr).Port
	return n
}

// moreMetadata6 are IPv6 metadata and credential addresses outside
// fe80::/10 that the test network also listens on: AWS's EKS Pod Identity
// agent, Google Cloud's, Oracle Cloud's, Scaleway's and Akamai/Linode's
// metadata services, and the NAT64 forms of 169.254.99.1 (the well-known
// prefix's, since session 11 the local-use block's first /96, since
// session 12 every layout of that block: another /96, a /64 and the /48).
var moreMetadata6 = []string{"fd00:ec2::23", "fd20:ce::254", "fd00:c1::a9fe:a9fe", "fd00:42::42", "fd00:a9fe:a9fe::1", "64:ff9b::169.254.99.1", "64:ff9b:1::169.254.99.1",
	"64:ff9b:1:0:1:0:a9fe:6301", "64:ff9b:1:abcd:a9:fe63:100:0", "64:ff9b:1:a9fe:63:100::"}

// TestFenceNetworkGrantLinkLocal: a scope granting a TCP port does not
// reach link-local destinations (the cloud metadata service's addresses
// among them) on that port: the run's cgroup refuses them with EPERM,
// TCP and UDP, v4, v6 and v4-mapped; loopback on the granted port still
// connects. The whole run is in a network namespace of the test's where
// every one of those addresses has a listener: before the filter, every
// connect succeeded.
func TestFenceNetworkGrantLinkLocal(t *testing.T) {
	fencetest.ForEachLayering(t, testFenceNetworkGrantLinkLocal)
}

func testFenceNetworkGrantLinkLocal(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	n := newLinkLocalNet(t)
	p := n.port
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "network": map[string]any{"connect_tcp": []int{p}}})
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log, NoNamespaces: noNS,
		Wrapper: []string{"nsenter", "--net=" + filepath.Join("/run/netns", n.name)}})
	eperm := []string{"EPERM"}
	cases := []fenceCase{
		{name: "loopback on the granted port", req: map[string]any{"op": "connect", "addr": fmt.Sprintf("127.0.0.1:%d", p)}, wantOK: true},
		{name: "v6 loopback on the granted port", req: map[string]any{"op": "connect", "addr": fmt.Sprintf("[::1]:%d", p)}, wantOK: true},
		{name: "169.254/16 on the granted port", req: map[string]any{"op": "connect", "addr": fmt.Sprintf("169.254.99.1:%d", p)}, errno: eperm, exact: true},
		{name: "fd00:ec2::254 on the granted port", req: map[string]any{"op": "connect", "addr": fmt.Sprintf("[fd00:ec2::254]:%d", p)}, errno: eperm, exact: true},
		{name: "fe80::/10 on the granted port", req: map[string]any{"op": "connect", "addr": fmt.Sprintf("[fe80::99%%lo]:%d", p)}, errno: eperm, exact: true},
		{name: "v4-mapped 169.254/16 on the granted port", req: map[string]any{"op": "connect", "addr": fmt.Sprintf("[::ffff:169.254.99.1]:%d", p)}, errno: eperm, exact: true},
		{name: "Alibaba Cloud's metadata address on the granted port", req: map[string]any{"op": "connect", "addr": fmt.Sprintf("100.100.100.200:%d", p)}, errno: eperm, exact: true},
		{name: "Azure's WireServer on the granted port", req: map[string]any{"op": "connect", "addr": fmt.Sprintf("168.63.129.16:%d", p)}, errno: eperm, exact: true},
		{name: "UDP to 169.254/16", req: map[string]any{"op": "udp", "addr": fmt.Sprintf("169.254.99.1:%d", p)}, errno: eperm, exact: true},
		{name: "UDP to fd00:ec2::254", req: map[string]any{"op": "udp", "addr": fmt.Sprintf("[fd00:ec2::254]:%d", p)}, errno: eperm, exact: true},
		{name: "Oracle Cloud Classic's metadata address on the granted port", req: map[string]any{"op": "connect", "addr": fmt.Sprintf("192.0.0.192:%d", p)}, errno: eperm, exact: true},
	}
	// sendmmsg: the destination in each message of the batch.
	cases = append(cases,
		fenceCase{name: "UDP sendmmsg to 169.254/16", req: map[string]any{"op": "udp_sendmmsg", "addr": fmt.Sprintf("169.254.99.1:%d", p)}, errno: eperm, exact: true},
		fenceCase{name: "UDP sendmmsg to fd00:ec2::254", req: map[string]any{"op": "udp_sendmmsg", "addr": fmt.Sprintf("[fd00:ec2::254]:%d", p)}, errno: eperm, exact: true},
		fenceCase{name: "UDP sendmmsg to v4-mapped 169.254/16", req: map[string]any{"op": "udp_sendmmsg", "addr": fmt.Sprintf("[::ffff:169.254.99.1]:%d", p)}, errno: eperm, exact: true},
		fenceCase{name: "UDP sendmmsg to loopback", req: map[string]any{"op": "udp_sendmmsg", "addr": fmt.Sprintf("127.0.0.1:%d", p)}, wantOK: true})
	for _, a := range moreMetadata6 {
		cases = append(cases,
			fenceCase{name: a + " on the granted port", req: map[string]any{"op": "connect", "addr": fmt.Sprintf("[%s]:%d", a, p)}, errno: eperm, exact: true},
			fenceCase{name: "UDP to " + a, req: map[string]any{"op": "udp", "addr": fmt.Sprintf("[%s]:%d", a, p)}, errno: eperm, exact: true})
	}
	runCases(t, s, cases)
	s.Close()
	for _, rec := range launchLayers(t, log) {
		if ly := layerOf(rec, schema.LayerNetNS); ly.State != schema.LayerDegraded || ly.Reason != "scope_grants_network,link_local_denied" {
			t.Errorf("netns layer %+v", ly)
		}
	}
}

// TestNetworkGrantWithoutLinkLocalFilter: where the filter cannot be put
// in place (here: --cgroup=false, no group to carry it) the run says so in
// its netns layer and on stderr, and --require-namespaces refuses it (exit
// 69) with the refusal recorded; never a silent fallback.
func TestNetworkGrantWithoutLinkLocalFilter(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "network": map[string]any{"connect_tcp": []int{9}}})
	const off = "scope_grants_network,no_link_local_filter,no_cgroup2"

	log := filepath.Join(t.TempDir(), "audit.jsonl")
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, AuditLog: log, ExtraArgs: []string{"--cgroup=false"}})
	if r := s.Do(map[string]any{"op": "read", "path": w.secret}); r.OK {
		t.Fatal("the fence is not in force")
	}
	s.Close()
	if !strings.Contains(s.Stderr(), "may reach link-local addresses") {
		t.Errorf("no warning on stderr: %s", s.Stderr())
	}
	for _, rec := range launchLayers(t, log) {
		if ly := layerOf(rec, schema.LayerNetNS); ly.State != schema.LayerOff || ly.Reason != off {
			t.Errorf("netns layer %+v, want off %s", ly, off)
		}
	}

	// scope check says the same, and refuses as the run would.
	code, out, stderr := runCLI(t, b.Mcpwarden, w.base, "scope", "check", scope, "--base", w.base, "--cgroup=false")
	if code != 0 || !strings.Contains(out, "netns     off       "+off) {
		t.Errorf("scope check --cgroup=false: exit %d (%s):\n%s", code, stderr, out)
	}
	code, _, stderr = runCLI(t, b.Mcpwarden, w.base, "scope", "check", scope, "--base", w.base, "--cgroup=false", "--require-namespaces")
	if code != 69 || !strings.Contains(stderr, "link-local") {
		t.Errorf("scope check --cgroup=false --require-namespaces: exit %d (%s), want 69", code, stderr)
	}

	log = filepath.Join(t.TempDir(), "audit.jsonl")
	code, _, stderr = runCLI(t, b.Mcpwarden, w.base, "run", fencetest.RelayFlag, "--scope", scope, "--base", w.base, "--audit-log", log,
		"--cgroup=false", "--require-namespaces", "--", b.Naive)
	if code != 69 || !strings.Contains(stderr, "link-local") {
		t.Fatalf("exit %d (%s), want 69 naming the link-local filter", code, stderr)
	}
	recs := launchLayers(t, log)
	last := recs[len(recs)-1]
	if last.ExitReason != schema.ExitRefusedKernel || layerOf(last, schema.LayerNetNS).Reason != off {
		t.Errorf("refusal record %+v", last)
	}
}

// TestFenceIOUringConnectLinkLocal: with "allow_io_uring": true the
// seccomp filter does not see io_uring's operations, but the destination
// filter is on the run's cgroup, which the ring's workers share: an
// IORING_OP_CONNECT to the metadata service's address (or Azure's
// WireServer) on the granted port is refused (EPERM) like connect(), and
// one to loopback still connects. (With the namespaces only: a scope that
// allows io_uring is refused without them, TestFenceAllowIOUring.) Since
// session 12 also a UDP IORING_OP_SENDMSG (a guard: it held before).
func TestFenceIOUringConnectLinkLocal(t *testing.T) {
	testFenceIOUringConnectLinkLocal(t, false)
}

func testFenceIOUringConnectLinkLocal(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	n := newLinkLocalNet(t)
	p := n.port
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "allow_io_uring": true,
		"network": map[string]any{"connect_tcp": []int{p}}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS,
		Wrapper: []string{"nsenter", "--net=" + filepath.Join("/run/netns", n.name)}})
	eperm := []string{"EPERM"}
	runCases(t, s, []fenceCase{
		{name: "io_uring connect to loopback on the granted port", req: map[string]any{"op": "uring_connect", "addr": fmt.Sprintf("127.0.0.1:%d", p)}, wantOK: true},
		{name: "io_uring connect to 169.254/16", req: map[string]any{"op": "uring_connect", "addr": fmt.Sprintf("169.254.99.1:%d", p)}, errno: eperm, exact: true},
		{name: "io_uring connect to Alibaba Cloud's metadata address", req: map[string]any{"op": "uring_connect", "addr": fmt.Sprintf("100.100.100.200:%d", p)}, errno: eperm, exact: true},
		{name: "io_uring connect to Azure's WireServer", req: map[string]any{"op": "uring_connect", "addr": fmt.Sprintf("168.63.129.16:%d", p)}, errno: eperm, exact: true},
		{name: "io_uring connect to another port (Landlock)", req: map[string]any{"op": "uring_connect", "addr": fmt.Sprintf("127.0.0.1:%d", p+1)}, errno: []string{"EACCES"}, exact: true},
		// Session 12 guard: UDP through the ring, the destination in the
		// message (IORING_OP_SENDMSG on an unconnected socket): the
		// cgroup's sendmsg hooks see it as they see sendmsg(2).
		{name: "io_uring UDP sendmsg to loopback", req: map[string]any{"op": "uring_udp_sendmsg", "addr": fmt.Sprintf("127.0.0.1:%d", p)}, wantOK: true},
		{name: "io_uring UDP sendmsg to 169.254/16", req: map[string]any{"op": "uring_udp_sendmsg", "addr": fmt.Sprintf("169.254.99.1:%d", p)}, errno: eperm, exact: true},
		{name: "io_uring UDP sendmsg to Alibaba Cloud's metadata address", req: map[string]any{"op": "uring_udp_sendmsg", "addr": fmt.Sprintf("100.100.100.200:%d", p)}, errno: eperm, exact: true},
	})
	s.Close()
}
