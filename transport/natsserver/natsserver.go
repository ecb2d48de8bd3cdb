// Package natsserver runs the embedded NATS server with JetStream that a
// single host uses when no external NATS cluster is configured. It requires
// credentials (one nkey per role, generated at first start into the state
// directory, readable by root only) and gives each role only the subjects
// it needs (stream.HostPermissions, CollectorPermissions,
// ReaderPermissions); it listens on loopback only, and keeps JetStream's
// file store under the state directory so events survive a restart of the
// daemon.
package natsserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/transport/stream"
)

// DefaultPort is the NATS client port the embedded server listens on.
const DefaultPort = 4222

// Config says where the embedded server keeps its data and listens.
type Config struct {
	// StoreDir holds JetStream's file store (created 0700). Required.
	StoreDir string
	// Host to listen on; default 127.0.0.1. Anything that is not a loopback
	// address is refused: the embedded server speaks no TLS, so a fleet uses
	// an external NATS cluster with TLS instead.
	Host string
	// Port to listen on; 0 means DefaultPort, -1 a random free port (tests).
	Port int
	// Auth holds the users clients must authenticate as (one per role);
	// required unless NoAuth.
	Auth *Credentials
	// EventHost is the host whose subjects the daemon role may publish
	// (default os.Hostname, as schema.LocalOrigin names it).
	EventHost string
	// NoAuth lets anyone connect with every right: for tests that need a
	// plain JetStream server, never for the daemon.
	NoAuth bool
	// MaxStoreBytes caps JetStream's disk use; 0 fits it to the disk:
	// three quarters of the space free under StoreDir (the server's own
	// default), and never less than the caps of the streams already
	// stored there (see fitStore).
	MaxStoreBytes int64
	// ServerName identifies the server in JetStream; default "mcpwarden-<hostname>".
	ServerName string
	// ReadyTimeout bounds the wait for the server to accept clients; default 10 s.
	ReadyTimeout time.Duration
	Logger       *slog.Logger
}

// Server is a running embedded NATS server.
type Server struct {
	ns  *server.Server
	cfg Config
	// fit is the store fitted to the free disk (0: the server's own);
	// StreamBytes caps the stream by it.
	fit int64
}

// Start starts the server and waits until it accepts client connections.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("embedded NATS: no store directory given: pass --state-dir")
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("embedded NATS: refusing to listen on %q: it speaks no TLS, so it listens on loopback only; pick a loopback address (127.0.0.1, ::1) or use an external NATS cluster with TLS for a fleet (docs/pipeline.md)", host)
	}
	if cfg.Auth == nil && !cfg.NoAuth {
		return nil, errors.New("embedded NATS: no credentials: it never runs open (load them with LoadOrCreateCredentials)")
	}
	port := cfg.Port
	if port == 0 {
		port = DefaultPort
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded NATS: create store directory: %w", err)
	}
	name := cfg.ServerName
	if name == "" {
		h, _ := os.Hostname()
		name = "mcpwarden-" + h
	}
	store, fit := cfg.MaxStoreBytes, int64(0)
	if store == 0 {
		store, fit = fitStore(cfg.StoreDir)
	}
	opts := &server.Options{
		ServerName:        name,
		Host:              host,
		Port:              port,
		JetStream:         true,
		StoreDir:          filepath.Clean(cfg.StoreDir),
		JetStreamMaxStore: store,
		NoSigs:            true, // the daemon owns signal handling
		NoSystemAccount:   true,
		HTTPPort:          0, // no monitoring port
	}
	if cfg.Auth != nil {
		eh := cfg.EventHost
		if eh == "" {
			eh, _ = os.Hostname()
		}
		opts.Nkeys = cfg.Auth.nkeyUsers(eh)
		opts.NoAuthUser = ""
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: configure: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ns.SetLoggerV2(slogAdapter{logger}, false, false, false)
	go ns.Start()
	wait := cfg.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if !ns.ReadyForConnections(wait) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded NATS: not ready to accept clients on %s:%d within %s: is the port taken? pick another with --nats-port", host, port, wait)
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded NATS: JetStream did not start on %s: check that the directory is writable and has free space", cfg.StoreDir)
	}
	return &Server{ns: ns, cfg: cfg, fit: fit}, nil
}

