package sandbox

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/launcher/sandbox/seccomp"
)

// TestPlanOf: the launcher's Spec becomes the plan the C init performs,
// field by field, as the C reader reads it: the mounts sorted parents
// first with their flags (masks included), the rules below /proc/self
// marked as the server's own entry, the other /proc rules pinned, the
// seccomp program built, the init's ids those of the server's user
// namespace.
func TestPlanOf(t *testing.T) {
	srv := &ServerUserNS{Inside: Identity{UID: 1000, GID: 1000}, Host: Identity{UID: 0x70000005, GID: 0x70000005}}
	s := &Spec{
		Exe: "/usr/bin/node", Argv: []string{"node", "s.js"}, Env: []string{"PATH=/usr/bin"}, Dir: "/w",
		Enforce: true, ABI: 7, HandledFS: 0xffff, HandledNet: 3, Scoped: 3, RestrictFlag: 2,
		Paths: []PathRule{
			{Path: "/usr", Access: 13}, {Path: "/w", Access: 0xffff}, {Path: "/proc/self", Access: 8},
			{Path: "/proc/self/fd", Access: 9}, {Path: "/proc/selfish", Access: 1}, {Path: "/proc/cpuinfo", Access: 4},
			{Path: "/etc/x", Access: 1 << 20}, // nothing handled: no rule
		},
		Ports:    []PortRule{{Port: 443, Access: 2}, {Port: 80, Access: 4}},
		Seccomp:  true,
		Filter:   seccomp.Options{},
		DropCaps: true,
		Identity: nil,
		Limits:   Limits{FileSizeBytes: 1 << 20, TmpSizeBytes: 1 << 20},
		NS: &Namespaces{
			Mount: true, PID: true, IPC: true, UTS: true, Net: true, Hostname: "mcpwarden", MemfdNoexec: true,
			Server: srv,
			Root: Root{
				Staging: "/tmp/r", Tmp: "/tmp/r", TmpSize: 1 << 20, TmpOwner: srv.Host,
				Mounts: []Mount{{Path: "/w", Dir: true, Write: true, Idmap: true}, {Path: "/usr", Dir: true, Exec: true}, {Path: "/w/.env", Mask: true}, {Path: "/dev/null", Dev: true, Write: true}},
				Links:  []Link{{Path: "/bin", Target: "usr/bin"}},
				Dirs:   []string{"/w"},
			},
		},
	}
	h, err := planOf(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.filter) == 0 {
		t.Error("no seccomp program in the plan")
	}
	wantMounts := []planMount{{hoMDev | hoMWrite, "/dev/null"}, {hoMDir | hoMExec, "/usr"}, {hoMDir | hoMWrite | hoMIdmap, "/w"}, {hoMMask, "/w/.env"}}
	if !slices.Equal(h.mounts, wantMounts) {
		t.Errorf("mounts %v, want %v", h.mounts, wantMounts)
	}
	wantRules := []planRule{{13, 0, "/usr"}, {0xffff, 0, "/w"}, {8, hoRSelf, ""}, {9, hoRSelf, "/fd"}, {1, hoRPin, "/proc/selfish"}, {4, hoRPin, "/proc/cpuinfo"}}
	if !slices.Equal(h.rules, wantRules) {
		t.Errorf("rules %v, want %v", h.rules, wantRules)
	}
	if want := []PortRule{{Port: 443, Access: 2}}; !slices.Equal(h.ports, want) {
		t.Errorf("ports %v, want %v", h.ports, want)
	}
	if h.identity != nil || h.initID == nil || *h.initID != srv.Host || h.server != srv {
		t.Errorf("identity %v, init %v, server %v: want the stage in the server's namespace and the init as its host ids", h.identity, h.initID, h.server)
	}
	if h.ns != hoNSNet|hoNSMemfdNoexec || h.hostname != "mcpwarden" || h.handled != [3]uint64{0xffff, 3, 3} || h.tmp == nil || h.tmp.size != 1<<20 {
		t.Errorf("ns %#x hostname %q handled %v tmp %+v", h.ns, h.hostname, h.handled, h.tmp)
	}
	b, err := EncodePlan(s)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := startCReader(t).read(t, b), dump(h); got != want {
		t.Errorf("the C reader read\n%s\nwant\n%s", got, want)
	}
	// Refused in the launcher, with a message, what the init would refuse.
	for name, mut := range map[string]func(s *Spec){
		"no namespaces":    func(s *Spec) { s.NS = nil },
		"no pid namespace": func(s *Spec) { s.NS.PID = false },
		"a relative mount": func(s *Spec) { s.NS.Root.Mounts = append(s.NS.Root.Mounts, Mount{Path: "usr"}) },
		"a writable mask": func(s *Spec) {
			s.NS.Root.Mounts = append(s.NS.Root.Mounts, Mount{Path: "/w/k", Mask: true, Write: true})
		},
		"a host name too long": func(s *Spec) { s.NS.Hostname = strings.Repeat("h", 65) },
		"a root server":        func(s *Spec) { s.NS.Server = &ServerUserNS{} },
		"no executable":        func(s *Spec) { s.Exe = "" },
	} {
		c := *s
		ns := *s.NS
		ns.Root.Mounts = slices.Clone(ns.Root.Mounts)
		c.NS = &ns
		mut(&c)
		if _, err := EncodePlan(&c); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

// TestPlanCarriesEverySpecField: planOf maps each field of the Spec's
// namespace part into the plan; a field added there (as Mount.Mask was)
// fails here until planOf and the C init carry it, so that nothing the Go
// side decides is silently dropped on the way to the init.
func TestPlanCarriesEverySpecField(t *testing.T) {
	for typ, want := range map[reflect.Type][]string{
		reflect.TypeFor[Spec]():         {"Exe", "Argv", "Env", "Enforce", "ABI", "HandledFS", "HandledNet", "Scoped", "RestrictFlag", "Paths", "Ports", "Seccomp", "Filter", "DropCaps", "Dir", "Identity", "NS", "Limits"},
		reflect.TypeFor[Limits]():       {"FileSizeBytes", "OpenFiles", "TmpSizeBytes"},
		reflect.TypeFor[Namespaces]():   {"User", "Mount", "PID", "IPC", "UTS", "Net", "Hostname", "MemfdNoexec", "NoNestedUserNS", "Root", "Server"},
		reflect.TypeFor[Root]():         {"Staging", "Mounts", "Links", "Dirs", "Tmp", "TmpSize", "TmpOwner"},
		reflect.TypeFor[Mount]():        {"Path", "Dir", "Write", "Exec", "Dev", "Idmap", "Mask"},
		reflect.TypeFor[Link]():         {"Path", "Target"},
		reflect.TypeFor[ServerUserNS](): {"Inside", "Host"},
	} {
		var got []string
		for i := range typ.NumField() {
			got = append(got, typ.Field(i).Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s has fields %v; planOf (plan.go) and the C init (execstage) carry %v: carry the new ones, then list them here", typ.Name(), got, want)
		}
	}
}
