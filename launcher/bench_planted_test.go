package launcher_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/internal/fencetest"
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
	fencetest.RequireFence(b)
	bins := fencetest.Build(b)
	old := os.Getenv(EnvOldMcpwarden)
	if old == "" {
		b.Skipf("%s is not set: this benchmark compares with an older build", EnvOldMcpwarden)
	}
	dir := b.TempDir()
	echo := filepath.Join(dir, "mcpecho")
	if err := testenv.GoBuild(echo, "./internal/mcpecho", "CGO_ENABLED=0"); err != nil {
		b.Fatal(err)
	}
	small := filepath.Join(dir, "small")
	large := filepath.Join(dir, "large")
	testenv.WriteFiles(b, map[string]string{
		filepath.Join(small, "allowed", "a.txt"): "a", filepath.Join(small, "allowed", ".env"): "e",
		filepath.Join(large, "allowed", ".env"): "e", filepath.Join(large, "allowed", ".vscode", "tasks.json"): "{}",
	})
	for d := 0; d < 500; d++ {
		sub := filepath.Join(large, "allowed", fmt.Sprintf("d%d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := 0; f < 99; f++ {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d.txt", f)), nil, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	scope := fencetest.WriteScope(b, dir, map[string]any{"allowed_paths": []string{"allowed"}, "access_mode": "write"})
	log := filepath.Join(dir, "audit.jsonl")
	kinds := []string{"new-small", "old-small", "new-50k", "old-50k"}
	times := map[string][]time.Duration{}
	i := 0
	for b.Loop() {
		for k := range kinds {
			kind := kinds[(i+k)%len(kinds)]
			bin, base := bins.Mcpwarden, small
			if strings.HasPrefix(kind, "old") {
				bin = old
			}
			if strings.HasSuffix(kind, "50k") {
				base = large
			}
			cmd := exec.Command(bin, "run", "--scope", scope, "--base", base, "--audit-log", log, "--", echo)
			cmd.Dir = base
			times[kind] = append(times[kind], runEnd(b, cmd))
		}
		i++
	}
	for _, k := range kinds {
		b.ReportMetric(medianMs(times[k]), k+"-ms")
	}
	b.ReportMetric(medianMs(times["new-small"])-medianMs(times["old-small"]), "small-added-ms")
	b.ReportMetric(medianMs(times["new-50k"])-medianMs(times["old-50k"]), "50k-added-ms")
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