// fitStore sizes the JetStream store of a server whose configuration names
// none: fit is three quarters of the space free under dir, what the server
// itself would take. But the server refuses every change to a stream while
// the streams it loaded reserve more than its store (nats-server's
// checkBytesLimits), so a daemon restarted after its disk filled up (by
// anything) could not even lower its stream's cap to the smaller disk: it
// exited ("insufficient storage resources"). The store is therefore never
// below the caps the stored streams already reserve; StreamBytes caps the
// stream by fit, so the stream is lowered to what the disk holds now.
// Both are 0 when the free space cannot be read (the server decides).
func fitStore(dir string) (store, fit int64) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0
	}
	fit = int64(st.Bavail) * int64(st.Bsize) / 4 * 3
	return max(fit, reservedBytes(dir)), fit
}

// reservedBytes sums the caps (max_bytes) of the file streams stored under
// dir (jetstream/ACCOUNT/streams/NAME/meta.inf). A file it cannot read or
// parse counts nothing: the server reads it again and says what is wrong.
func reservedBytes(dir string) int64 {
	metas, _ := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "*", "meta.inf"))
	var sum int64
	for _, m := range metas {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var c struct {
			MaxBytes int64  `json:"max_bytes"`
			Storage  string `json:"storage"`
		}
		if json.Unmarshal(b, &c) != nil || c.MaxBytes <= 0 || c.Storage != "file" {
			continue
		}
		sum += c.MaxBytes
	}
	return sum
}

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// StreamBytes is the cap for the event stream on this server: the
// stream's default, or nine tenths of the server's JetStream store when
// that is smaller (a store fitted to the disk is a share of the free disk,
// and a stream asking for more than the store is refused: a host with less
// than ~14 GB free could not start the daemon). The tenth left holds the
// consumers' state. A fitted store counts the disk free now, not the caps
// stored streams reserve (fitStore): after the disk filled up, the daemon
// lowers its stream's cap to it. The stream discards new messages, so a
// stream holding more than its lowered cap keeps every stored event and
// takes new ones once its readers have made room.
func (s *Server) StreamBytes() int64 {
	limit := int64(stream.DefaultMaxBytes)
	if s.fit > 0 {
		limit = min(limit, s.fit/10*9)
	} else if js := s.ns.JetStreamConfig(); js != nil && js.MaxStore > 0 {
		limit = min(limit, js.MaxStore/10*9)
	}
	return limit
}

// Client is the connection options of role r (its seed file and inbox
// prefix); name names the connection. Without Auth (NoAuth) it is the URL
// alone.
func (s *Server) Client(r stream.Role, name string) stream.ConnOptions {
	if s.cfg.Auth == nil {
		return stream.ConnOptions{URL: s.ClientURL(), Name: name}
	}
	host := s.cfg.EventHost
	if host == "" {
		host, _ = os.Hostname()
	}
	return ClientOptions(s.ClientURL(), s.cfg.Auth.Dir, r, host, name)
}

// Shutdown stops the server and waits until it has stopped.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// slogAdapter routes the server's printf-style log lines to slog. The format
// string is kept as the message's "detail" attribute so that the message
// itself stays constant.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) {
	a.l.Debug("nats server", "detail", fmt.Sprintf(format, v...))
}
func (a slogAdapter) Warnf(format string, v ...any) {
	a.l.Warn("nats server", "detail", fmt.Sprintf(format, v...))
}
func (a slogAdapter) Fatalf(format string, v ...any) {
	a.l.Error("nats server fatal", "detail", fmt.Sprintf(format, v...))
}
func (a slogAdapter) Errorf(format string, v ...any) {
	a.l.Error("nats server", "detail", fmt.Sprintf(format, v...))
}
func (a slogAdapter) Debugf(format string, v ...any) {
	a.l.Debug("nats server", "detail", fmt.Sprintf(format, v...))
}
func (a slogAdapter) Tracef(string, ...any) {}
