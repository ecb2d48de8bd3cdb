package schema

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"time"
)

// NewID returns a random 128-bit identifier in hex, used for event ids,
// run ids and operation ids.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

// Origin says where events come from: the host name and this boot of it.
type Origin struct {
	Host   string
	BootID string
}

// LocalOrigin reads the host name and the kernel's boot id.
func LocalOrigin() Origin {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return Origin{Host: host, BootID: strings.TrimSpace(string(boot))}
}

// NewEvent fills the envelope of an event of kind for run at time t. The
// caller sets the one kind-specific body.
func (o Origin) NewEvent(kind Kind, runID, scopeID, scopeHash string, t time.Time) Event {
	return Event{
		EventID:       NewID(),
		SchemaVersion: EventSchemaVersion,
		Host:          o.Host,
		BootID:        o.BootID,
		RunID:         runID,
		ScopeID:       scopeID,
		ScopeHash:     scopeHash,
		Kind:          kind,
		TimeNS:        t.UnixNano(),
	}
}
