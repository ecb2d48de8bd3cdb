package launcher

import (
	"context"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
)

// serverIdentity is what the mediator learned about the server it talks
// to: its serverInfo name and version, and the protocol era.
type serverIdentity struct {
	mu                 sync.Mutex
	name, version, era string
	// written is closed once the identified record is written (nil before
	// Identified); ended: the exit record is due, later calls record nothing.
	written chan struct{}
	ended   bool
}

// Identified records which server runs, once the mediator knows it (the
// proxy, after initialize or server/discover): a launch record of phase
// identified carrying the server's name, version and protocol era
// (sanitised to tokens: they come from the server), which the exit record
// repeats. The record goes to the audit log and the sink like every launch
// record, but in the background: the client's first answer does not wait
// for its fsync. Run waits for it before it writes the exit record, so the
// log keeps the order start, identified, exit; a failure is logged (it is
// not one of the records a run is refused without). Safe from any
// goroutine; only the first call of a run records anything.
func (l *Launcher) Identified(ctx context.Context, name, version, era string) {
	id := &l.identity
	id.mu.Lock()
	if id.written != nil || id.ended {
		id.mu.Unlock()
		return
	}
	id.name, id.version, id.era = schema.SanitizeToken(name), schema.SanitizeToken(version), schema.SanitizeToken(era)
	if id.era == "" {
		id.era = "unknown"
	}
	written := make(chan struct{})
	id.written = written
	id.mu.Unlock()
	ev := l.record(schema.PhaseIdentified, l.cfg.Now(), 0, 0, "")
	go func() {
		defer close(written)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), identifiedTimeout)
		defer cancel()
		if err := l.publish(ctx, ev); err != nil {
			l.cfg.Logger.Error("the launch record naming the server was not written", "err", err.Error())
		}
	}()
}

// identifiedTimeout bounds the write of the identified record (a sink that
// hangs must not hold the exit record back for ever).
const identifiedTimeout = 30 * time.Second

// identityWritten waits for the identified record, if one is being
// written, and makes later Identified calls record nothing: the exit record
// comes next.
func (l *Launcher) identityWritten() {
	id := &l.identity
	id.mu.Lock()
	id.ended = true
	written := id.written
	id.mu.Unlock()
	if written != nil {
		<-written
	}
}

// withIdentity adds what Identified learned to a launch record.
func (l *Launcher) withIdentity(lr *schema.Launch) {
	id := &l.identity
	id.mu.Lock()
	defer id.mu.Unlock()
	lr.ServerName, lr.ServerVersion, lr.ProtocolEra = id.name, id.version, id.era
}
