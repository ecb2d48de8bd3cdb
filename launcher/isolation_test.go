package launcher

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/ruleset"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
	"github.com/mcpwarden/mcpwarden/schema"
)

// TestSymlinkChains: every symlink met resolving a literal path is
// listed, including those inside a link's target, so that the minimal root
// resolves the name as the host does.
func TestSymlinkChains(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	for _, d := range []string{"usr/lib/x86_64", "usr/lib64"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/lib/x86_64/ld.so.2"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"lib":                 "usr/lib",                                 // relative, like merged /usr
		"lib64":               "usr/lib64",                               // relative
		"usr/lib64/ld.so.2":   filepath.Join(root, "lib/x86_64/ld.so.2"), // absolute, through another link
		"usr/lib/x86_64/ld.1": "ld.so.2",                                 // a soname link
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	got := symlinkChains([]string{
		filepath.Join(root, "lib64/ld.so.2"),
		filepath.Join(root, "lib/x86_64/ld.1"),
		filepath.Join(root, "usr/lib/x86_64/ld.so.2"), // no link on the way
		"relative/ignored",
	})
	var paths []string
	for _, l := range got {
		paths = append(paths, l.Path)
		if want := links[l.Path[len(root)+1:]]; l.Target != want {
			t.Errorf("link %s -> %s, want -> %s", l.Path, l.Target, want)
		}
	}
	want := []string{filepath.Join(root, "lib"), filepath.Join(root, "lib64"), filepath.Join(root, "usr/lib/x86_64/ld.1"), filepath.Join(root, "usr/lib64/ld.so.2")}
	if !slices.Equal(paths, want) {
		t.Errorf("links %v, want %v", paths, want)
	}
}

// TestNamespacesSpec: the minimal root gets the ruleset's paths with the
// mount flags of their layer, never /proc (the run has its own) or the
// TMPDIR (its own tmpfs), and no directory entry for a working directory
// of "/".
func TestNamespacesSpec(t *testing.T) {
	iso := &isolation{flags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID, server: &sandbox.ServerUserNS{Inside: sandbox.Identity{UID: 1000, GID: 1000}, Host: sandbox.Identity{UID: RunUIDBase, GID: RunUIDBase}}}
	rs := &ruleset.Ruleset{Rules: []ruleset.Rule{
		{Path: "/work/ws", Kind: schema.KindDir, Access: writeRights, Origin: ruleset.OriginScope},
		{Path: "/work/docs", Kind: schema.KindDir, Access: 0x4 | 0x8, Origin: ruleset.OriginScope},
		{Path: "/usr/bin/node", Kind: schema.KindFile, Access: 0x1 | 0x4, Origin: ruleset.OriginRuntime},
		{Path: "/proc/self", Kind: schema.KindDir, Access: 0x4, Origin: ruleset.OriginRuntime},
		{Path: "/tmp/mcpwarden-run-1", Kind: schema.KindDir, Access: writeRights, Origin: ruleset.OriginTmp},
	}}
	for _, dir := range []string{"/", ""} {
		ns := iso.namespaces(rs, nil, "/tmp/mcpwarden-run-1", dir, 0)
		if len(ns.Root.Dirs) != 0 {
			t.Errorf("working directory %q: dirs %v", dir, ns.Root.Dirs)
		}
		spec, _ := json.Marshal(&sandbox.Spec{Exe: "/usr/bin/node", Argv: []string{"node"}, NS: ns})
		if _, err := sandbox.ReadSpec(bytes.NewReader(spec)); err != nil {
			t.Errorf("working directory %q: the helper refuses the spec: %v", dir, err)
		}
	}
	ns := iso.namespaces(rs, nil, "/tmp/mcpwarden-run-1", "/work/ws", 0)
	want := []sandbox.Mount{
		{Path: "/work/ws", Dir: true, Write: true, Idmap: true},
		{Path: "/work/docs", Dir: true, Idmap: true},
		{Path: "/usr/bin/node", Exec: true},
	}
	if !slices.Equal(ns.Root.Mounts, want) {
		t.Errorf("mounts %+v, want %+v", ns.Root.Mounts, want)
	}
	if ns.Root.TmpOwner != iso.server.Host || ns.Root.Tmp != "/tmp/mcpwarden-run-1" || ns.Root.Staging != ns.Root.Tmp {
		t.Errorf("tmp %+v", ns.Root)
	}
	if (&isolation{}).namespaces(rs, nil, "/tmp/x", "/", 0) != nil {
		t.Error("a run without namespaces got a namespace spec")
	}
}

// TestDegrade: the kernel's refusals become stable reasons; required
// namespaces become an *IsolationError that says what to do.
func TestDegrade(t *testing.T) {
	scope := &schema.CanonicalScope{}
	for _, c := range []struct {
		err     error
		userNS  bool
		reason  string
		hintSub string
	}{
		{syscall.EPERM, true, "userns_denied", "apparmor_restrict_unprivileged_userns"},
		{syscall.ENOSPC, true, "userns_limit", "user.max_user_namespaces"},
		{syscall.EINVAL, false, "namespaces_unsupported", "CONFIG_USER_NS"},
		{syscall.EPERM, false, "namespaces_denied", ""},
	} {
		iso := &isolation{flags: syscall.CLONE_NEWNS, userNS: c.userNS}
		if err := iso.degrade(&os.PathError{Op: "fork/exec", Err: c.err}, scope); err != nil || iso.flags != 0 || iso.nsReason != c.reason {
			t.Errorf("%v: err %v, flags %#x, reason %q; want %q", c.err, err, iso.flags, iso.nsReason, c.reason)
		}
		for _, l := range iso.layers() {
			if l.Name == schema.LayerMountNS && (l.State != schema.LayerOff || l.Reason != c.reason) {
				t.Errorf("%v: mountns layer %+v", c.err, l)
			}
		}
		req := &isolation{flags: syscall.CLONE_NEWNS, userNS: c.userNS, required: true}
		err := req.degrade(c.err, scope)
		var ie *IsolationError
		if !errors.As(err, &ie) || ie.Missing != c.reason || !errors.Is(err, c.err) {
			t.Errorf("required, %v: %v", c.err, err)
		} else if !strings.Contains(err.Error(), "requires namespaces") || !strings.Contains(err.Error(), c.hintSub) {
			t.Errorf("required, %v: %q lacks %q", c.err, err, c.hintSub)
		}
	}
}

// TestParseOwner: names and numbers, with or without a group; refusals
// name the flag.
func TestParseOwner(t *testing.T) {
	for in, want := range map[string]sandbox.Identity{"4242": {UID: 4242, GID: 4242}, "4242:7": {UID: 4242, GID: 7}, "root": {}, "root:0": {}} {
		got, err := parseOwner(in)
		if err != nil || got != want {
			t.Errorf("parseOwner(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"no-such-user-mcpwarden", "4242:no-such-group-mcpwarden"} {
		if _, err := parseOwner(in); !errors.Is(err, ErrUsage) {
			t.Errorf("parseOwner(%q): %v, want a usage error", in, err)
		}
	}
}

// TestParseOwnerThroughGetent: mcpwarden is static (no cgo), so os/user
// reads /etc/passwd and /etc/group only; a user or group the host knows
// through its name services alone (LDAP, sssd) is found with getent, and
// an entry getent gives that is malformed or for another name is refused.
// It fails on the code before (os/user alone: no such user).
func TestParseOwnerThroughGetent(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "getent")
	// The fake answers from files named after its arguments: DB_KEY.
	script := "#!/bin/sh\n[ \"$2\" = -- ] || exit 9\ncat \"" + dir + "/$1_$3\" 2>/dev/null || exit 2\n"
	testenv.WriteFiles(t, map[string]string{
		fake: script,
		filepath.Join(dir, "passwd_nss-alice-mcpwarden"): "nss-alice-mcpwarden:x:5001:5002:Alice:/home/alice:/bin/sh\n",
		filepath.Join(dir, "passwd_5001"):                "nss-alice-mcpwarden:x:5001:5002:Alice:/home/alice:/bin/sh\n",
		filepath.Join(dir, "group_nss-staff-mcpwarden"):  "nss-staff-mcpwarden:x:6001:alice\n",
		filepath.Join(dir, "passwd_nss-other"):           "someone-else:x:5003:5003::/:/bin/sh\n",
		filepath.Join(dir, "passwd_nss-two"):             "nss-two:x:5004:5004::/:/bin/sh\nnss-two:x:5005:5005::/:/bin/sh\n",
		filepath.Join(dir, "passwd_nss-short"):           "nss-short:x:5006\n",
		filepath.Join(dir, "passwd_nss-bad"):             "nss-bad:x:-1:5007::/:/bin/sh\n",
		filepath.Join(dir, "passwd_nss-huge"):            "nss-huge:x:4294967295:5008::/:/bin/sh\n",
		filepath.Join(dir, "group_nss-other-group"):      "wheel:x:10:\n",
	})
	if err := os.Chmod(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	old := getentPath
	getentPath = fake
	t.Cleanup(func() { getentPath = old })
	for in, want := range map[string]sandbox.Identity{
		"nss-alice-mcpwarden": {UID: 5001, GID: 5002},
		"5001":                {UID: 5001, GID: 5002}, // a number: its primary group
		"nss-alice-mcpwarden:nss-staff-mcpwarden": {UID: 5001, GID: 6001},
		"root":                     {}, // /etc/passwd first
		"4242:nss-staff-mcpwarden": {UID: 4242, GID: 6001},
	} {
		got, err := parseOwner(in)
		if err != nil || got != want {
			t.Errorf("parseOwner(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"nss-other", "nss-two", "nss-short", "nss-bad", "nss-huge", "nss-missing", "4242:nss-other-group", "-x", "4242:-x"} {
		if id, err := parseOwner(in); !errors.Is(err, ErrUsage) {
			t.Errorf("parseOwner(%q) = %+v, %v; want a usage error", in, id, err)
		}
	}
}
