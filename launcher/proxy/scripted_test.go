package proxy

import (
	"bufio"
	"fmt"
	"os"
	"testing"

	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
)

// scriptedServers are the roles the test binary plays as a scripted MCP
// server for the proxy (TestMain): the variable names the role, its value
// is the file every frame the server receives is appended to.
var scriptedServers = []struct {
	env   string
	serve func(logPath string)
}{
	{evilEnv, evilServer},
	{modernOnlyEnv, modernOnlyServer},
	{redteamEnv, redteamServer},
	{askingEnv, askingServer},
	{sixthEnv, sixthServer},
	{seventhEnv, seventhServer},
	{modernTasksEnv, modernTasksServer},
	{floodEnv, floodServer},
	{appEnv, appServer},
	{plainEnv, plainServer},
	{ninthEnv, ninthServer},
	{uriEnv, uriServer},
	{tenthEnv, tenthServer},
	{twelfthEnv, twelfthServer},
}

func TestMain(m *testing.M) {
	for _, r := range scriptedServers {
		if logPath := os.Getenv(r.env); logPath != "" {
			r.serve(logPath)
			os.Exit(0)
		}
	}
	os.Exit(fencetest.Run(m))
}

// startScripted starts the test binary as a scripted server; env selects
// the role (scriptedServers) and its settings.
func startScripted(t testing.TB, env ...string) *procUpstream {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return startUpstream(t, env, exe)
}

// serveScript is a scripted server's loop: each line read from stdin
// (frames up to 1 MiB) is appended to the file logPath, after logPrefix,
// and handed to handle, whose send writes one frame to stdout.
func serveScript(logPath, logPrefix string, handle func(line string, send func(frame string))) {
	logf, _ := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	out := bufio.NewWriter(os.Stdout)
	send := func(s string) { out.WriteString(s + "\n"); out.Flush() }
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, logPrefix+line)
		handle(line, send)
	}
}
