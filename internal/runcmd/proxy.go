package runcmd

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/cli"
	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/launcher/approval"
	"github.com/mcpwarden/mcpwarden/launcher/proxy"
	"github.com/mcpwarden/mcpwarden/schema"
)

// proxyExtension puts the protocol-aware proxy between client and server
// (the default); --proxy=false keeps the byte-transparent relay.
type proxyExtension struct {
	enabled          bool
	maxMessageBytes  int
	maxResponseBytes int
	approvalTimeout  time.Duration
	rootsTimeout     time.Duration
	secretFile       string
	secretExtra      cli.StringList
}

func (e *proxyExtension) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&e.enabled, "proxy", true, "decide every call with the protocol-aware proxy; --proxy=false relays bytes unchanged (the fence still holds)")
	fs.IntVar(&e.maxMessageBytes, "max-message-bytes", 16<<20, "largest JSON-RPC message the proxy accepts in either direction")
	fs.IntVar(&e.maxResponseBytes, "max-response-bytes", proxy.DefaultMaxResponseBytes, "largest tools/call or resources/read response passed to the client")
	fs.DurationVar(&e.approvalTimeout, "approval-timeout", proxy.DefaultApprovalTimeout, "how long a call waits for 'mcpwarden approve' or the client's elicitation answer before it is denied")
	fs.DurationVar(&e.rootsTimeout, "roots-timeout", proxy.DefaultRootsTimeout, "how long a call waits for the client's answer to a roots refresh before it is denied")
	fs.StringVar(&e.secretFile, "secret-patterns", "", "`FILE` of secret path patterns, one per line, replacing the built-in list")
	fs.Var(&e.secretExtra, "secret-pattern", "an extra secret path `PATTERN` (glob per path component, e.g. '*.sqlite'); repeatable")
}

func (e *proxyExtension) Configure(ctx context.Context, rc *Context) error {
	// The fence hides what the proxy refuses, with or without the proxy.
	secrets, err := e.secretPatterns()
	if err != nil {
		return err
	}
	rc.Config.SecretPatterns = secrets
	if !e.enabled {
		return nil
	}
	key, err := schema.LoadOrCreatePathKey(rc.PathKeyFile)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	hasher, err := schema.NewPathHasher(key)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	origin := ""
	if len(rc.Config.Command) > 0 {
		origin = filepath.Base(rc.Config.Command[0])
	}
	// The approval socket is opened once the proxy runs; a state dir under
	// which it cannot exist is refused now, before the server starts.
	if _, err := approval.SocketPath(rc.StateDir, rc.RunID); err != nil {
		return err
	}
	late := &lateApprovals{}
	ident := &identify{}
	rc.Launched = append(rc.Launched, ident.set)
	p, err := proxy.New(proxy.Config{
		Scope:            rc.Scope,
		RunID:            rc.RunID,
		Origin:           schema.LocalOrigin(),
		Hasher:           hasher,
		Sink:             &fanout{audit: rc.AuditLog, cfg: rc.Config},
		Logger:           rc.Logger,
		Approvals:        late,
		ServerOrigin:     origin,
		MaxMessageBytes:  e.maxMessageBytes,
		MaxResponseBytes: e.maxResponseBytes,
		SecretPatterns:   secrets,
		ApprovalTimeout:  e.approvalTimeout,
		RootsTimeout:     e.rootsTimeout,
		WorkDir:          rc.Config.Dir, // "": the launcher's, as the server's
		OnServerInfo:     ident.record,
	})
	if err != nil {
		return err
	}
	m := &withApprovals{p: p, late: late, stateDir: rc.StateDir, runID: rc.RunID, log: rc.Logger, restore: func() {}}
	if rc.Config.Stdin == nil && rc.Config.Stdout == nil {
		// The client's messages are read with blocking reads and written
		// through Go's poller (see proxy.PollableStdio); blocking mode is
		// restored when the proxy ends.
		rc.Config.Stdin, rc.Config.Stdout, m.restore = proxy.PollableStdio(os.Stdin, os.Stdout, os.Stderr)
		// The proxy's readers block in read(2), each holding a processor:
		// two more processors than the machine's keep one idle for the rest
		// (see proxy.ReaderProcs). GOMAXPROCS set by the user wins.
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(proxy.ReaderProcs())
		}
	}
	rc.Config.Mediator = m
	return nil
}

