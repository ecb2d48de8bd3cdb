// Package stream holds the JetStream contract of the event pipeline: the
// stream's name and subjects, its configuration, and how components connect
// to NATS (embedded on one host, or an external cluster with credentials and
// TLS for a fleet).
package stream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	// Name is the JetStream stream that holds every event.
	Name = "MCPWARDEN_EVENTS"
	// SubjectPrefix starts every event subject: mcpwarden.v1.<host>.<kind>.
	SubjectPrefix = "mcpwarden.v1"
	// AllSubjects is the wildcard the stream binds.
	AllSubjects = SubjectPrefix + ".>"
)

// Subject is the subject a batch of events of kind from host travels on.
func Subject(host string, kind schema.Kind) string {
	return SubjectPrefix + "." + HostToken(host) + "." + string(kind)
}

// DecodeBatch decodes a message body (schema.DecodeBatch) and drops, counted
// as rejected, the events whose host and kind are not those of the subject
// the message arrived on. NATS permissions let a host publish only under its
// own host token (deploy/nats), so this stops a compromised host from
// writing events, or findings, in another host's name. Every consumer of
// the stream decodes through it.
func DecodeBatch(subject string, body []byte) (events []schema.Event, rejected int, err error) {
	events, rejected, err = schema.DecodeBatch(body)
	if err != nil {
		return nil, rejected, err
	}
	kept := events[:0]
	for i := range events {
		if Subject(events[i].Host, events[i].Kind) != subject {
			rejected++
			continue
		}
		kept = append(kept, events[i])
	}
	return kept, rejected, nil
}

