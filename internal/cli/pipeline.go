package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// PipelineName is the program that holds the audit pipeline's commands.
// mcpwarden finds it next to its own executable, as it finds the fence
// helper.
const PipelineName = "mcpwarden-pipeline"

// PipelineCommand is a command mcpwarden-pipeline holds.
type PipelineCommand struct {
	Name, Summary string
}

// PipelineCommands are mcpwarden-pipeline's commands, with the summaries
// `mcpwarden help` lists them by.
var PipelineCommands = []PipelineCommand{
	{"daemon", "load the kernel probes and watch launched runs"},
	{"events", "print events live for a person"},
	{"collect", "move events from NATS JetStream into ClickHouse"},
	{"query", "run a canned fleet query against ClickHouse"},
	{"why", "turn a run's hashed denials and findings back into paths, and say what grants each (why RUN_ID)"},
	{"profile", "learn what a server needs from a scope, for review (profile learn -- CMD)"},
}

// ExecPipeline runs `mcpwarden-pipeline command args...` in place of this
// process (same descriptors, environment, signals and exit status). It
// returns only when that is impossible, with the exit code to use.
func ExecPipeline(command string, args []string) int {
	return Fail(ExitInternal, ReplaceWithPipeline(command, args))
}

// ReplaceWithPipeline is ExecPipeline for a command that has started: it
// returns only with the error that kept it from exec'ing.
func ReplaceWithPipeline(command string, args []string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%s: locate this executable to find %s: %w", command, PipelineName, err)
	}
	path, err := PipelinePath(filepath.Dir(exe))
	if err != nil {
		return fmt.Errorf("%s: %w", command, err)
	}
	err = syscall.Exec(path, append([]string{PipelineName, command}, args...), os.Environ())
	return fmt.Errorf("%s: run %s: %w", command, path, err)
}

// PipelinePath is mcpwarden-pipeline in dir, refused when it is missing,
// not an executable file, or writable by group or others (whoever can
// rewrite it runs as whoever starts the daemon).
func PipelinePath(dir string) (string, error) {
	path := filepath.Join(dir, PipelineName)
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("the daemon, collect, query, events, why and profile commands, and a run whose records go to NATS, are in %s, which is missing next to mcpwarden: build it with 'make build' (bin/%s) or install it there", path, PipelineName)
	case err != nil:
		return "", fmt.Errorf("%s: %w", path, err)
	case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("%s is not an executable file: rebuild it with 'make build'", path)
	case st.Mode().Perm()&0o022 != 0:
		return "", fmt.Errorf("%s is writable by group or others (mode %v): fix it with chmod go-w %s", path, st.Mode().Perm(), path)
	}
	return path, nil
}
