package launcher_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// TestFenceFileAttacks: a write scope, attacked through every way the
// kernel has to make, move or reach a file besides open(): hard links
// (through a symlink, /proc/self/exe, to a set-uid file), renameat2's
// exchange and whiteout, the workspace's own name and its parents,
// O_TMPFILE made visible with linkat, copies between descriptors, file
// handles, set-id bits and file capabilities by every call, times through
// the *at and descriptor variants, and exec of a workspace file through
// an O_PATH descriptor. Nothing outside the scope is reached and nothing
// but plain files and directories lands in the workspace.
func TestFenceFileAttacks(t *testing.T) { fencetest.ForEachLayering(t, testFenceFileAttacks) }

func testFenceFileAttacks(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	suid := filepath.Join(w.outside, "suid-tool")
	if err := os.WriteFile(suid, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, 0o4755); err != nil {
		t.Fatal(err)
	}
	// A script whose interpreter does not exist: exec'd, it fails with
	// ENOENT without replacing the server.
	noInterp := filepath.Join(w.allowed, "no-interp.sh")
	if err := os.WriteFile(noInterp, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, w.secret, suid)
	naive, err := os.Stat(b.Naive)
	if err != nil {
		t.Fatal(err)
	}
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
	in := func(n string) string { return filepath.Join(w.allowed, n) }
	tmp := envOf(t, s, "TMPDIR")
	cross := append([]string{"EXDEV"}, denied...)
	runCases(t, s, []fenceCase{
		// Links.
		{name: "hard link through a symlink to a file outside", req: map[string]any{"op": "link_follow", "path": in("link-out.txt"), "to": in("hl-secret")}, errno: cross},
		{name: "hard link to a set-uid file outside", req: map[string]any{"op": "link", "path": suid, "to": in("hl-suid")}, errno: cross},
		{name: "hard link to the runtime's executable", req: map[string]any{"op": "link", "path": b.Naive, "to": in("hl-exe")}, errno: cross},
		{name: "hard link through /proc/self/exe", req: map[string]any{"op": "link_follow", "path": "/proc/self/exe", "to": in("hl-proc-exe")}, errno: cross},
		// Renames.
		{name: "RENAME_EXCHANGE with a file outside", req: map[string]any{"op": "renameat2", "path": w.deep1, "to": w.secret, "flags": unix.RENAME_EXCHANGE}, errno: cross},
		{name: "RENAME_EXCHANGE of the workspace with a sibling", req: map[string]any{"op": "renameat2", "path": w.allowed, "to": w.sibling, "flags": unix.RENAME_EXCHANGE}, errno: cross},
		{name: "RENAME_WHITEOUT leaves a device node", req: map[string]any{"op": "renameat2", "path": w.deep1, "to": in("whiteout-moved"), "flags": unix.RENAME_WHITEOUT}, errno: []string{"EINVAL"}, exact: true},
		{name: "rename the workspace itself", req: map[string]any{"op": "renameat2", "path": w.allowed, "to": filepath.Join(w.base, "moved")}, errno: append([]string{"EBUSY"}, cross...)},
		{name: "rename the workspace's parent", req: map[string]any{"op": "renameat2", "path": w.base, "to": filepath.Join(filepath.Dir(w.base), "moved")}, errno: append([]string{"EBUSY"}, cross...)},
		{name: "rename a file out of the workspace's parent", req: map[string]any{"op": "renameat2", "path": filepath.Join(w.sibling, "s.txt"), "to": in("stolen")}, errno: cross},
		{name: "rename within the workspace still works", req: map[string]any{"op": "renameat2", "path": w.deep10, "to": in("deep-moved.txt")}, wantOK: true, data: "gone"},
		// O_TMPFILE.
		{name: "O_TMPFILE in the workspace, linked in", req: map[string]any{"op": "tmpfile_link", "path": w.allowed, "to": in("tmpfile-proc"), "data": "x"}, wantOK: true},
		{name: "O_TMPFILE linked in with AT_EMPTY_PATH", req: map[string]any{"op": "tmpfile_link", "path": w.allowed, "to": in("tmpfile-empty"), "data": "x", "flags": 1}, wantOK: true},
		{name: "O_TMPFILE in the workspace, linked outside", req: map[string]any{"op": "tmpfile_link", "path": w.allowed, "to": filepath.Join(w.outside, "tmpfile"), "data": "x"}, errno: cross},
		{name: "O_TMPFILE outside", req: map[string]any{"op": "tmpfile_link", "path": w.outside, "to": in("tmpfile-out"), "data": "x"}, errno: cross},
		// Copies by descriptor: the open decides.
		{name: "copy_file_range from a file outside", req: map[string]any{"op": "copy_fd", "path": w.secret, "to": in("c0"), "n": 0}, errno: denied},
		{name: "sendfile from a file outside", req: map[string]any{"op": "copy_fd", "path": w.secret, "to": in("c1"), "n": 1}, errno: denied},
		{name: "splice from a file outside", req: map[string]any{"op": "copy_fd", "path": w.secret, "to": in("c2"), "n": 2}, errno: denied},
		{name: "sendfile through a symlink out", req: map[string]any{"op": "copy_fd", "path": in("link-out.txt"), "to": in("c3"), "n": 1}, errno: denied},
		// File handles.
		{name: "open_by_handle_at of a file outside", req: map[string]any{"op": "open_by_handle", "path": w.secret, "to": w.allowed}, errno: []string{"EPERM"}},
		{name: "open_by_handle_at of a file inside", req: map[string]any{"op": "open_by_handle", "path": w.deep1, "to": w.allowed}, errno: []string{"EPERM"}, exact: true},
		// Set-id bits and file capabilities, by every call.
		{name: "chmod set-uid", req: map[string]any{"op": "chmod_mode", "path": in("a.txt"), "mode": 0o4755, "n": 0}, errno: []string{"EPERM"}, exact: true},
		{name: "fchmodat set-gid", req: map[string]any{"op": "chmod_mode", "path": in("a.txt"), "mode": 0o2755, "n": 1}, errno: []string{"EPERM"}, exact: true},
		{name: "fchmodat2 set-uid", req: map[string]any{"op": "chmod_mode", "path": in("a.txt"), "mode": 0o6755, "n": 2}, errno: []string{"EPERM"}, exact: true},
		{name: "a set-gid directory", req: map[string]any{"op": "chmod_mode", "path": w.allowed, "mode": 0o2777, "n": 0}, errno: []string{"EPERM"}, exact: true},
		{name: "fchmodat2 of the runtime's executable", req: map[string]any{"op": "chmod_mode", "path": b.Naive, "mode": 0o777, "n": 2}, errno: metaDenied},
		{name: "a file capability (security.capability)", req: map[string]any{"op": "setxattr", "path": in("a.txt"), "name": "security.capability", "value": "x"}, errno: []string{"EPERM"}, exact: true},
		// Times through the other calls.
		{name: "futimesat outside", req: map[string]any{"op": "futimesat", "path": w.secret}, errno: metaDenied},
		{name: "utimensat AT_EMPTY_PATH on the runtime", req: map[string]any{"op": "utimensat_empty_path", "path": b.Naive}, errno: metaDenied},
		// The symlink's own times, in the workspace: what the mounts let
		// change with the mount namespace, refused by seccomp without it.
		{name: "times of a symlink (not of its target outside)", req: map[string]any{"op": "utimes_nofollow", "path": in("link-out.txt")}, wantOK: s.Namespaces, errno: []string{"EPERM"}},
		// Exec of a workspace file through a descriptor.
		{name: "execveat of an O_PATH descriptor", req: map[string]any{"op": "exec_opath", "path": noInterp}, errno: denied},
		{name: "exec of /proc/self/fd of an O_PATH descriptor", req: map[string]any{"op": "exec_opath", "path": noInterp, "n": 1}, errno: denied},
		{name: "exec of the runtime through /proc/self/fd still works", req: map[string]any{"op": "exec_opath", "path": b.Naive, "n": 1}, wantOK: true, data: "pong"},
		// TMPDIR's files: a regular file may come in (it is the server's
		// own bytes); a directory of links and FIFOs may not (TestNSPlanting).
		{name: "O_TMPFILE of TMPDIR linked into the workspace", req: map[string]any{"op": "tmpfile_link", "path": tmp, "to": in("from-tmp"), "data": "x"}, wantOK: !s.Namespaces, errno: []string{"EXDEV"}},
	})
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	if after := snapshot(t, w.secret, suid); after != before {
		t.Errorf("metadata outside the scope changed:\nbefore %s\nafter  %s", before, after)
	}
	if st, err := os.Stat(b.Naive); err != nil || st.Mode() != naive.Mode() || !st.ModTime().Equal(naive.ModTime()) {
		t.Errorf("the runtime's executable changed: %v %v", st, err)
	}
	if data, err := os.ReadFile(w.secret); err != nil || string(data) != "OUTSIDE-SECRET-42" {
		t.Errorf("the file outside: %q %v", data, err)
	}
	// Only plain files, directories and the test's own symlinks in the
	// workspace; nothing set-id.
	err = filepath.Walk(w.allowed, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			if n := fi.Name(); n != "link-out.txt" && n != "dir-out" && n != "dir-sibling" {
				t.Errorf("a symlink landed in the workspace: %s", p)
			}
		case fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0:
			t.Errorf("a set-id file in the workspace: %s %v", p, fi.Mode())
		case !fi.Mode().IsRegular() && !fi.IsDir():
			t.Errorf("a %v landed in the workspace: %s (rdev %d)", fi.Mode().Type(), p, fi.Sys().(*syscall.Stat_t).Rdev)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.deep1); err != nil {
		t.Errorf("the workspace file the whiteout rename took: %v", err)
	}
}
