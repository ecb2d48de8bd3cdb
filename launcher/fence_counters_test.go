package launcher_test

import (
	"strconv"
	"testing"

	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"golang.org/x/sys/unix"
)

// TestFenceInotifyInstancesOfTheHost: the run cannot use up the inotify
// instances of the host uid it would share them with. The kernel counts
// them per uid (fs.inotify.max_user_instances, 128 by default) and charges
// a process in a user namespace to the namespace's owner too: a server in
// a user namespace owned by root (or running as root without namespaces)
// holding 128 of them left every root process of the host (systemd, udev,
// this test) with EMFILE.
func TestFenceInotifyInstancesOfTheHost(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	for _, noNS := range []bool{false, true} {
		name := "namespaces"
		if noNS {
			name = "no namespaces"
		}
		t.Run(name, func(t *testing.T) {
			hostInotify := func() error {
				fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
				if err == nil {
					unix.Close(fd)
				}
				return err
			}
			if err := hostInotify(); err != nil {
				t.Fatalf("this host's root has no inotify instance to spare before the run: %v", err)
			}
			w := newWorkspace(t)
			scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
			s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
			r := s.Do(map[string]any{"op": "inotify_hog", "n": 100000})
			hostErr := hostInotify()
			s.Do(map[string]any{"op": "inotify_release"})
			if code := s.Close(); code != 0 {
				t.Errorf("exit %d: %s", code, s.Stderr())
			}
			if hostErr != nil {
				t.Fatalf("ESCAPE: with the run holding %s inotify instances, root outside it gets none: %v", r.Data, hostErr)
			}
			if noNS {
				// Without the server's own user namespace the instances
				// would be the owner's: refused (and useless: watches are).
				if r.OK || r.Errno != "EPERM" {
					t.Fatalf("inotify instances without the run's own user namespace: %+v, want EPERM", r)
				}
				return
			}
			// With it the server has the dedicated uid's own instances
			// (a server that watches files still works).
			if n, _ := strconv.Atoi(r.Data); !r.OK || n == 0 {
				t.Fatalf("the server got no inotify instance of its own: %+v", r)
			}
		})
	}
}
