package launcher

import (
	"context"
	"sync"

	"github.com/mcpwarden/mcpwarden/schema"
)

// serverIdentity is what the mediator learned about the server it talks
// to: its serverInfo name and version, and the protocol era.
type serverIdentity struct {
	mu                 sync.Mutex
	name, version, era string
}

// Identified records which server runs, once the mediator knows it (the
// proxy, after initialize or server/discover): a launch record of phase
// identified carrying the server's name, version and protocol era
// (sanitised to tokens: they come from the server), which the exit record
// repeats. It writes the audit log and the sink like every launch record;
// an error wraps ErrAudit. Safe from any goroutine; only the first call
// of a run records anything.
func (l *Launcher) Identified(ctx context.Context, name, version, era string) error {
	id := &l.identity
	id.mu.Lock()
	if id.era != "" || id.name != "" {
		id.mu.Unlock()
		return nil
	}
	id.name, id.version, id.era = schema.SanitizeToken(name), schema.SanitizeToken(version), schema.SanitizeToken(era)
	if id.era == "" {
		id.era = "unknown"
	}
	id.mu.Unlock()
	return l.publish(ctx, l.record(schema.PhaseIdentified, l.cfg.Now(), 0, 0, ""))
}

// withIdentity adds what Identified learned to a launch record.
func (l *Launcher) withIdentity(lr *schema.Launch) {
	id := &l.identity
	id.mu.Lock()
	defer id.mu.Unlock()
	lr.ServerName, lr.ServerVersion, lr.ProtocolEra = id.name, id.version, id.era
}
