package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/pintest"
	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestPlantedStateDirIsRefused: the real daemon refuses a state directory a
// local user could have planted before it started (group or others may
// write to it, another user owns it, or it is a symlink to one): it would
// otherwise trust the path key, the run table and the spool found there.
// It exits naming the directory, and writes nothing into it.
func TestPlantedStateDirIsRefused(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Mcpwarden(t)
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, dir string)
	}{
		{"world writable", func(t *testing.T, dir string) {
			mkdir(t, dir)
			if err := os.Chmod(dir, 0o1777); err != nil {
				t.Fatal(err)
			}
		}},
		{"owned by another user", func(t *testing.T, dir string) {
			mkdir(t, dir)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink to another user's directory", func(t *testing.T, dir string) {
			theirs := filepath.Join(filepath.Dir(dir), "theirs")
			mkdir(t, theirs)
			if err := os.Chown(theirs, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(theirs, dir); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			state := filepath.Join(tmp, "state")
			tc.plant(t, state)
			pintest.Unload(t, state)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "daemon", "--state-dir", state,
				"--socket", filepath.Join(tmp, "sock", "daemon.sock"), "--nats-listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), "--no-crosscheck")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			// Until it exits, or shows it trusted the directory (a daemon
			// that took it keeps running; it is stopped below).
			var err error
			waiting := true
			for waiting {
				select {
				case err = <-exited:
					waiting = false
				case <-time.After(100 * time.Millisecond):
					if _, serr := os.Stat(filepath.Join(state, "path.key")); serr == nil {
						_ = cmd.Process.Kill()
						<-exited
						t.Fatalf("the daemon took the planted state directory (path.key written into it): %s", out.String())
					}
				case <-ctx.Done():
					t.Fatalf("the daemon neither refused nor used the directory in 3 minutes: %s", out.String())
				}
			}
			if err == nil {
				t.Fatalf("the daemon exited 0 with a planted state directory: %s", out.String())
			}
			if !strings.Contains(out.String(), state) {
				t.Errorf("the refusal does not name the directory: %s", out.String())
			}
			if entries, _ := os.ReadDir(state); len(entries) != 0 {
				t.Errorf("the daemon wrote %d entries into the planted directory", len(entries))
			}
		})
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

// TestDaemonStartsOnASmallDisk: the embedded NATS server's JetStream store
// is a share of the free disk, and the event stream used to ask for a fixed
// 10 GiB: on a state directory with less than ~14 GB free the daemon exited
// ("insufficient storage resources available"). The real daemon, its state
// directory on a 1 GiB tmpfs, now starts and serves its socket.
func TestDaemonStartsOnASmallDisk(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Mcpwarden(t)
	tmp := t.TempDir()
	state := smallDisk(t, tmp)
	socket := filepath.Join(tmp, "sock", "daemon.sock")
	stop := startDaemonOn(t, bin, state, socket, testenv.FreePort(t))
	stop()
}

// TestDaemonRestartsAfterItsDiskFilled: a daemon restarted after its disk
// filled up (a 700 MiB file on its 1 GiB state disk) starts and serves its
// socket. Its first start capped the stream at nine tenths of the store
// fitted to the disk then (~690 MiB); the server it restarted with fitted
// its store to the disk free now (~230 MiB), below what the stored stream
// reserves, and nats-server refuses every change to a stream while the
// loaded streams reserve more than the store: the daemon could not lower
// its cap and exited ("insufficient storage resources", before). The
// store now never falls below the stored streams' caps, and the daemon
// lowers its cap to the smaller disk.
func TestDaemonRestartsAfterItsDiskFilled(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Mcpwarden(t)
	tmp := t.TempDir()
	state := smallDisk(t, tmp)
	socket := filepath.Join(tmp, "sock", "daemon.sock")
	port := testenv.FreePort(t)
	startDaemonOn(t, bin, state, socket, port)()
	f, err := os.Create(filepath.Join(state, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for range 700 {
		if _, err := f.Write(chunk); err != nil {
			t.Fatalf("fill the state disk: %v", err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	startDaemonOn(t, bin, state, socket, port)()
}

// smallDisk mounts a 1 GiB tmpfs as the daemon state directory under tmp.
func smallDisk(t *testing.T, tmp string) string {
	t.Helper()
	state := filepath.Join(tmp, "state")
	mkdir(t, state)
	if err := syscall.Mount("tmpfs", state, "tmpfs", 0, "size=1g,mode=0700"); err != nil {
		t.Fatalf("mount a 1 GiB tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(state, syscall.MNT_DETACH) })
	pintest.Unload(t, state)
	return state
}

// startDaemonOn starts the daemon with its state in state and waits until
// it serves socket (a socket left by an earlier daemon is removed first);
// the test fails if it exits first. stop stops it (SIGTERM) and waits for
// it to exit.
func startDaemonOn(t *testing.T, bin, state, socket string, port int) (stop func()) {
	t.Helper()
	_ = os.Remove(socket)
	cmd := exec.Command(bin, "daemon", "--state-dir", state, "--socket", socket,
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", port), "--no-crosscheck")
	out := &testenv.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once bool
	stop = func() {
		if once {
			return
		}
		once = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(3 * time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("the daemon did not exit within 3 minutes of SIGTERM: %s", out.String())
		}
	}
	t.Cleanup(stop)
	deadline := time.After(3 * time.Minute)
	for {
		if _, err := os.Stat(socket); err == nil {
			return stop
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the daemon exited (%v) with its state directory on a 1 GiB disk: %s", err, out.String())
		case <-deadline:
			t.Fatalf("the daemon did not serve its socket in 3 minutes: %s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestHostNameWithUnderscoreIsRefused: a host's subject token is its name
// with '.' turned into '_' (stream.HostToken), so a host named web_1 would
// publish on web.1's subjects with web.1's rights, and the collectors
// refuse its events (schema.CheckHost). The daemon refuses to start on
// such a host, saying why, instead of publishing into that; it ran before.
func TestHostNameWithUnderscoreIsRefused(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Mcpwarden(t)
	tmp := t.TempDir()
	pintest.Unload(t, filepath.Join(tmp, "state"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// In a UTS namespace of its own, the host is named web_1.
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `echo web_1 >/proc/sys/kernel/hostname && exec "$@"`, "sh",
		bin, "daemon", "--state-dir", filepath.Join(tmp, "state"), "--socket", filepath.Join(tmp, "sock", "daemon.sock"),
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), "--no-crosscheck")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS}
	refusesToStart(ctx, t, cmd, "on host web_1", `"web_1"`, "'_'")
}

// refusesToStart runs cmd (a daemon) and fails the test unless it exits
// with an error whose output holds every one of want; one that starts is
// killed.
func refusesToStart(ctx context.Context, t *testing.T, cmd *exec.Cmd, what string, want ...string) {
	t.Helper()
	out := &testenv.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// A process group of its own, killed whole: the daemon may run under
	// a wrapper (unshare), and mcpwarden runs mcpwarden-pipeline for it.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		select {
		case err := <-exited:
			if err == nil {
				t.Fatalf("the daemon %s exited with no error, saying: %s", what, out.String())
			}
			for _, w := range want {
				if !strings.Contains(out.String(), w) {
					t.Fatalf("the daemon %s exited with %v without saying %q: %s", what, err, w, out.String())
				}
			}
			return
		case <-time.After(100 * time.Millisecond):
			if strings.Contains(out.String(), "daemon started") {
				_ = cmd.Cancel()
				<-exited
				t.Fatalf("the daemon started %s: %s", what, out.String())
			}
		case <-ctx.Done():
			t.Fatalf("the daemon %s neither refused nor started in 3 minutes: %s", what, out.String())
		}
	}
}

// TestTimeNamespaceIsRefused: the probes stamp records with the host's
// CLOCK_MONOTONIC, and the daemon turns them into wall time with its own
// clocks. In a time namespace whose monotonic clock is a day ahead (unshare
// --time, a container runtime's), it started and dated every kernel event a
// day before it happened: a call's file operations before the call, the
// run's evidence outside every call window. It refuses now, saying why.
func TestTimeNamespaceIsRefused(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Mcpwarden(t)
	tmp := t.TempDir()
	pintest.Unload(t, filepath.Join(tmp, "state"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--time", "--monotonic", "86400", "--kill-child", "--",
		bin, "daemon", "--state-dir", filepath.Join(tmp, "state"), "--socket", filepath.Join(tmp, "sock", "daemon.sock"),
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), "--no-crosscheck")
	refusesToStart(ctx, t, cmd, "in a time namespace", "time namespace", "24h0m0s")
}
