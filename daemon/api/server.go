package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// Handler is what the daemon does with requests.
type Handler interface {
	Register(ctx context.Context, r *Registration) (slot uint32, err error)
	Unregister(ctx context.Context, runID string) error
	Status(ctx context.Context) schema.Health
}

// Server serves the protocol on a unix socket.
type Server struct {
	ln      *net.UnixListener
	path    string
	handler Handler
	log     *slog.Logger
	wg      sync.WaitGroup
	// PathKeyID is reported in answers to status and register; set it
	// before Serve.
	PathKeyID string

	refusedPeer, refusedRequest atomic.Uint64
}

// Refused counts the connections refused for their peer (not root, not
// the daemon's user) and the requests refused before the handler saw them
// (malformed, oversized, invalid, unknown op).
func (s *Server) Refused() (peer, request uint64) {
	return s.refusedPeer.Load(), s.refusedRequest.Load()
}

// requestTimeout bounds how long one connection may take to send a request.
const requestTimeout = 10 * time.Second

// Listen creates the socket at path: its directory is created 0700 and the
// socket itself is 0600, so only root reaches it; every connection is also
// checked with SO_PEERCRED. A stale socket left by a dead daemon is
// replaced; a live one is an error.
func Listen(path string, h Handler, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket: remove it or pass another --socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("another daemon is serving %s: stop it or pass another --socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict socket permissions: %w", err)
	}
	return &Server{ln: ln, path: path, handler: h, log: log}, nil
}

// Serve accepts connections until ctx ends, then closes the listener,
// waits for open connections and removes the socket.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	defer func() {
		s.wg.Wait()
		os.Remove(s.path)
	}()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept on registration socket: %w", err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(ctx, c)
		}()
	}
}

// peerAllowed admits root and the daemon's own uid.
func peerAllowed(c *net.UnixConn) (int32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return cred.Pid, fmt.Errorf("uid %d may not register runs", cred.Uid)
	}
	return cred.Pid, nil
}

func (s *Server) serveConn(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	pid, err := peerAllowed(c)
	if err != nil {
		s.refusedPeer.Add(1)
		s.log.Warn("registration refused", "peer_pid", pid, "err", err)
		writeResponse(c, Response{Error: "permission denied: only root may use the daemon socket"})
		return
	}
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		_ = c.SetReadDeadline(time.Now().Add(requestTimeout))
		line, err := readLine(r)
		if err != nil {
			if !errors.Is(err, errEOF) {
				s.refusedRequest.Add(1)
				writeResponse(c, Response{Error: err.Error()})
			}
			return
		}
		resp := s.handle(ctx, line)
		if err := writeResponse(c, resp); err != nil {
			return
		}
	}
}

var errEOF = errors.New("eof")

// readLine reads one request line of at most MaxMessageSize bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		// Checked before waiting for more: a line that has reached the
		// limit without its newline is refused at once.
		if len(buf) >= MaxMessageSize {
			return nil, fmt.Errorf("request larger than %d bytes", MaxMessageSize)
		}
		if err == nil {
			return buf, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(bytes.TrimSpace(buf)) == 0 {
			return nil, errEOF
		}
		return nil, fmt.Errorf("read request: %w", err)
	}
}

// DecodeRequest strictly decodes one request line (schema/strictjson:
// exact-case names, no duplicates at any depth, no unknown fields, no
// trailing data).
func DecodeRequest(line []byte) (*Request, error) {
	var req Request
	if err := strictjson.Unmarshal(line, &req); err != nil {
		return nil, fmt.Errorf("malformed request: %w", err)
	}
	if req.Version != Version {
		return nil, fmt.Errorf("protocol version %d not supported (daemon speaks %d): upgrade mcpwarden so launcher and daemon match", req.Version, Version)
	}
	return &req, nil
}

func (s *Server) handle(ctx context.Context, line []byte) Response {
	resp, handled := s.dispatch(ctx, line)
	if !handled {
		s.refusedRequest.Add(1)
	}
	return resp
}

// dispatch answers one request; handled is false when the request was
// refused before it reached the handler.
func (s *Server) dispatch(ctx context.Context, line []byte) (resp Response, handled bool) {
	req, err := DecodeRequest(line)
	if err != nil {
		return Response{Error: err.Error()}, false
	}
	switch req.Op {
	case OpRegister:
		if req.Register == nil {
			return Response{Error: "register: missing \"register\" object"}, false
		}
		if err := req.Register.Validate(); err != nil {
			return Response{Error: "register: " + err.Error()}, false
		}
		slot, err := s.handler.Register(ctx, req.Register)
		if err != nil {
			return Response{Error: "register: " + err.Error()}, true
		}
		return Response{OK: true, Slot: slot, PathKeyID: s.PathKeyID}, true
	case OpUnregister:
		if err := s.handler.Unregister(ctx, req.RunID); err != nil {
			return Response{Error: "unregister: " + err.Error()}, true
		}
		return Response{OK: true}, true
	case OpStatus:
		h := s.handler.Status(ctx)
		return Response{OK: true, Health: &h, PathKeyID: s.PathKeyID}, true
	}
	return Response{Error: fmt.Sprintf("unknown op %q: want register, unregister or status", req.Op)}, false
}

func writeResponse(c net.Conn, r Response) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_ = c.SetWriteDeadline(time.Now().Add(requestTimeout))
	_, err = c.Write(append(b, '\n'))
	return err
}
