package ruleset

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/schema"
)

func TestDecide(t *testing.T) {
	tests := []struct {
		abi        int
		bestEffort bool
		wantErr    bool
		wantABI    int
		dropped    []string
	}{
		{abi: 7, wantABI: 7},
		{abi: 9, wantABI: 7}, // newer kernels get the V7 fence
		{abi: 6, wantErr: true},
		{abi: 6, bestEffort: true, wantABI: 6, dropped: []string{"audit_log"}},
		{abi: 4, bestEffort: true, wantABI: 4, dropped: []string{"fs.ioctl_dev", "scope", "audit_log"}},
		{abi: 3, wantErr: true},
		{abi: 1, bestEffort: true, wantABI: 1, dropped: []string{"fs.refer", "fs.truncate", "net.tcp", "fs.ioctl_dev", "scope", "audit_log"}},
		{abi: 0, wantErr: true},
		{abi: 0, bestEffort: true, wantABI: 0, dropped: []string{"fs", "fs.refer", "fs.truncate", "net.tcp", "fs.ioctl_dev", "scope", "audit_log"}},
		{abi: -1, bestEffort: true, wantABI: 0, dropped: []string{"fs", "fs.refer", "fs.truncate", "net.tcp", "fs.ioctl_dev", "scope", "audit_log"}},
	}
	for _, tt := range tests {
		d, err := Decide(tt.abi, tt.bestEffort)
		if tt.wantErr {
			var ke *KernelError
			if err == nil || !asKernelError(err, &ke) {
				t.Errorf("Decide(%d, %v) = %+v, want KernelError", tt.abi, tt.bestEffort, d)
			}
			continue
		}
		if err != nil {
			t.Errorf("Decide(%d, %v): %v", tt.abi, tt.bestEffort, err)
			continue
		}
		if d.ABI != tt.wantABI || d.Degraded != (len(tt.dropped) > 0) || !reflect.DeepEqual(d.Dropped, tt.dropped) {
			t.Errorf("Decide(%d, %v) = %+v, want abi %d dropped %v", tt.abi, tt.bestEffort, d, tt.wantABI, tt.dropped)
		}
		if d.Degraded && !strings.Contains(d.Reason(), tt.dropped[0]) {
			t.Errorf("reason %q does not name %s", d.Reason(), tt.dropped[0])
		}
	}
}

func asKernelError(err error, target **KernelError) bool {
	ke, ok := err.(*KernelError)
	if ok {
		*target = ke
	}
	return ok && ke.Error() != ""
}

// Every ABI's handled set is a subset of the next one, and never handles
// UDP or newer rights the fence does not build rules for.
func TestHandledMonotonic(t *testing.T) {
	var prevFS landlock.AccessFSSet
	for abi := 0; abi <= MaxABI+2; abi++ {
		fs, net, _ := Handled(abi)
		if fs&prevFS != prevFS {
			t.Errorf("ABI %d handles less than ABI %d", abi, abi-1)
		}
		if net&^(ll.AccessNetBindTCP|ll.AccessNetConnectTCP) != 0 {
			t.Errorf("ABI %d handles non-TCP network rights", abi)
		}
		if fs&ll.AccessFSResolveUnix != 0 {
			t.Errorf("ABI %d handles resolve_unix (V9) beyond MaxABI", abi)
		}
		prevFS = fs
	}
}