// HostToken turns a host name into one subject token: dots and anything that
// is not a letter, digit, '-' or '_' become '_', so "web-1.example.com"
// becomes "web-1_example_com" and no host can inject wildcards or extra
// tokens. On the host names events may carry (schema.CheckHost: letters,
// digits, '.', '-'; no '_') it is one-to-one, so a token, and the subjects
// and rights built on it, belong to one host.
func HostToken(host string) string {
	if host == "" {
		return "_"
	}
	clean := true
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			clean = false
			break
		}
	}
	if clean {
		return host
	}
	var b strings.Builder
	b.Grow(len(host))
	for _, r := range host {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// Config is the stream's configuration. The zero value gives the single-host
// defaults.
type Config struct {
	// Replicas is how many servers keep each message. 0 lets Ensure choose
	// (DefaultReplicas: 3 on a NATS cluster, 1 on a single server); the
	// configuration itself (JetStream) reads 0 as 1.
	Replicas int
	// MaxAge is how long events stay in the stream once consumed or not;
	// default 7 days, so a collector can be down for days without loss.
	MaxAge time.Duration
	// MaxBytes caps the stream; 0 keeps an existing stream's cap and gives
	// a new one DefaultMaxBytes (10 GiB). When full the stream refuses
	// new messages (DiscardNew) so publishers spool instead of the stream
	// silently dropping old, possibly unconsumed, events.
	MaxBytes int64
	// DuplicateWindow is how long JetStream remembers Nats-Msg-Id values to
	// drop re-published batches; default 10 minutes (covers spool replays
	// after short outages; later duplicates collapse in ClickHouse).
	DuplicateWindow time.Duration
	// MaxMsgsPerSubject caps the messages the stream keeps on one subject,
	// that is of one kind from one host; default
	// DefaultMaxMsgsPerSubject. At the cap the stream refuses that
	// subject's new messages (DiscardNewPerSubject), so a host that floods
	// is refused (and spools) while the other hosts' events still go in;
	// without it one host could fill the shared stream for everyone.
	MaxMsgsPerSubject int64
}

// DefaultMaxMsgsPerSubject is the per-subject cap when
// Config.MaxMsgsPerSubject is not set: over the 7 days the stream keeps
// events, 1.65 messages a second of one kind from one host, sustained (a
// message holds up to 1,000 events). Six subjects of messages of a few
// hundred bytes at the cap hold under 2 GB, so a host flooding with many
// small messages cannot fill the default 10 GiB stream; a host flooding
// with messages near MaxMsgSize still can (docs/pipeline.md).
const DefaultMaxMsgsPerSubject = 1_000_000

// DefaultMaxBytes is the stream's cap when Config.MaxBytes is not set.
const DefaultMaxBytes = 10 << 30

// JetStream returns the stream configuration to create or update.
func (c Config) JetStream() jetstream.StreamConfig {
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 7 * 24 * time.Hour
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.DuplicateWindow <= 0 {
		c.DuplicateWindow = 10 * time.Minute
	}
	if c.MaxMsgsPerSubject <= 0 {
		c.MaxMsgsPerSubject = DefaultMaxMsgsPerSubject
	}
	return jetstream.StreamConfig{
		Name:        Name,
		Description: "mcpwarden sanitized audit events (mcpwarden.v1.<host>.<kind>)",
		Subjects:    []string{AllSubjects},
		// Limits retention: the collector, the daemon's cross-check and
		// `mcpwarden events --follow` all read the same messages.
		Retention: jetstream.LimitsPolicy,
		Storage:   jetstream.FileStorage,
		Replicas:  c.Replicas,
		MaxAge:    c.MaxAge,
		MaxBytes:  c.MaxBytes,
		Discard:   jetstream.DiscardNew,
		// Per host and kind (HostPermissions allows a host only its kind
		// subjects): one host's flood is refused at its own cap.
		MaxMsgsPerSubject:    c.MaxMsgsPerSubject,
		DiscardNewPerSubject: true,
		Duplicates:           c.DuplicateWindow,
		// One batch message holds at most a few MiB of events.
		MaxMsgSize: 8 << 20,
	}
}

// ClusterReplicas is the stream's replicas on a NATS cluster: a message is
// kept by three servers, so the stream (and every durable consumer, which
// inherits it) keeps serving and losing nothing while one is down.
const ClusterReplicas = 3

// DefaultReplicas is the replicas a stream gets when none are asked for:
// ClusterReplicas when the server nc is connected to is part of a cluster,
// 1 on a single server (which can keep one copy only).
func DefaultReplicas(nc *nats.Conn) int {
	if nc != nil && nc.ConnectedClusterName() != "" {
		return ClusterReplicas
	}
	return 1
}

// The JetStream API error codes Ensure explains: the server's (or the
// cluster's) JetStream store has no room for the stream's cap.
const (
	errCodeStoreExceeded         jetstream.ErrorCode = 10047 // JSStorageResourcesExceededErr
	errCodeInsufficientResources jetstream.ErrorCode = 10023 // JSInsufficientResourcesErr
)

// Ensure creates the stream, or updates it to cfg when it exists (an
// existing stream's replicas are changed to cfg's). Replicas 0 is
// DefaultReplicas of js's connection. MaxBytes 0 keeps an existing
// stream's cap (the embedded server's daemon sizes it to the disk it has)
// and gives a new one DefaultMaxBytes; a server whose JetStream store is
// smaller than the cap refuses, and the error says how to fix it (nothing
// is shrunk behind the operator's back).
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.Stream, error) {
	if cfg.Replicas <= 0 {
		cfg.Replicas = DefaultReplicas(js.Conn())
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
		s, err := js.Stream(ctx, Name)
		switch {
		case err == nil:
			if b := s.CachedInfo().Config.MaxBytes; b > 0 {
				cfg.MaxBytes = b
			}
		case !errors.Is(err, jetstream.ErrStreamNotFound):
			return nil, fmt.Errorf("look up JetStream stream %s: %w (does this NATS account have JetStream enabled?)", Name, err)
		}
	}
	s, err := js.CreateOrUpdateStream(ctx, cfg.JetStream())
	if err != nil {
		hint := "does this NATS account have JetStream enabled and the right to manage streams?"
		var apiErr *jetstream.APIError
		isAPI := errors.As(err, &apiErr)
		replicasHint := fmt.Sprintf("%d replicas need a NATS cluster of at least %d servers with JetStream, all up; on a single server use --stream-replicas 1", cfg.Replicas, cfg.Replicas)
		switch {
		case isAPI && (apiErr.ErrorCode == errCodeStoreExceeded || apiErr.ErrorCode == errCodeInsufficientResources):
			hint = fmt.Sprintf("the NATS server's JetStream store has less room than the stream's cap of %d bytes: "+
				"raise max_file_store in the server's jetstream block (left unset it is 75%% of the disk free when the server started), "+
				"free disk under its store_dir, or give a smaller cap with --stream-max-bytes", cfg.MaxBytes)
			if cfg.Replicas > 1 {
				hint += "; or " + replicasHint
			}
		case cfg.Replicas > 1 && isAPI && apiErr.ErrorCode != jetstream.JSErrCodeStreamNotFound:
			hint = replicasHint
		}
		return nil, fmt.Errorf("create or update JetStream stream %s with %d replicas: %w (%s)", Name, cfg.Replicas, err, hint)
	}
	return s, nil
}

