// Package client is the launcher's side of the daemon's registration
// protocol (package api). The launcher calls Register from its BeforeExec
// hook, after the server's process exists and before it execs the server,
// so the daemon watches the run from its first open; a failed registration
// aborts the run.
package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/mcpwarden/mcpwarden/daemon/api"
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

// Register announces a run and returns its slot.
func (c *Client) Register(ctx context.Context, r api.Registration) (uint32, error) {
	resp, err := c.do(ctx, api.Request{Version: api.Version, Op: api.OpRegister, Register: &r})
	if err != nil {
		return 0, err
	}
	return resp.Slot, nil
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

func (c *Client) do(ctx context.Context, req api.Request) (*api.Response, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if errors.Is(err, os.ErrPermission) {
		return nil, fmt.Errorf("%w: %s is root-only (%w): run as root, or as the daemon's user", ErrDaemon, c.Socket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: cannot reach %s (%w): start it with 'mcpwarden daemon --socket %s' or drop --daemon-socket", ErrDaemon, c.Socket, err, c.Socket)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: encode request: %w", ErrDaemon, err)
	}
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("%w: send %s request: %w", ErrDaemon, req.Op, err)
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("%w: read %s answer: %w", ErrDaemon, req.Op, err)
	}
	var resp api.Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, fmt.Errorf("%w: malformed answer: %w", ErrDaemon, err)
	}
	if !resp.OK {
		return nil, fmt.Errorf("%w refused %s: %s", ErrDaemon, req.Op, resp.Error)
	}
	return &resp, nil
}
