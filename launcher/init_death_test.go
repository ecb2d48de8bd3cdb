package launcher_test

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
)

// TestInitDiesWithItsLauncherDuringSetUp: a run with a pid namespace has no
// watcher, so its init must die with the launcher from its first step, not
// only once it has dropped its privileges. Here the init (the real C init,
// mcpwarden-exec started as mcpwarden-init, pid 1 of a new pid and mount
// namespace, started by unshare standing in for the launcher) waits for a
// plan that never comes, is stopped there —
// a set-up step that hangs —, and its launcher is SIGKILLed: the init must
// go. (Seen: a Go init that spun for an hour in its privilege drop outlived
// the launcher a probe had SIGKILLed, with its exec stage and cgroup.)
func TestInitDiesWithItsLauncherDuringSetUp(t *testing.T) {
	testenv.RequireRoot(t)
	init := fencetest.Build(t).ExecStage
	unshare := testenv.RequireCommand(t, "unshare")
	bash := testenv.RequireCommand(t, "bash")
	specR, specW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer specW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer statusR.Close()
	// bash, as pid 1, becomes the init under its own argv[0].
	launcher := exec.Command(unshare, "--pid", "--mount", "--fork", bash, "-c", `exec -a `+sandbox.InitName+` "$0" `+sandbox.InitArg, init)
	launcher.ExtraFiles = []*os.File{specR, statusW} // fds 3 and 4: the spec and the status pipe
	if err := launcher.Start(); err != nil {
		t.Fatal(err)
	}
	specR.Close()
	statusW.Close()
	defer func() { _ = launcher.Process.Kill(); _, _ = launcher.Process.Wait() }()

	// The init is unshare's child; wait until it blocks reading its spec.
	var initPID int
	deadline := time.Now().Add(2 * time.Minute)
	for initPID == 0 || !strings.Contains(readProc(initPID, "wchan"), "pipe_read") || readProc(initPID, "comm") != sandbox.InitName+"\n" {
		if time.Now().After(deadline) {
			t.Fatalf("the init (pid %d) never waited for its spec", initPID)
		}
		if initPID == 0 {
			kids := strings.Fields(readProc(launcher.Process.Pid, "task/"+strconv.Itoa(launcher.Process.Pid)+"/children"))
			if len(kids) > 0 {
				initPID, _ = strconv.Atoi(kids[0])
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer syscall.Kill(initPID, syscall.SIGKILL) // if the test fails: leave nothing behind
	if err := syscall.Kill(initPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := launcher.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _ = launcher.Process.Wait()
	deadline = time.Now().Add(2 * time.Minute)
	for alive(initPID) {
		if time.Now().After(deadline) {
			t.Fatalf("the run's init (pid %d) outlived its SIGKILLed launcher (stopped during its set-up)", initPID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readProc(pid int, name string) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + name)
	return string(b)
}
