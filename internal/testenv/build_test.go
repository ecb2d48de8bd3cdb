package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExecStageBuildMatchesMakefile: BuildExecStage builds the exec stage
// as `make build` does (its doc says so; the tests run what it builds), so
// its flags and sources are the Makefile's.
func TestExecStageBuildMatchesMakefile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var flags, build string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "EXECSTAGE_CFLAGS :="); ok {
			flags = strings.TrimSpace(v)
		}
		if strings.Contains(line, "$(EXECSTAGE_CFLAGS) -o $(EXECSTAGE)") {
			build = line
		}
	}
	if want := strings.Join(ExecStageCFlags, " "); flags != want {
		t.Errorf("Makefile EXECSTAGE_CFLAGS %q, testenv.ExecStageCFlags %q", flags, want)
	}
	if _, srcs, _ := strings.Cut(build, "-o $(EXECSTAGE) "); srcs != strings.Join(ExecStageSources, " ") {
		t.Errorf("Makefile builds the exec stage from %q, testenv.ExecStageSources %q", srcs, ExecStageSources)
	}
}