// ConnOptions says how to reach NATS and who to be there.
type ConnOptions struct {
	// URL, e.g. nats://127.0.0.1:4222 or a comma-separated cluster list.
	URL string
	// CredsFile is a NATS .creds file (JWT + nkey seed) for fleet accounts.
	CredsFile string
	// NkeyFile is an nkey seed file (a user seed, "SU..."): what the
	// embedded server's roles use (transport/natsserver), and any server
	// configured with nkey users.
	NkeyFile string
	// User and Password authenticate with a user configured on the server.
	User, Password string
	// CAFile, CertFile, KeyFile configure TLS: CAFile alone verifies the
	// server; CertFile+KeyFile add a client certificate.
	CAFile, CertFile, KeyFile string
	// Name is the connection name shown by the server (component@host).
	Name string
	// InboxPrefix replaces "_INBOX" for this connection's replies, so that
	// the server can let each role subscribe to its own replies only
	// (HostInbox, CollectorInbox, ReaderInbox).
	InboxPrefix string
}

// Connect connects with reconnection forever (a publisher spools while it
// is away) plus any extra options.
func Connect(o ConnOptions, extra ...nats.Option) (*nats.Conn, error) {
	if o.URL == "" {
		return nil, errors.New("no NATS URL: pass --nats nats://HOST:PORT")
	}
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
	}
	given := 0
	if o.CredsFile != "" {
		given++
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.NkeyFile != "" {
		given++
		opt, err := nats.NkeyOptionFromSeed(o.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("NATS nkey seed file %s: %w (it must hold a user seed, readable by this user: the embedded server's are root-only)", o.NkeyFile, err)
		}
		opts = append(opts, opt)
	}
	if o.User != "" || o.Password != "" {
		given++
		if o.User == "" || o.Password == "" {
			return nil, errors.New("NATS user authentication needs both --nats-user and --nats-password-file")
		}
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if given > 1 {
		return nil, errors.New("give one NATS credential: --nats-creds, --nats-nkey or --nats-user with --nats-password-file")
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	} else {
		// No certificate to tell the server by: a server on this host must
		// be root's or ours (ownerCheckDialer), on every (re)connection.
		opts = append(opts, nats.SetCustomDialer(&ownerCheckDialer{d: net.Dialer{Timeout: dialTimeout}}))
	}
	if o.CertFile != "" || o.KeyFile != "" {
		if o.CertFile == "" || o.KeyFile == "" {
			return nil, errors.New("NATS TLS client certificate needs both --nats-tls-cert and --nats-tls-key")
		}
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	opts = append(opts, extra...)
	// A first attempt without retrying tells a server that refuses us (a
	// wrong or missing credential, a certificate it does not trust) from
	// one that is not there: the first is a configuration to fix, and is
	// an error now (records would otherwise pile up in a spool that never
	// drains); only the second is waited for in the background.
	nc, err := nats.Connect(o.URL, append(opts, nats.RetryOnFailedConnect(false))...)
	if err != nil && !refused(err) {
		nc, err = nats.Connect(o.URL, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURL(o.URL), err)
	}
	return nc, nil
}

// NotReady reports an error that a JetStream still starting (no meta
// leader yet), a cluster one node short, or a request whose time ran out
// returns: worth trying again. A request's time also runs out for a client
// that was stopped while it waited (SIGSTOP, a VM paused) and for a
// permission the server refuses (the refusal comes apart from the
// request): callers bound their retries and name the last error.
// JetStream disabled, any other API error, a cancelled context and
// anything else stay so, and are not worth a retry.
func NotReady(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 503s: the system temporarily unavailable, insufficient
		// resources, incomplete results; not JetStream disabled on the
		// server or for the account, which stays so.
		return apiErr.Code == 503 && apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabled && apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabledForAccount
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse)
}

// refused reports an error of a server that answered and would not have
// us, rather than of one that could not be reached.
func refused(err error) bool {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) ||
		errors.Is(err, ErrForeignLocalServer) {
		return true
	}
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "authorization violation") || strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:")
}

// RedactURL drops user:password from a URL before it is shown.
func RedactURL(u string) string {
	if at := strings.LastIndex(u, "@"); at >= 0 {
		if scheme := strings.Index(u, "://"); scheme >= 0 && scheme < at {
			return u[:scheme+3] + "REDACTED@" + u[at+1:]
		}
		return "REDACTED@" + u[at+1:]
	}
	return u
}
