package launcher

import (
	"encoding/json"
	"os"

	"github.com/mcpwarden/mcpwarden/launcher/sandbox"
	"github.com/mcpwarden/mcpwarden/schema"
)

// WarmUp does, on another goroutine, the once-per-process work that the
// launch would otherwise wait for on its critical path, so that it runs
// while the command reads its flags, the configuration and the scope:
//
//   - Go's first process start checks that pidfds work (pidfd_open,
//     waitid, pidfd_send_signal and a vfork'd child that exits at once);
//     the helper's spawn blocks on it, and on busy cores the vfork'd
//     child waits for one (1 ms in a trace at load 13);
//   - encoding/json builds a type's encoder or decoder on its first use:
//     the helper's spec (encoded once the ruleset is known), its status
//     lines (the "ready" and "started" the launch waits for) and the
//     launch records (the start record must be on disk before the
//     go-ahead).
//
// It changes nothing a run does or records. The channel is closed when it
// is done (a caller need not wait for it).
func WarmUp() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			_ = p.Release()
		}
		_, _ = json.Marshal(&sandbox.Spec{})
		_, _ = json.Marshal(&schema.Event{})
		var st sandbox.Status
		_ = json.Unmarshal([]byte(`{"stage":"ready"}`), &st)
	}()
	return done
}
