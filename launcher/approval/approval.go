// Package approval carries out-of-band approvals of pending calls over a
// local unix socket, one per run, in the state directory. Only root and the
// user running the launcher may connect: the directory is 0700, the socket
// 0600, and every connection's peer credentials are checked again.
//
// Wire format: the client writes one JSON line (Request) and reads one JSON
// line (Response).
package approval

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/unixsock"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// Actions a client may ask for.
const (
	ActionApprove = "approve"
	ActionDeny    = "deny"
	ActionList    = "list"
	ActionRevoke  = "revoke" // revoke the whole scope: deny everything, stop the server
)

// Request is one line from a client.
type Request struct {
	Action string `json:"action"`
	OpID   string `json:"op_id,omitempty"`
}

// Pending describes a call waiting for approval, so that the approver can
// judge it: the tool, its action class and the paths it would touch, in
// clear (resolved, as checked). Only this local socket shows the paths:
// decision records carry keyed hashes, and nothing is logged.
type Pending struct {
	RunID string   `json:"run_id,omitempty"`
	OpID  string   `json:"op_id"`
	Tool  string   `json:"tool"`
	Class string   `json:"action_class"`
	Paths []string `json:"paths,omitempty"`
	Since string   `json:"since"` // RFC 3339
}

// MaxPendingPaths bounds the paths one pending call shows.
const MaxPendingPaths = 32

// Response is the server's answer.
type Response struct {
	OK      bool      `json:"ok"`
	Error   string    `json:"error,omitempty"`
	Pending []Pending `json:"pending,omitempty"`
}

// validID reports whether id is 1 to 128 of [A-Za-z0-9._:-]: a run or
// request id that may name a socket file. (A plain loop: the regular
// expression it replaces cost half a millisecond to compile on every run.)
func validID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// SocketPath is where the socket of run runID lives under stateDir.
func SocketPath(stateDir, runID string) (string, error) {
	if !validID(runID) {
		return "", fmt.Errorf("run id %q is not valid; copy it from the run's launch record", runID)
	}
	// The state dir may be of any length (internal/unixsock binds and
	// connects a long path through its directory); the socket's own name
	// must fit (run ids are 32 hex digits).
	path := filepath.Join(stateDir, "approvals", runID+".sock")
	if err := unixsock.CheckPath(path); err != nil {
		return "", fmt.Errorf("run id %q is too long for its approval socket: %w", runID, err)
	}
	return path, nil
}

// Server accepts approvals for one run.
type Server struct {
	ln       *net.UnixListener
	path     string
	runID    string
	log      *slog.Logger
	onRevoke func()

	mu      sync.Mutex
	pending map[string]*waiter
}

type waiter struct {
	info Pending
	ch   chan bool // buffered(1): true approve, false deny
}

// Listen creates the run's socket. onRevoke is called (once per request)
// when an operator revokes the scope.
func Listen(stateDir, runID string, log *slog.Logger, onRevoke func()) (*Server, error) {
	path, err := SocketPath(stateDir, runID)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create approval socket dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restrict approval socket dir: %w", err)
	}
	_ = os.Remove(path) // a stale socket of a crashed run with the same id
	// No umask around the bind: the umask is the whole process's, and the
	// launcher's other goroutines create files and directories meanwhile
	// (a directory made under 0177 has no search bit). The directory is
	// 0700, so nobody else reaches the socket before the chmod below.
	ln, err := unixsock.Listen(path)
	if err != nil {
		return nil, fmt.Errorf("listen on approval socket (is the state dir writable?): %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict approval socket: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{ln: ln, path: path, runID: runID, log: log, onRevoke: onRevoke, pending: map[string]*waiter{}}, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Serve accepts connections until ctx ends or Close is called.
func (s *Server) Serve(ctx context.Context) {
	go func() {
		<-ctx.Done()
		s.ln.Close()
	}()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		go s.handle(c)
	}
}

// Close removes the socket.
func (s *Server) Close() error {
	err := s.ln.Close()
	_ = os.Remove(s.path)
	return err
}

// Register announces a pending call and returns the channel its verdict
// arrives on. The caller must Unregister when it stops waiting.
func (s *Server) Register(p Pending) <-chan bool {
	if p.RunID == "" {
		p.RunID = s.runID
	}
	if len(p.Paths) > MaxPendingPaths {
		p.Paths = p.Paths[:MaxPendingPaths]
	}
	w := &waiter{info: p, ch: make(chan bool, 1)}
	s.mu.Lock()
	s.pending[p.OpID] = w
	s.mu.Unlock()
	return w.ch
}

// Unregister forgets a pending call.
func (s *Server) Unregister(opID string) {
	s.mu.Lock()
	delete(s.pending, opID)
	s.mu.Unlock()
}

func (s *Server) handle(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := checkPeer(c); err != nil {
		s.log.Warn("approval connection refused", "reason", err.Error())
		writeResponse(c, Response{Error: err.Error()})
		return
	}
	line, err := bufio.NewReader(&limitedReader{c, 4096}).ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return
	}
	var req Request
	if err := strictjson.Unmarshal(line, &req); err != nil {
		writeResponse(c, Response{Error: "request refused: " + err.Error() + "; send one JSON object with action and op_id"})
		return
	}
	writeResponse(c, s.apply(req))
}

