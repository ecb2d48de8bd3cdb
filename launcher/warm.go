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
//     child waits for one (1 ms in a trace at load 13).
//
// It used to build encoding/json's encoders and decoders too, which most
// runs never use (together about half a millisecond of CPU per launch):
// the helper's status lines are read without encoding/json but for a
// failure's (sandbox.ReadStatus); the Go helper's JSON spec is encoded
// only for a run without namespaces (the default sends the run's init the
// binary plan; a run planned without them warms it in Run, warmSpecJSON);
// the launch records are written by hand by the local audit log (a run
// whose records go to the daemon or to NATS, which encode them with
// encoding/json, warms it with WarmRecordJSON).
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
	}()
	return done
}

// warmSpecJSON builds encoding/json's encoder of the Go helper's spec on
// another goroutine, for a run planned without namespaces (the only runs
// that encode it), while the helper is cloned.
func warmSpecJSON() {
	go func() { _, _ = json.Marshal(&sandbox.Spec{}) }()
}

// WarmRecordJSON builds encoding/json's encoder of the launch records on
// another goroutine, for a run whose records go to a sink that encodes
// them with encoding/json (the daemon's socket, NATS): the start record
// is on the launch's critical path.
func WarmRecordJSON() {
	go func() { _, _ = json.Marshal(&schema.Event{}) }()
}
