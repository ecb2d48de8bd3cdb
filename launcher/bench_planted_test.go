package launcher_test

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkRunEndPlantedCheck is what the check for names planted in a
// write scope (docs/launcher.md, "Names planted in a write scope") adds to
// a run's end, out of process: time from the client closing its stdin
// (the trivial server, internal/mcpecho, then exits) to the exit of
// `mcpwarden run` with a write scope, this build against an older one
// ($MCPWARDEN_OLD_BIN) in one alternating rotation, with a small
// workspace and a 50,000-entry one (500 directories of 99 files, a .env,
// a .vscode/tasks.json). Run with -benchtime 20x or more.
func BenchmarkRunEndPlantedCheck(b *testing.B) {
	command := smallAnd50kRuns(b, map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"}, func(small, large string) map[string]string {
		return map[string]string{
			filepath.Join(small, "allowed", "a.txt"): "a", filepath.Join(small, "allowed", ".env"): "e",
			filepath.Join(large, "allowed", ".env"): "e", filepath.Join(large, "allowed", ".vscode", "tasks.json"): "{}",
		}
	})
	reportSmallAnd50k(b, alternateLaunches(b, smallAnd50kKinds, command, runEnd))
}

// runEnd starts cmd, waits for its answer to initialize, then times from
// closing its stdin to its exit.
func runEnd(b *testing.B, cmd *exec.Cmd) time.Duration {
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	if _, err := io.WriteString(in, initializeRequest); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, `"result"`) {
		b.Fatalf("%s: first answer %q: %v\n%s", filepath.Base(cmd.Path), line, err, stderr.String())
	}
	start := time.Now()
	in.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("%s: %v\n%s", filepath.Base(cmd.Path), err, stderr.String())
	}
	return time.Since(start)
}
