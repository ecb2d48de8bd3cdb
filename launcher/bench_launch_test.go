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

// EnvLandrun names the landrun binary BenchmarkLaunchVsLandrun compares
// with: landrun 0.1.18, built from its source outside this repository
// (github.com/zouuup/landrun, tag v0.1.18; it is not on the Go module
// proxy), e.g. `go build -o /tmp/landrun ./cmd/landrun` in a checkout.
const EnvLandrun = "MCPWARDEN_LANDRUN_BIN"

// EnvOldMcpwarden names another mcpwarden build (with its fence helper
// next to it) that BenchmarkLaunchVsLandrun runs alongside, as
// "mcpwarden-old": before and after a change, in the same run.
const EnvOldMcpwarden = "MCPWARDEN_OLD_BIN"

// initializeRequest is what a client sends first.
const initializeRequest = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}` + "\n"

// firstInitialize starts cmd, sends initialize and returns the time from
// the start until the answer line, then ends the process
// (stdin EOF) and waits for it.
func firstInitialize(b *testing.B, cmd *exec.Cmd) time.Duration {
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
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	if _, err := io.WriteString(in, initializeRequest); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	took := time.Since(start)
	if err != nil || !strings.Contains(line, `"id":1`) || !strings.Contains(line, `"result"`) {
		b.Fatalf("%s: first answer %q: %v\n%s", filepath.Base(cmd.Path), line, err, stderr.String())
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("%s: %v\n%s", filepath.Base(cmd.Path), err, stderr.String())
	}
	return took
}

// BenchmarkLaunchVsLandrun is the launch cost the user waits for: time
// from spawning a process to a trivial MCP server's (internal/mcpecho)
// answer to initialize, for the server started directly, under
// `mcpwarden run` with its defaults (the protocol proxy, every layer on:
// Landlock, seccomp, the namespaces, the dedicated identity, the cgroup),
// and under landrun 0.1.18 (`--best-effort --ldd --add-exec --ro DIR`;
// --best-effort because it asks for Landlock ABI 9 and this kernel has 7),
// each as its own process, alternating in a rotating order in one run.
// It reports the medians, what each adds to the direct start, and
// mcpwarden's margin over landrun (target: at most 1 ms). Run with
// -benchtime 20x or more: each iteration is one launch of each.
func BenchmarkLaunchVsLandrun(b *testing.B) {
	fencetest.RequireFence(b)
	bins := fencetest.Build(b)
	dir := b.TempDir()
	echo := filepath.Join(dir, "mcpecho")
	if err := testenv.GoBuild(echo, "./internal/mcpecho", "CGO_ENABLED=0"); err != nil {
		b.Fatal(err)
	}
	landrun := os.Getenv(EnvLandrun)
	if landrun == "" {
		b.Logf("%s is not set: landrun is left out (build landrun 0.1.18 outside the repository and point %s at it)", EnvLandrun, EnvLandrun)
	} else if _, err := os.Stat(landrun); err != nil {
		b.Fatalf("%s=%s: %v", EnvLandrun, landrun, err)
	}
	base := filepath.Join(dir, "base")
	allowed := filepath.Join(base, "allowed")
	if err := os.MkdirAll(allowed, 0o755); err != nil {
		b.Fatal(err)
	}
	scope := fencetest.WriteScope(b, dir, map[string]any{"allowed_paths": []string{"allowed"}})
	log := filepath.Join(dir, "audit.jsonl")
	kinds := []string{"direct", "mcpwarden"}
	if landrun != "" {
		kinds = append(kinds, "landrun")
	}
	old := os.Getenv(EnvOldMcpwarden)
	if old != "" {
		kinds = append(kinds, "mcpwarden-old")
	}
	command := func(kind string) *exec.Cmd {
		var cmd *exec.Cmd
		switch kind {
		case "direct":
			cmd = exec.Command(echo)
		case "mcpwarden":
			cmd = exec.Command(bins.Mcpwarden, "run", "--scope", scope, "--base", base, "--audit-log", log, "--", echo)
		case "mcpwarden-old":
			cmd = exec.Command(old, "run", "--scope", scope, "--base", base, "--audit-log", log, "--", echo)
		case "landrun":
			cmd = exec.Command(landrun, "--best-effort", "--ldd", "--add-exec", "--ro", allowed, echo)
		}
		cmd.Dir = base
		return cmd
	}
	times := alternateLaunches(b, kinds, command, firstInitialize)
	direct := medianMs(times["direct"])
	b.ReportMetric(direct, "direct-ms")
	b.ReportMetric(medianMs(times["mcpwarden"]), "mcpwarden-ms")
	b.ReportMetric(medianMs(times["mcpwarden"])-direct, "mcpwarden-added-ms")
	summary := fmt.Sprintf("medians over %d alternating launches: direct %.2f ms, mcpwarden %.2f ms (+%.2f)", len(times["direct"]), direct, medianMs(times["mcpwarden"]), medianMs(times["mcpwarden"])-direct)
	if landrun != "" {
		b.ReportMetric(medianMs(times["landrun"]), "landrun-ms")
		b.ReportMetric(medianMs(times["landrun"])-direct, "landrun-added-ms")
		b.ReportMetric(medianMs(times["mcpwarden"])-medianMs(times["landrun"]), "over-landrun-ms")
		summary += fmt.Sprintf(", landrun %.2f ms (+%.2f); mcpwarden adds %.2f ms more than landrun (target: at most 1)",
			medianMs(times["landrun"]), medianMs(times["landrun"])-direct, medianMs(times["mcpwarden"])-medianMs(times["landrun"]))
	}
	if old != "" {
		b.ReportMetric(medianMs(times["mcpwarden-old"])-direct, "old-added-ms")
		summary += fmt.Sprintf("; %s adds %.2f ms", old, medianMs(times["mcpwarden-old"])-direct)
	}
	b.Log(summary)
}

// BenchmarkLaunchSecretWalk is what the walk of the scope for secrets
// (secretmask.go) costs a launch: time to the first initialize answer of
// internal/mcpecho under `mcpwarden run` (defaults) with a small workspace
// (a few files and a .env) and with a 50,000-entry one (500 directories of
// 99 files, a .env and a key deep down), side by side with the build
// MCPWARDEN_OLD_BIN names (required: the walk's cost is the difference),
// alternating in one run. Run with -benchtime 20x or more.
func BenchmarkLaunchSecretWalk(b *testing.B) {
	command := smallAnd50kRuns(b, map[string]any{"allowed_paths": []string{"allowed"}}, func(small, large string) map[string]string {
		return map[string]string{
			filepath.Join(small, "allowed", "a.txt"): "a", filepath.Join(small, "allowed", "src", "main.go"): "m",
			filepath.Join(small, "allowed", ".env"): "e",
			filepath.Join(large, "allowed", ".env"): "e", filepath.Join(large, "allowed", "d7", "x", "server.key"): "k",
		}
	})
	reportSmallAnd50k(b, alternateLaunches(b, smallAnd50kKinds, command, firstInitialize))
}

// smallAnd50kKinds are the kinds BenchmarkLaunchSecretWalk and
// BenchmarkRunEndPlantedCheck alternate: this build and the one
// MCPWARDEN_OLD_BIN names, each with a small workspace and a 50,000-entry
// one.
var smallAnd50kKinds = []string{"new-small", "old-small", "new-50k", "old-50k"}

// smallAnd50kRuns is the set-up those two benchmarks share: it skips
// without MCPWARDEN_OLD_BIN, builds internal/mcpecho, writes the files
// files names (given the small and the large workspace), the 500
// directories of 99 files under the large one's allowed/ and a scope of
// doc, and returns the command of each kind: `mcpwarden run` of that
// build over that workspace, running mcpecho.
func smallAnd50kRuns(b *testing.B, doc map[string]any, files func(small, large string) map[string]string) func(kind string) *exec.Cmd {
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
	testenv.WriteFiles(b, files(small, large))
	testenv.WriteTree50k(b, filepath.Join(large, "allowed"))
	scope := fencetest.WriteScope(b, dir, doc)
	log := filepath.Join(dir, "audit.jsonl")
	return func(kind string) *exec.Cmd {
		bin, base := bins.Mcpwarden, small
		if strings.HasPrefix(kind, "old") {
			bin = old
		}
		if strings.HasSuffix(kind, "50k") {
			base = large
		}
		cmd := exec.Command(bin, "run", "--scope", scope, "--base", base, "--audit-log", log, "--", echo)
		cmd.Dir = base
		return cmd
	}
}

// reportSmallAnd50k reports the median of each of smallAnd50kKinds and
// what this build adds to the older one with each workspace.
func reportSmallAnd50k(b *testing.B, times map[string][]time.Duration) {
	for _, k := range smallAnd50kKinds {
		b.ReportMetric(medianMs(times[k]), k+"-ms")
	}
	b.ReportMetric(medianMs(times["new-small"])-medianMs(times["old-small"]), "small-added-ms")
	b.ReportMetric(medianMs(times["new-50k"])-medianMs(times["old-50k"]), "50k-added-ms")
}

// alternateLaunches times each kind's command with measure
// (firstInitialize, runEnd) once per benchmark iteration, starting each
// round with the next kind, so that the kinds take turns at every
// position.
func alternateLaunches(b *testing.B, kinds []string, command func(kind string) *exec.Cmd, measure func(*testing.B, *exec.Cmd) time.Duration) map[string][]time.Duration {
	times := map[string][]time.Duration{}
	i := 0
	for b.Loop() {
		for k := range kinds {
			kind := kinds[(i+k)%len(kinds)]
			times[kind] = append(times[kind], measure(b, command(kind)))
		}
		i++
	}
	return times
}

// medianMs is the median of d in milliseconds.
func medianMs(d []time.Duration) float64 {
	return float64(median(d).Microseconds()) / 1000
}