func (e *proxyExtension) secretPatterns() ([]string, error) {
	var pats []string
	if e.secretFile != "" {
		f, err := os.Open(e.secretFile)
		if err != nil {
			return nil, fmt.Errorf("--secret-patterns: %w", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
				pats = append(pats, l)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("--secret-patterns: %w", err)
		}
		if len(pats) == 0 {
			return nil, errors.New("--secret-patterns: the file lists no pattern; an empty list would serve secrets, so it is refused")
		}
	} else if len(e.secretExtra) > 0 {
		pats = append(pats, schema.DefaultSecretPatterns...)
	}
	pats = append(pats, e.secretExtra...)
	if _, err := schema.NewSecrets(pats); err != nil {
		return nil, fmt.Errorf("secret patterns: %w", err)
	}
	return pats, nil
}

// withApprovals opens the run's approval socket for as long as the proxy
// runs (a run the launcher refuses before its go-ahead never creates one;
// one whose server then fails to start removes it: Abandon).
type withApprovals struct {
	p               *proxy.Proxy
	late            *lateApprovals
	stateDir, runID string
	log             *slog.Logger
	restore         func() // the client's stdin and stdout back to blocking mode

	// The socket is made once, from the launcher's go-ahead (Prepare, on
	// a goroutine of its own, while the server starts) or else by Mediate.
	listenOnce sync.Once
	listened   chan struct{} // closed when srv, lerr are set
	srv        *approval.Server
	lerr       error
	prepared   bool // Prepare was called (the launcher's goroutine only)
}

// Prepare makes the approval socket while the server starts (it does not
// wait): nothing else of the launcher creates files then, which matters
// because approval.Listen sets the process's umask for its bind.
func (w *withApprovals) Prepare() {
	w.prepared = true
	w.startListen()
}

// Abandon removes the socket Prepare made, when the proxy will not run.
func (w *withApprovals) Abandon() {
	if !w.prepared {
		return
	}
	if srv, _ := w.listen(); srv != nil {
		_ = srv.Close()
	}
}

func (w *withApprovals) startListen() {
	w.listenOnce.Do(func() {
		w.listened = make(chan struct{})
		go func() {
			defer close(w.listened)
			w.srv, w.lerr = approval.Listen(w.stateDir, w.runID, w.log, w.p.Revoke)
		}()
	})
}

// listen is the socket, made now when Prepare did not start it.
func (w *withApprovals) listen() (*approval.Server, error) {
	w.startListen()
	<-w.listened
	return w.srv, w.lerr
}

func (w *withApprovals) Mediate(ctx context.Context, in io.Reader, out io.Writer, up launcher.Upstream) error {
	defer w.restore()
	srv, err := w.listen()
	if err != nil {
		// Fail closed: without the socket no call could be approved or the
		// scope revoked by the operator.
		if c, ok := up.Stdin().(io.Closer); ok {
			c.Close()
		}
		return fmt.Errorf("proxy: %w", err)
	}
	defer srv.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.Serve(sctx)
	w.late.set(srv)
	return w.p.Mediate(ctx, in, out, up)
}

// lateApprovals is the proxy's view of the approval socket, which exists
// only while the proxy runs.
type lateApprovals struct {
	mu  sync.Mutex
	srv *approval.Server
}

func (l *lateApprovals) set(s *approval.Server) {
	l.mu.Lock()
	l.srv = s
	l.mu.Unlock()
}

func (l *lateApprovals) Register(p approval.Pending) <-chan bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.srv == nil {
		return nil // no socket: only elicitation can approve
	}
	return l.srv.Register(p)
}

func (l *lateApprovals) Unregister(opID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.srv != nil {
		l.srv.Unregister(opID)
	}
}

// fanout writes decision records to the local audit log, then to the
// configured event sink (read at publish time: another extension may set it).
type fanout struct {
	audit launcher.Sink
	cfg   *launcher.Config
}

func (f *fanout) Publish(ctx context.Context, events []schema.Event) error {
	return f.publish(ctx, events, f.audit.Publish)
}

// PublishDeferSync is Publish with the audit log's sync left to the run's
// exit record (launcher.DeferSyncSink); the event sink gets the records as
// from Publish.
func (f *fanout) PublishDeferSync(ctx context.Context, events []schema.Event) error {
	if d, ok := f.audit.(launcher.DeferSyncSink); ok {
		return f.publish(ctx, events, d.PublishDeferSync)
	}
	return f.Publish(ctx, events)
}

func (f *fanout) publish(ctx context.Context, events []schema.Event, audit func(context.Context, []schema.Event) error) error {
	if err := audit(ctx, events); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	if f.cfg.Sink != nil {
		if err := f.cfg.Sink.Publish(ctx, events); err != nil {
			return fmt.Errorf("event sink: %w", err)
		}
	}
	return nil
}

// identify records, in a launch record, which server the proxy found
// itself talking to (launcher.Identified); the launcher exists only after
// the proxy is configured, so it is handed over once built.
type identify struct {
	mu sync.Mutex
	l  *launcher.Launcher
}

func (i *identify) set(l *launcher.Launcher) {
	i.mu.Lock()
	i.l = l
	i.mu.Unlock()
}

func (i *identify) record(name, version, era string) {
	i.mu.Lock()
	l := i.l
	i.mu.Unlock()
	if l != nil {
		// Written in the background (the client's answer does not wait for
		// its fsync); a failure is logged by the launcher.
		l.Identified(context.Background(), name, version, era)
	}
}
