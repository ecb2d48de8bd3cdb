package api

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/localsock"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// Handler is what the daemon does with requests. peer is the connecting
// process as the kernel reports it.
type Handler interface {
	// Register watches the run whose root process is root (a pidfd).
	Register(ctx context.Context, peer *localsock.Peer, r *Registration, root *os.File) (Registered, error)
	Unregister(ctx context.Context, peer *localsock.Peer, runID string) error
	// Records takes a launcher's records (checked here: kinds, one run,
	// valid events) for publishing; nil means they are safely taken.
	Records(ctx context.Context, peer *localsock.Peer, events []schema.Event) error
	Status(ctx context.Context) schema.Health
}

// Server serves the protocol on a unix socket.
type Server struct {
	sock    *localsock.Server
	handler Handler
	log     *slog.Logger
	// PathKeyID is reported in answers to status and register; set it
	// before Serve.
	PathKeyID string

	refusedRequest atomic.Uint64
}

// Refused counts the connections refused for their peer (not root, not
// the daemon's user) and the requests refused before the handler saw them
// (malformed, oversized, invalid, unknown op).
func (s *Server) Refused() (peer, request uint64) {
	peer, lines := s.sock.Refused()
	return peer, lines + s.refusedRequest.Load()
}

// requestTimeout bounds how long one connection may take to send a request.
const requestTimeout = 10 * time.Second

// Config is where and to whom the socket is served.
type Config struct {
	Path string
	// Group, when not 0, is admitted besides root and the daemon's user
	// (socket 0660, directory 0710).
	Group  int
	Logger *slog.Logger
}

// Listen creates the socket (internal/localsock): a live socket at the
// path is an error, a stale one is replaced.
func Listen(cfg Config, h Handler) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{handler: h, log: cfg.Logger}
	sock, err := localsock.Listen(localsock.Config{
		Path: cfg.Path, Group: cfg.Group, MaxLine: MaxMessageSize, MaxFDs: 1, Timeout: requestTimeout, Logger: cfg.Logger,
	}, s.handle)
	if err != nil {
		return nil, fmt.Errorf("daemon socket: %w", err)
	}
	s.sock = sock
	return s, nil
}

// Serve accepts connections until ctx ends, then waits for open
// connections and removes the socket.
func (s *Server) Serve(ctx context.Context) error { return s.sock.Serve(ctx) }

// DecodeRequest strictly decodes one request line (schema/strictjson:
// exact-case names, no duplicates at any depth, no unknown fields, no
// trailing data), records included.
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

func (s *Server) handle(ctx context.Context, peer *localsock.Peer, r localsock.Request) any {
	defer func() {
		for _, f := range r.FDs {
			f.Close()
		}
	}()
	resp, handled := s.dispatch(ctx, peer, r)
	if !handled {
		s.refusedRequest.Add(1)
	}
	return resp
}

// dispatch answers one request; handled is false when the request was
// refused before it reached the handler.
func (s *Server) dispatch(ctx context.Context, peer *localsock.Peer, r localsock.Request) (resp Response, handled bool) {
	req, err := DecodeRequest(r.Line)
	if err != nil {
		return Response{Error: err.Error()}, false
	}
	if req.Op != OpRegister && len(r.FDs) > 0 {
		return Response{Error: req.Op + ": no file descriptor may come with this request"}, false
	}
	switch req.Op {
	case OpRegister:
		if req.Register == nil {
			return Response{Error: "register: missing \"register\" object"}, false
		}
		if err := req.Register.Validate(); err != nil {
			return Response{Error: "register: " + err.Error()}, false
		}
		if len(r.FDs) != 1 {
			return Response{Error: "register: the root process must come as a pidfd with the request (SCM_RIGHTS); upgrade mcpwarden so launcher and daemon match"}, false
		}
		reg, err := s.handler.Register(ctx, peer, req.Register, r.FDs[0])
		if err != nil {
			return Response{Error: "register: " + err.Error()}, true
		}
		return Response{OK: true, Registered: &reg, PathKeyID: s.PathKeyID}, true
	case OpUnregister:
		if err := s.handler.Unregister(ctx, peer, req.RunID); err != nil {
			return Response{Error: "unregister: " + err.Error()}, true
		}
		return Response{OK: true}, true
	case OpRecords:
		if err := CheckRecords(req.Records); err != nil {
			return Response{Error: "records: " + err.Error()}, false
		}
		if err := s.handler.Records(ctx, peer, req.Records); err != nil {
			return Response{Error: "records: " + err.Error()}, true
		}
		return Response{OK: true, Taken: len(req.Records)}, true
	case OpStatus:
		h := s.handler.Status(ctx)
		return Response{OK: true, Health: &h, PathKeyID: s.PathKeyID}, true
	}
	return Response{Error: fmt.Sprintf("unknown op %q: want register, unregister, records or status", req.Op)}, false
}

// CheckRecords checks a launcher's batch: 1 to MaxRecords events, each
// valid, of a kind a launcher produces, all of one run.
func CheckRecords(events []schema.Event) error {
	if len(events) == 0 || len(events) > MaxRecords {
		return fmt.Errorf("want 1 to %d records, got %d", MaxRecords, len(events))
	}
	run := events[0].RunID
	for i := range events {
		e := &events[i]
		if !slices.Contains(RecordKinds, e.Kind) {
			return fmt.Errorf("record %d is a %q event: a launcher sends only launch and decision records", i, e.Kind)
		}
		if e.RunID == "" || e.RunID != run {
			return fmt.Errorf("record %d: all records of a request belong to one run", i)
		}
		if err := e.Validate(); err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
	}
	return nil
}
