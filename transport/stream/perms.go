package stream

import (
	"path/filepath"

	"github.com/mcpwarden/mcpwarden/schema"
)

// Who may do what on NATS. These are the subjects each role of the event
// pipeline needs, and nothing more; the embedded server
// (transport/natsserver) enforces them on one host and deploy/nats's
// server configuration on a fleet (TestDeployNATSConfig keeps the two in
// step). A role's connection uses its own inbox prefix, so no role can
// subscribe to another's replies (a subscription to all of "_INBOX.>" would
// see every message JetStream delivers to anyone).

const (
	// CollectorDurable is the durable consumer the collectors share.
	CollectorDurable = "mcpwarden-collector"
	// CollectorInbox and ReaderInbox are the inbox prefixes of the collector
	// and of readers (`mcpwarden events`, `mcpwarden why`).
	CollectorInbox = "_INBOX_collector"
	ReaderInbox    = "_INBOX_reader"
	// hostInbox starts a host's inbox prefix: _INBOX_host.<host token>.
	hostInbox = "_INBOX_host"
)

// Role is what a NATS user of the pipeline may do.
type Role string

const (
	// RoleDaemon publishes its host's events and reads them back through
	// its cross-check consumer (the single-host daemon also ensures the
	// stream).
	RoleDaemon Role = "daemon"
	// RoleCollector consumes through the collectors' durable consumer and
	// acks; it publishes no events.
	RoleCollector Role = "collector"
	// RoleReader reads through consumers of its own (`mcpwarden events`,
	// `mcpwarden why`); it publishes no events and acks nothing.
	RoleReader Role = "reader"
)

// CredentialsDir is where the daemon's embedded NATS server
// (transport/natsserver) keeps its users' keys, under the daemon's state
// directory; its clients on the same host find their role's seed there.
func CredentialsDir(stateDir string) string { return filepath.Join(stateDir, "nats-auth") }

// SeedFile is role r's nkey seed file in dir (a CredentialsDir).
func SeedFile(dir string, r Role) string { return filepath.Join(dir, string(r)+".nk") }

// Roles lists every role.
var Roles = []Role{RoleDaemon, RoleCollector, RoleReader}

// Inbox is the inbox prefix role r's connections use (host matters for the
// daemon only).
func (r Role) Inbox(host string) string {
	switch r {
	case RoleDaemon:
		return HostInbox(host)
	case RoleCollector:
		return CollectorInbox
	default:
		return ReaderInbox
	}
}

// HostInbox is the inbox prefix of a host's daemon (and of its launchers).
func HostInbox(host string) string { return hostInbox + "." + HostToken(host) }

// CrossCheckConsumer is the consumer a host's daemon reads its own events
// back through for the on-host cross-check. It has a fixed name so that a
// host may be allowed to read through it and through no other consumer.
func CrossCheckConsumer(host string) string { return "mcpwarden-xcheck-" + HostToken(host) }

// Permissions are the subjects one role may publish and subscribe to (NATS
// subject wildcards; a deny wins over an allow).
type Permissions struct {
	PublishAllow, PublishDeny, SubscribeAllow []string
}

const (
	jsAPI    = "$JS.API."
	jsAck    = "$JS.ACK." + Name + "."
	consumer = jsAPI + "CONSUMER."
)

// HostPermissions is what host's daemon may do: publish its own events and
// nothing under another host's token; read its own events back through its
// cross-check consumer, and ack them there. manageStream adds the right to
// create and update the stream (the single-host daemon ensures it; fleet
// hosts leave that to the collectors or an operator).
func HostPermissions(host string, manageStream bool) Permissions {
	h := HostToken(host)
	xc := CrossCheckConsumer(host)
	// One subject per event kind, not "mcpwarden.v1.<host>.>": a host that
	// could publish any subject under its token could create subjects
	// without end (each one state in the stream's subject index) and step
	// around the stream's per-subject limit (MaxMsgsPerSubject), which
	// bounds what one host can put in the shared stream.
	var pub []string
	for _, k := range schema.Kinds {
		pub = append(pub, Subject(host, k))
	}
	p := Permissions{
		PublishAllow: append(pub,
			jsAPI+"INFO",
			jsAPI+"STREAM.INFO."+Name,
			consumer+"CREATE."+Name+"."+xc+"."+SubjectPrefix+"."+h+".>",
			consumer+"INFO."+Name+"."+xc,
			consumer+"DELETE."+Name+"."+xc,
			consumer+"MSG.NEXT."+Name+"."+xc,
			jsAck+xc+".>",
		),
		SubscribeAllow: []string{HostInbox(host) + ".>"},
	}
	if manageStream {
		p.PublishAllow = append(p.PublishAllow, jsAPI+"STREAM.CREATE."+Name, jsAPI+"STREAM.UPDATE."+Name)
	}
	return p
}

// CollectorPermissions is what a collector may do: manage the stream and
// the consumers on it, pull and ack. It may not publish events.
func CollectorPermissions() Permissions {
	return Permissions{
		PublishAllow: []string{
			jsAPI + "INFO",
			jsAPI + "STREAM.INFO." + Name,
			jsAPI + "STREAM.CREATE." + Name,
			jsAPI + "STREAM.UPDATE." + Name,
			consumer + "CREATE." + Name + ".>",
			consumer + "DURABLE.CREATE." + Name + ".>",
			consumer + "INFO." + Name + ".*",
			consumer + "MSG.NEXT." + Name + ".*",
			jsAck + ">",
		},
		SubscribeAllow: []string{CollectorInbox + ".>"},
	}
}

// ReaderPermissions is what a reader (`mcpwarden events`, `mcpwarden why`)
// may do: create short-lived consumers of its own on the stream and pull
// from them. It may not publish events or ack anything, and may not create,
// update, delete or pull from the named consumers (the collectors' durable,
// the hosts' cross-check consumers), which would let it change or delay
// what they see.
func ReaderPermissions(named ...string) Permissions {
	p := Permissions{
		PublishAllow: []string{
			jsAPI + "INFO",
			jsAPI + "STREAM.INFO." + Name,
			consumer + "CREATE." + Name + ".*." + SubjectPrefix + ".>",
			consumer + "INFO." + Name + ".*",
			consumer + "DELETE." + Name + ".*",
			consumer + "MSG.NEXT." + Name + ".*",
		},
		SubscribeAllow: []string{ReaderInbox + ".>"},
	}
	for _, n := range append([]string{CollectorDurable}, named...) {
		p.PublishDeny = append(p.PublishDeny,
			consumer+"CREATE."+Name+"."+n+".>",
			consumer+"DELETE."+Name+"."+n,
			consumer+"MSG.NEXT."+Name+"."+n)
	}
	return p
}
