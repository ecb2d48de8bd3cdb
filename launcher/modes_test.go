package launcher_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// TestFenceNoWorldWritable: a write scope's server cannot leave the
// workspace, its own directory included, writable by every local user:
// chmod with S_IWOTH (by path, by descriptor, through O_PATH) is refused,
// and umask(0) leaves the mask alone, so mkdir(0777), open(0666),
// mknod(0666) and O_TMPFILE + linkat never give others write. The launcher
// runs with an inherited umask of 0, so the exec stage's S_IWOTH is what
// keeps the creation modes closed. The modes on disk are checked after the
// run.
func TestFenceNoWorldWritable(t *testing.T) { fencetest.ForEachLayering(t, testFenceNoWorldWritable) }

func testFenceNoWorldWritable(t *testing.T, noNS bool) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS,
		Wrapper: []string{"sh", "-c", `umask 0 && exec "$@"`, "sh"}})
	in := func(n string) string { return filepath.Join(w.allowed, n) }
	// Under --no-namespaces modes by path are refused outright (metadata),
	// and by descriptor too unless the server owns no host file.
	eperm := []string{"EPERM"}
	cases := []fenceCase{
		{name: "chmod 0777 of the workspace", req: map[string]any{"op": "chmod_mode", "path": w.allowed, "mode": 0o777}, errno: eperm, exact: true},
		{name: "fchmodat 1777 of the workspace", req: map[string]any{"op": "chmod_mode", "path": w.allowed, "mode": 0o1777, "n": 1}, errno: eperm, exact: true},
		{name: "fchmodat2 0757 of the workspace", req: map[string]any{"op": "chmod_mode", "path": w.allowed, "mode": 0o757, "n": 2}, errno: eperm, exact: true},
		{name: "fchmod 0777 of the workspace", req: map[string]any{"op": "fchmod", "path": w.allowed, "mode": 0o777}, errno: eperm, exact: true},
		{name: "fchmod 1777 of the workspace", req: map[string]any{"op": "fchmod", "path": w.allowed, "mode": 0o1777}, errno: eperm, exact: true},
		{name: "chmod 0666 of a file", req: map[string]any{"op": "chmod_mode", "path": w.deep1, "mode": 0o666}, errno: eperm, exact: true},
		{name: "fchmod 0666 of a file", req: map[string]any{"op": "fchmod", "path": w.deep1, "mode": 0o666}, errno: eperm, exact: true},
		{name: "fchmodat2 AT_EMPTY_PATH on O_PATH 0777", req: map[string]any{"op": "fchmodat2_empty_path", "path": w.allowed, "mode": 0o777}, errno: eperm, exact: true},
		// The kernel: fchmod needs a descriptor opened for I/O (the filter
		// refuses 0777 before it, and any fchmod under --no-namespaces).
		{name: "fchmod on O_PATH 0777", req: map[string]any{"op": "fchmod_opath", "path": w.allowed, "mode": 0o777}, errno: eperm, exact: true},
		{name: "fchmod on O_PATH 0700", req: map[string]any{"op": "fchmod_opath", "path": w.allowed, "mode": 0o700}, errno: []string{"EBADF", "EPERM"}, exact: true},
		{name: "access ACL with others rwx", req: map[string]any{"op": "setacl", "path": w.allowed, "mode": 0o777}, errno: append([]string{"ENOTSUP", "EOPNOTSUPP"}, metaDenied...)},
		{name: "default ACL", req: map[string]any{"op": "setxattr", "path": w.allowed, "name": "system.posix_acl_default", "value": "x"}, errno: metaDenied},
		// umask(0) is answered 0 without running: the launcher's 0 became
		// 002, and stays.
		{name: "umask read", req: map[string]any{"op": "umask_read"}, wantOK: true, data: "0 0002"},
		{name: "umask 0 then mkdir 0777", req: map[string]any{"op": "umask_create", "path": in("d777"), "n": 0}, wantOK: true, data: "775"},
		{name: "umask 0 then open 0666", req: map[string]any{"op": "umask_create", "path": in("f666"), "n": 1}, wantOK: true, data: "664"},
		// A scope grants no fifos (Landlock's MAKE_FIFO).
		{name: "umask 0 then mknod fifo 0666", req: map[string]any{"op": "umask_create", "path": in("p666"), "n": 2}, errno: []string{"EACCES"}, exact: true},
		{name: "umask 0 then O_TMPFILE 0666 and linkat", req: map[string]any{"op": "umask_create", "path": w.allowed, "to": in("t666"), "n": 3}, wantOK: true, data: "664"},
	}
	if !noNS {
		// Group write stays where modes may change at all.
		cases = append(cases,
			fenceCase{name: "chmod 0775 of the workspace", req: map[string]any{"op": "chmod_mode", "path": w.allowed, "mode": 0o775}, wantOK: true},
			fenceCase{name: "fchmod 0664 of a file", req: map[string]any{"op": "fchmod", "path": w.deep1, "mode": 0o664}, wantOK: true})
	}
	runCases(t, s, cases)
	// A file made in the server's TMPDIR (umask 0, 0666, fchmod 0666) and
	// renamed into the workspace: refused across mounts (namespaces: the
	// private /tmp) or by Landlock, or arrives without others' write.
	r := s.Do(map[string]any{"op": "tmpdir_rename", "to": in("from-tmp"), "mode": 0o666})
	switch {
	case r.OK && r.Data != "664" && r.Data != "644":
		t.Errorf("renamed from TMPDIR with mode %s", r.Data)
	case !r.OK && r.Errno != "EXDEV" && r.Errno != "EACCES":
		t.Errorf("rename from TMPDIR: %s %s", r.Errno, r.Error)
	}
	t.Logf("rename from TMPDIR: ok=%v %s %s", r.OK, r.Errno, r.Data)
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
	// On disk, after the run: nothing in the workspace lets others write.
	err := filepath.Walk(w.allowed, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink == 0 && fi.Mode().Perm()&0o002 != 0 {
			t.Errorf("%s is writable by others after the run: %v", p, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