func (s *Server) apply(req Request) Response {
	switch req.Action {
	case ActionList:
		s.mu.Lock()
		var out []Pending
		for _, w := range s.pending {
			out = append(out, w.info)
		}
		s.mu.Unlock()
		slices.SortFunc(out, func(a, b Pending) int { return compare(a.Since+a.OpID, b.Since+b.OpID) })
		return Response{OK: true, Pending: out}
	case ActionApprove, ActionDeny:
		s.mu.Lock()
		w, ok := s.pending[req.OpID]
		if ok {
			delete(s.pending, req.OpID)
		}
		s.mu.Unlock()
		if !ok {
			return Response{Error: "no pending call with that op id (already decided, timed out, or wrong run); list them with --list"}
		}
		w.ch <- req.Action == ActionApprove
		s.log.Info("approval received", "op_id", req.OpID, "action", req.Action)
		return Response{OK: true}
	case ActionRevoke:
		if s.onRevoke != nil {
			s.onRevoke()
		}
		return Response{OK: true}
	}
	return Response{Error: "unknown action; use approve, deny, list or revoke"}
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkPeer admits root and the launcher's own user only.
func checkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("read peer credentials: %w", cerr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return errors.New("only root or the user running the launcher may approve calls")
	}
	return nil
}

func writeResponse(c net.Conn, r Response) {
	b, _ := json.Marshal(r)
	_, _ = c.Write(append(b, '\n'))
}

type limitedReader struct {
	c net.Conn
	n int
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("request too long")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.c.Read(p)
	l.n -= n
	return n, err
}

// Send connects to run runID's socket and performs one request.
func Send(ctx context.Context, stateDir, runID string, req Request) (Response, error) {
	path, err := SocketPath(stateDir, runID)
	if err != nil {
		return Response{}, err
	}
	c, err := unixsock.Dial(ctx, path)
	if err != nil {
		return Response{}, fmt.Errorf("connect to run %s (is it running, and is --state-dir the run's?): %w", runID, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return Response{}, fmt.Errorf("send approval request: %w", err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return Response{}, fmt.Errorf("read approval answer: %w", err)
	}
	var resp Response
	if err := strictjson.Unmarshal(line, &resp); err != nil {
		return Response{}, fmt.Errorf("approval answer is not JSON: %w", err)
	}
	if !resp.OK {
		return resp, fmt.Errorf("run %s refused the request: %s", runID, resp.Error)
	}
	return resp, nil
}

// ListAll lists the pending calls of every run on the host that keeps its
// approval socket in stateDir (a socket no run answers on, left by a run
// that crashed, is skipped). The errors name runs that answered wrongly.
func ListAll(ctx context.Context, stateDir string) ([]Pending, []error) {
	socks, err := filepath.Glob(filepath.Join(stateDir, "approvals", "*.sock"))
	if err != nil {
		return nil, []error{err}
	}
	slices.Sort(socks)
	var out []Pending
	var errs []error
	for _, sock := range socks {
		runID := strings.TrimSuffix(filepath.Base(sock), ".sock")
		if !validID(runID) {
			continue
		}
		resp, err := Send(ctx, stateDir, runID, Request{Action: ActionList})
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) {
				continue // a stale socket: its run is gone
			}
			errs = append(errs, err)
			continue
		}
		for _, p := range resp.Pending {
			if p.RunID == "" {
				p.RunID = runID
			}
			out = append(out, p)
		}
	}
	return out, errs
}
