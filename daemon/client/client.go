// Package client is the launcher's side of the daemon's protocol (package
// api). The launcher calls Register from its BeforeExec hook, after the
// server's process exists and before it execs the server, so the daemon
// watches the run from its first open; a failed registration aborts the
// run. Its launch and decision records go to the daemon through a Sink.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/daemon/api"
	"github.com/mcpwarden/mcpwarden/internal/localsock"
	"github.com/mcpwarden/mcpwarden/schema"
)

// DefaultSocket is where `mcpwarden daemon` listens unless --socket says otherwise.
const DefaultSocket = "/run/mcpwarden/daemon.sock"

// ErrDaemon wraps every failure to reach or satisfy the daemon.
var ErrDaemon = errors.New("mcpwarden daemon")

// Client talks to one daemon socket.
type Client struct {
	Socket  string
	Timeout time.Duration // per request; default 5 s
}

// New returns a client for socket.
func New(socket string) *Client { return &Client{Socket: socket, Timeout: 5 * time.Second} }

// Register announces a run whose root is process rootPID (as this
// process's pid namespace sees it; it must be this process's child). The
// process travels to the daemon as a pidfd, so the daemon watches the same
// process whatever pid it has there.
func (c *Client) Register(ctx context.Context, r api.Registration, rootPID int) (api.Registered, error) {
	fd, err := unix.PidfdOpen(rootPID, 0)
	if err != nil {
		return api.Registered{}, fmt.Errorf("%w: open a pidfd of the root process %d: %w", ErrDaemon, rootPID, err)
	}
	defer unix.Close(fd)
	resp, err := c.do(ctx, api.Request{Version: api.Version, Op: api.OpRegister, Register: &r}, fd)
	if err != nil {
		return api.Registered{}, err
	}
	if resp.Registered == nil {
		return api.Registered{}, fmt.Errorf("%w: registration answer without a slot", ErrDaemon)
	}
	return *resp.Registered, nil
}

// Unregister ends a run early (the daemon also ends it when its last process exits).
func (c *Client) Unregister(ctx context.Context, runID string) error {
	_, err := c.do(ctx, api.Request{Version: api.Version, Op: api.OpUnregister, RunID: runID})
	return err
}

// Status returns the daemon's current health.
func (c *Client) Status(ctx context.Context) (schema.Health, error) {
	i, err := c.Info(ctx)
	return i.Health, err
}

// Info is the daemon's answer to a status request.
type Info struct {
	Health    schema.Health
	PathKeyID string // schema.PathHasher.KeyID of the daemon's key
}

// Info asks the daemon for its health and the id of its path-hash key.
func (c *Client) Info(ctx context.Context) (Info, error) {
	resp, err := c.do(ctx, api.Request{Version: api.Version, Op: api.OpStatus})
	if err != nil {
		return Info{}, err
	}
	if resp.Health == nil {
		return Info{}, fmt.Errorf("%w: status answer without health", ErrDaemon)
	}
	return Info{Health: *resp.Health, PathKeyID: resp.PathKeyID}, nil
}

func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 5 * time.Second
	}
	return c.Timeout
}

func (c *Client) dial(ctx context.Context) (*localsock.Conn, error) {
	conn, err := localsock.Dial(ctx, c.Socket)
	if errors.Is(err, os.ErrPermission) {
		return nil, fmt.Errorf("%w: %s is not open to this user (%w): run as root or the daemon's user, or start the daemon with --socket-group GROUP and join that group", ErrDaemon, c.Socket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: cannot reach %s (%w): start it with 'mcpwarden daemon --socket %s' or drop --daemon-socket", ErrDaemon, c.Socket, err, c.Socket)
	}
	return conn, nil
}

func (c *Client) do(ctx context.Context, req api.Request, fds ...int) (*api.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return roundTrip(ctx, conn, c.timeout(), req, fds...)
}

func roundTrip(ctx context.Context, conn *localsock.Conn, timeout time.Duration, req api.Request, fds ...int) (*api.Response, error) {
	var resp api.Response
	if err := conn.Do(ctx, timeout, req, &resp, fds...); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDaemon, req.Op, err)
	}
	if !resp.OK {
		return nil, fmt.Errorf("%w refused %s: %s", ErrDaemon, req.Op, resp.Error)
	}
	return &resp, nil
}

// Sink sends a launcher's records to the daemon, which publishes them: the
// run needs no NATS of its own. Publish returns nil only once the daemon
// has taken every record (spooled or acknowledged); otherwise the caller
// fails closed (the launcher refuses the run, the proxy denies the call).
// While the daemon restarts, Publish keeps trying for up to RetryFor.
type Sink struct {
	c        *Client
	RetryFor time.Duration // default 10 s

	mu   sync.Mutex
	conn *localsock.Conn
}

// NewSink returns a Sink on c's socket.
func (c *Client) NewSink() *Sink { return &Sink{c: c, RetryFor: 10 * time.Second} }

// maxBatchBytes keeps one request line well under api.MaxMessageSize.
const maxBatchBytes = api.MaxMessageSize / 2

// Publish sends events, split into requests of at most api.MaxRecords
// records and maxBatchBytes of JSON.
func (s *Sink) Publish(ctx context.Context, events []schema.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(events) > 0 {
		n, size := 0, 0
		for n < len(events) && n < api.MaxRecords {
			b, err := json.Marshal(&events[n])
			if err != nil {
				return fmt.Errorf("%w: encode record: %w", ErrDaemon, err)
			}
			if len(b) > maxBatchBytes {
				return fmt.Errorf("%w: a %s record of %d bytes is larger than a request may be", ErrDaemon, events[n].Kind, len(b))
			}
			if n > 0 && size+len(b) > maxBatchBytes {
				break
			}
			size += len(b) + 1
			n++
		}
		if err := s.send(ctx, events[:n]); err != nil {
			return err
		}
		events = events[n:]
	}
	return nil
}

// send delivers one batch, reconnecting while the daemon is away. A
// refusal (the daemon answered no) is not retried.
func (s *Sink) send(ctx context.Context, events []schema.Event) error {
	deadline := time.Now().Add(s.RetryFor)
	req := api.Request{Version: api.Version, Op: api.OpRecords, Records: events}
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if s.conn == nil {
			conn, err := s.c.dial(ctx)
			if err == nil {
				s.conn = conn
			} else if time.Now().After(deadline) || ctx.Err() != nil {
				return err
			}
		}
		if s.conn != nil {
			var resp api.Response
			err := s.conn.Do(ctx, s.c.timeout(), req, &resp)
			if err == nil {
				if !resp.OK {
					return fmt.Errorf("%w refused the records: %s", ErrDaemon, resp.Error)
				}
				return nil
			}
			s.conn.Close()
			s.conn = nil
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%w: send records: %w", ErrDaemon, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: send records: %w", ErrDaemon, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// Close closes the sink's connection.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		err := s.conn.Close()
		s.conn = nil
		return err
	}
	return nil
}
