package launcher_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

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

// TestFenceHostAIOBudget: the run cannot use up the host's Linux AIO
// budget. fs.aio-max-nr (65536 events) is one count for every process of
// the host, whatever its uid or namespaces: a server making io_setup
// contexts until EAGAIN left every other process (a database's libaio,
// qemu) unable to make one. The filter answers the AIO calls ENOSYS, as a
// kernel without AIO does.
func TestFenceHostAIOBudget(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	hostAIO := func() error {
		var ctx uint64
		if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
			return e
		}
		_, _, _ = unix.Syscall(unix.SYS_IO_DESTROY, uintptr(ctx), 0, 0)
		return nil
	}
	for _, noNS := range []bool{false, true} {
		name := "namespaces"
		if noNS {
			name = "no namespaces"
		}
		t.Run(name, func(t *testing.T) {
			if err := hostAIO(); err != nil {
				t.Fatalf("this host has no AIO context to spare before the run: %v", err)
			}
			w := newWorkspace(t)
			scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
			s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
			// The contexts are held until the server exits (the end of the
			// run frees them).
			r := s.Do(map[string]any{"op": "aio_hog", "n": 64})
			if err := hostAIO(); err != nil {
				t.Errorf("ESCAPE: with the run holding %s AIO contexts, a process outside it gets none: %v", r.Data, err)
			}
			if r.OK || r.Errno != "ENOSYS" {
				t.Errorf("io_setup under the fence: %+v, want ENOSYS", r)
			}
			if code := s.Close(); code != 0 {
				t.Errorf("exit %d: %s", code, s.Stderr())
			}
		})
	}
}

// TestFencePendingSignalsOfTheHost: with its own user namespace, the run
// queues signals against its dedicated uid, not against host root's
// pending-signal count (RLIMIT_SIGPENDING, counted per user and charged to
// each user namespace's owner): a server in a namespace owned by root
// queueing real-time signals to itself until EAGAIN left every root
// process of the host unable to sigqueue() or arm a POSIX timer. Without
// that namespace the server shares its uid's count (docs/launcher.md,
// Known limits): that case is not run here, it would starve the CI host.
func TestFencePendingSignalsOfTheHost(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	const sig = 50 // a real-time signal nothing here uses
	hostQueue := func() error {
		info := struct {
			signo, errno, code int32
			_                  [116]byte
		}{signo: sig, code: -1 /* SI_QUEUE */}
		// Delivered at once (and dropped by the Go runtime): only whether
		// the kernel had room to queue it matters.
		_, _, e := unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, uintptr(unix.Getpid()), sig, uintptr(unsafe.Pointer(&info)))
		if e != 0 {
			return e
		}
		return nil
	}
	if err := hostQueue(); err != nil {
		t.Fatalf("this host's root cannot queue a signal before the run: %v", err)
	}
	w := newWorkspace(t)
	scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
	s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base})
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_SIGPENDING, &lim); err != nil {
		t.Fatal(err)
	}
	n := int(min(lim.Cur, 1<<21))
	r := s.Do(map[string]any{"op": "sigqueue_hog", "sig": sig, "n": n})
	if err := hostQueue(); err != nil {
		t.Errorf("ESCAPE: with the run holding %s pending signals, root outside it can queue none: %v", r.Data, err)
	}
	if got, _ := strconv.Atoi(r.Data); !r.OK || got == 0 {
		t.Errorf("the server queued no signal to itself: %+v", r)
	}
	if code := s.Close(); code != 0 {
		t.Errorf("exit %d: %s", code, s.Stderr())
	}
}

// TestFenceHugePagePool: the run cannot take the host's reserved huge
// pages. vm.nr_hugepages is one pool for every process of the host, which
// no limit of the run bounds (its cgroup sets no hugetlb limit): a server
// mapping MAP_HUGETLB until ENOMEM left the database or VM they were
// reserved for without them. The test reserves a few 2 MiB pages (and
// gives them back); the filter answers MAP_HUGETLB and MFD_HUGETLB ENOMEM,
// as an empty pool does.
func TestFenceHugePagePool(t *testing.T) {
	fencetest.RequireFence(t)
	b := fencetest.Build(t)
	const knob = "/proc/sys/vm/nr_hugepages"
	const free = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"
	readInt := func(p string) int {
		t.Helper()
		v, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(v)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	orig := readInt(knob)
	if err := os.WriteFile(knob, []byte(strconv.Itoa(orig+4)), 0); err != nil {
		t.Fatalf("reserve huge pages: %v", err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(knob, []byte(strconv.Itoa(orig)), 0); err != nil {
			t.Errorf("give the huge pages back (%s to %d): %v", knob, orig, err)
		}
	})
	if readInt(free) == 0 {
		t.Fatalf("the kernel reserved no 2 MiB huge page (%s %d → %d, none free): memory too fragmented", knob, orig, readInt(knob))
	}
	hostHuge := func() error {
		m, err := unix.Mmap(-1, 0, 2<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB)
		if err == nil {
			_ = unix.Munmap(m)
		}
		return err
	}
	for _, noNS := range []bool{false, true} {
		name := "namespaces"
		if noNS {
			name = "no namespaces"
		}
		t.Run(name, func(t *testing.T) {
			if err := hostHuge(); err != nil {
				t.Fatalf("no huge page to map before the run: %v", err)
			}
			w := newWorkspace(t)
			scope := fencetest.WriteScope(t, t.TempDir(), map[string]any{"allowed_paths": []string{"allowed"}})
			s := fencetest.Start(t, b, fencetest.StartOptions{Scope: scope, Base: w.base, NoNamespaces: noNS})
			r := s.Do(map[string]any{"op": "hugetlb_hog", "n": 1 << 16})
			if err := hostHuge(); err != nil {
				t.Errorf("ESCAPE: with the run holding %s huge pages, a process outside it maps none: %v", r.Data, err)
			}
			if r.OK || r.Errno != "ENOMEM" {
				t.Errorf("MAP_HUGETLB under the fence: %+v, want ENOMEM", r)
			}
			if code := s.Close(); code != 0 {
				t.Errorf("exit %d: %s", code, s.Stderr())
			}
		})
	}
}