func scopeFor(t *testing.T, mode schema.AccessMode, paths ...string) *schema.CanonicalScope {
	t.Helper()
	base := t.TempDir()
	var rel []string
	for _, p := range paths {
		full := filepath.Join(base, p)
		if strings.HasSuffix(p, ".txt") {
			os.MkdirAll(filepath.Dir(full), 0o755)
			os.WriteFile(full, []byte("x"), 0o644)
		} else {
			os.MkdirAll(full, 0o755)
		}
		rel = append(rel, p)
	}
	s := &schema.Scope{ScopeID: "s", AllowedPaths: rel, AccessMode: mode, ToolAllowlist: []string{"t"}, Approval: schema.ApprovalNone, ExpiresAfterMinutes: 5}
	c, err := schema.Canonicalize(s, base, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDeriveScopeRights(t *testing.T) {
	tests := []struct {
		mode schema.AccessMode
		path string
		want landlock.AccessFSSet
	}{
		{schema.AccessRead, "docs", ll.AccessFSReadFile | ll.AccessFSReadDir},
		{schema.AccessRead, "docs/a.txt", ll.AccessFSReadFile},
		{schema.AccessWrite, "docs", scopeWriteDir},
		{schema.AccessWrite, "docs/a.txt", ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode)+" "+tt.path, func(t *testing.T) {
			c := scopeFor(t, tt.mode, tt.path)
			rs, err := Derive(c, Input{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rs.Rules) != 1 || rs.Rules[0].Access != tt.want || rs.Rules[0].Origin != OriginScope {
				t.Fatalf("rules %+v, want access %v", rs.Rules, tt.want)
			}
			if rs.Rules[0].Access&ll.AccessFSExecute != 0 {
				t.Fatal("scope path may execute")
			}
			if !rs.BlockIOUring {
				t.Fatal("io_uring not blocked by default")
			}
		})
	}
}

func TestDeriveRuntimeAndOperator(t *testing.T) {
	c := scopeFor(t, schema.AccessRead, "docs")
	lib := filepath.Join(t.TempDir(), "lib.so")
	os.WriteFile(lib, nil, 0o644)
	treeDir := t.TempDir()
	prof := &runtimeprofile.Profile{Entries: []runtimeprofile.Entry{
		{Path: "/bin/sh", Class: runtimeprofile.ClassExec},
		{Path: lib, Class: runtimeprofile.ClassRead},
		{Path: treeDir, Class: runtimeprofile.ClassReadTree},
		{Path: "/dev/null", Class: runtimeprofile.ClassDevice},
	}}
	extra := t.TempDir()
	rs, err := Derive(c, Input{Profile: prof, TmpDir: t.TempDir(), AllowRuntime: []string{extra}})
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]Rule{}
	for _, r := range rs.Rules {
		byPath[r.Path] = r
		if r.Kind == schema.KindFile && r.Access&^fileRights != 0 {
			t.Errorf("file rule %s has directory rights %v", r.Path, r.Access)
		}
	}
	if r := byPath["/bin/sh"]; r.Access != runtimeExec {
		t.Errorf("exec entry: %+v", r)
	}
	if r := byPath[lib]; r.Access != ll.AccessFSReadFile {
		t.Errorf("library: %+v", r)
	}
	if r := byPath[treeDir]; r.Access != runtimeReadTree || r.Kind != schema.KindDir {
		t.Errorf("read tree: %+v", r)
	}
	if r := byPath["/dev/null"]; r.Access&ll.AccessFSWriteFile == 0 || r.Access&ll.AccessFSExecute != 0 {
		t.Errorf("device: %+v", r)
	}
	if r := byPath[extra]; r.Origin != OriginOperator || r.Access&ll.AccessFSWriteFile != 0 {
		t.Errorf("operator path: %+v", r)
	}
}

func TestDeriveRefusesWidening(t *testing.T) {
	c := scopeFor(t, schema.AccessRead, "docs")
	for _, dir := range []string{c.Base, filepath.Dir(c.Base), "/"} {
		prof := &runtimeprofile.Profile{Entries: []runtimeprofile.Entry{{Path: dir, Class: runtimeprofile.ClassReadTree}}}
		if _, err := Derive(c, Input{Profile: prof}); err == nil {
			t.Errorf("runtime dir %s containing the base was accepted", dir)
		}
	}
	// A runtime directory inside the base but outside the scope needs the
	// operator's explicit --allow-runtime.
	inside := filepath.Join(c.Base, "node_modules")
	os.MkdirAll(inside, 0o755)
	prof := &runtimeprofile.Profile{Entries: []runtimeprofile.Entry{{Path: inside, Class: runtimeprofile.ClassReadTree, Reason: "node_modules"}}}
	if _, err := Derive(c, Input{Profile: prof}); err == nil || !strings.Contains(err.Error(), "--allow-runtime") {
		t.Errorf("runtime dir inside the base accepted: %v", err)
	}
	if _, err := Derive(c, Input{Profile: prof, AllowRuntime: []string{inside}}); err != nil {
		t.Errorf("explicit --allow-runtime refused: %v", err)
	}
	home, _ := os.UserHomeDir()
	for _, p := range []string{"/", "relative/path", "/does/not/exist", "/etc", "/usr", home, c.Base, filepath.Dir(c.Base)} {
		if _, err := Derive(c, Input{AllowRuntime: []string{p}}); err == nil {
			t.Errorf("--allow-runtime %s accepted", p)
		}
	}
}

func TestNarrow(t *testing.T) {
	c := scopeFor(t, schema.AccessWrite, "docs/sub", "other")
	rs, err := Derive(c, Input{TmpDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(c.Base, "docs", "sub")
	n, err := rs.Narrow([]schema.CanonicalPath{{Path: sub, Kind: schema.KindDir}})
	if err != nil {
		t.Fatal(err)
	}
	var scopeRules, tmpRules int
	for _, r := range n.Rules {
		switch r.Origin {
		case OriginScope:
			scopeRules++
			if r.Path != sub || r.Access != scopeWriteDir {
				t.Errorf("narrowed rule %+v", r)
			}
		case OriginTmp:
			tmpRules++
		}
	}
	if scopeRules != 1 || tmpRules != 1 {
		t.Errorf("narrowed ruleset %+v", n.Rules)
	}
	if _, err := rs.Narrow([]schema.CanonicalPath{{Path: c.Base, Kind: schema.KindDir}}); err == nil {
		t.Error("narrowing to the base (wider than the scope) accepted")
	}
	if _, err := rs.Narrow([]schema.CanonicalPath{{Path: c.Base + "/docs-evil", Kind: schema.KindDir}}); err == nil {
		t.Error("narrowing to a prefix sibling accepted")
	}
	empty, err := rs.Narrow(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range empty.Rules {
		if r.Origin == OriginScope {
			t.Errorf("empty narrowing kept %+v", r)
		}
	}
}

func TestRightNames(t *testing.T) {
	if got := RightNames(ll.AccessFSReadFile | ll.AccessFSExecute); !reflect.DeepEqual(got, []string{"execute", "read_file"}) {
		t.Errorf("RightNames = %v", got)
	}
	if got := RightNames(0); len(got) != 0 {
		t.Errorf("RightNames(0) = %v", got)
	}
}

// FuzzDecide: whatever the kernel reports, a run is strict with everything,
// refused, or degraded only when asked — never silently weaker.
func FuzzDecide(f *testing.F) {
	for _, v := range []int{-5, 0, 1, 3, 6, 7, 8, 100} {
		f.Add(v, false)
		f.Add(v, true)
	}
	f.Fuzz(func(t *testing.T, abi int, bestEffort bool) {
		d, err := Decide(abi, bestEffort)
		if err != nil {
			if bestEffort {
				t.Fatalf("best effort refused: %v", err)
			}
			if abi >= MaxABI {
				t.Fatalf("full ABI refused: %v", err)
			}
			return
		}
		if d.ABI > MaxABI || d.ABI < 0 || d.ABI > max(abi, 0) {
			t.Fatalf("ABI %d from kernel %d", d.ABI, abi)
		}
		if d.Degraded != (abi < MaxABI) {
			t.Fatalf("degraded=%v for kernel %d", d.Degraded, abi)
		}
		if d.Degraded && !bestEffort {
			t.Fatal("degraded without --best-effort")
		}
	})
}

func TestAddRuntimeFiles(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "cpu.max")
	if err := os.WriteFile(f, []byte("max 100000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs := &Ruleset{}
	rs.AddRuntimeFiles([]string{f, f, dir, filepath.Join(dir, "missing"), "relative"}, "cgroup")
	if len(rs.Rules) != 1 || rs.Rules[0].Path != f || rs.Rules[0].Access != runtimeRead || rs.Rules[0].Origin != OriginRuntime {
		t.Fatalf("rules %+v", rs.Rules)
	}
}

// TestRuntimeProgramInWritableScope: the server's own program must not lie
// where it may write (it would rewrite what runs next time).
func TestRuntimeProgramInWritableScope(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	prog := filepath.Join(ws, "server")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	prof := &runtimeprofile.Profile{Entries: []runtimeprofile.Entry{{Path: prog, Class: runtimeprofile.ClassExec, Reason: "server executable"}}}
	for _, mode := range []schema.AccessMode{schema.AccessRead, schema.AccessWrite} {
		scope := &schema.CanonicalScope{Base: base, AccessMode: mode, AllowedPaths: []schema.CanonicalPath{{Path: ws, Kind: schema.KindDir}}}
		_, err := Derive(scope, Input{Profile: prof})
		if (err != nil) != (mode == schema.AccessWrite) {
			t.Errorf("mode %s: %v", mode, err)
		}
	}
}

// TestServerCodeWithSecondNameOrCodeDir (session 11): a code file of the
// server with a second name, or a directory the runtime loads code from
// (CPython's working directory with -m), refuses a write scope and only
// a write scope. It fails on the code before (no such check).
func TestServerCodeWithSecondNameOrCodeDir(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	outside := t.TempDir()
	code := filepath.Join(outside, "server.js")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(code, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	single := &runtimeprofile.Profile{CodeFiles: []string{code}}
	linked := &runtimeprofile.Profile{CodeFiles: []string{filepath.Join(outside, "linked.js")}}
	if err := os.WriteFile(linked.CodeFiles[0], []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(linked.CodeFiles[0], filepath.Join(ws, "other-name")); err != nil {
		t.Fatal(err)
	}
	cwdIn := &runtimeprofile.Profile{CodeDirs: []runtimeprofile.Entry{{Path: ws, Class: runtimeprofile.ClassReadTree, Reason: "the working directory"}}}
	cwdOut := &runtimeprofile.Profile{CodeDirs: []runtimeprofile.Entry{{Path: outside, Class: runtimeprofile.ClassReadTree, Reason: "the working directory"}}}
	for _, c := range []struct {
		name string
		prof *runtimeprofile.Profile
		want string // for a write scope; "" runs
	}{
		{"a code file with one name", single, ""},
		{"a code file with two names", linked, "has 2 names (hard links)"},
		{"a code directory in the write path", cwdIn, "the working directory"},
		{"a code directory outside", cwdOut, ""},
	} {
		for _, mode := range []schema.AccessMode{schema.AccessRead, schema.AccessWrite} {
			scope := &schema.CanonicalScope{Base: base, AccessMode: mode, AllowedPaths: []schema.CanonicalPath{{Path: ws, Kind: schema.KindDir}}}
			_, err := Derive(scope, Input{Profile: c.prof})
			want := c.want
			if mode == schema.AccessRead {
				want = ""
			}
			if (err != nil) != (want != "") || err != nil && !strings.Contains(err.Error(), want) {
				t.Errorf("%s, %s scope: %v, want %q", c.name, mode, err, want)
			}
		}
	}
}
