// Package localsock serves line-delimited JSON on a local unix socket, the
// one way mcpwarden's processes talk on a host: the daemon's socket and each
// run's approval socket.
//
// Who may connect is decided twice: by the file system (the socket's
// directory is 0700, or 0710 with the admitted group; the socket is 0600,
// or 0660 with the group) and again for every connection by the peer's
// credentials as the kernel reports them (SO_PEERCRED, SO_PEERGROUPS):
// root, the server's own user, and the members of the configured group.
//
// A request is one line of at most MaxLine bytes, optionally carrying file
// descriptors (SCM_RIGHTS) sent with it; the answer is one line. Any number
// of requests may follow on one connection.
package localsock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/mcpwarden/mcpwarden/internal/unixsock"
	"golang.org/x/sys/unix"
)

// Config is one listening socket.
type Config struct {
	Path string
	// Group, when not 0, is a group id whose members are admitted besides
	// root and the server's own user: the directory becomes 0710 and the
	// socket 0660, both owned by that group.
	Group int
	// MaxLine bounds one request line (default 64 KiB).
	MaxLine int
	// MaxFDs is how many descriptors one request may carry (default 0: a
	// request carrying any is refused).
	MaxFDs int
	// Timeout bounds the wait for a request and the write of its answer
	// (default 10 s).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Peer is the process at the other end of a connection, as the kernel
// reports it. PID is in this process's pid namespace (the kernel translates
// SO_PEERCRED); it is the process that connected.
type Peer struct {
	PID      int
	UID, GID uint32
	Groups   []uint32 // supplementary groups
	// PIDFD refers to the peer process itself (SO_PEERPIDFD, Linux 6.5+),
	// nil where the kernel lacks it. Valid while the connection is open.
	PIDFD *os.File
	// State is the handler's own, kept for the connection's lifetime (a
	// connection's requests are handled one after the other).
	State any
}

// Request is one line and the descriptors that came with it. The handler
// owns FDs and must close them.
type Request struct {
	Line []byte
	FDs  []*os.File
}

// Handler answers one request; the value is sent back as one JSON line.
type Handler func(ctx context.Context, peer *Peer, req Request) any

// ErrorResponse is what the server answers by itself (refused peers,
// oversized or malformed requests): {"ok":false,"error":"..."}.
type ErrorResponse struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// Server serves one socket.
type Server struct {
	cfg     Config
	ln      *net.UnixListener
	inode   os.FileInfo // the socket file Listen created
	handler Handler
	log     *slog.Logger
	wg      sync.WaitGroup
	closeMu sync.Once

	refusedPeer, refusedLine atomic.Uint64
}

// Listen creates the socket (and its directory) with the permissions of
// cfg. A socket left by a process that is gone is replaced; one that still
// answers is an error, as is a file that is not a socket.
func Listen(cfg Config, h Handler) (*Server, error) {
	if cfg.Path == "" {
		return nil, errors.New("localsock: no socket path")
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = 64 << 10
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := prepareDir(filepath.Dir(cfg.Path), cfg.Group); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(cfg.Path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket: remove it or choose another path", cfg.Path)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := unixsock.Dial(ctx, cfg.Path)
		cancel()
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("another process is serving %s: stop it or choose another path", cfg.Path)
		}
		if err := os.Remove(cfg.Path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", cfg.Path, err)
		}
	}
	ln, err := unixsock.Listen(cfg.Path) // at any path length
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Path, err)
	}
	// Until the chmod the directory already keeps everyone else out.
	mode := os.FileMode(0o600)
	if cfg.Group != 0 {
		mode = 0o660
		if err := os.Chown(cfg.Path, -1, cfg.Group); err != nil {
			ln.Close()
			return nil, fmt.Errorf("give socket %s to group %d: %w", cfg.Path, cfg.Group, err)
		}
	}
	if err := os.Chmod(cfg.Path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restrict socket %s: %w", cfg.Path, err)
	}
	inode, err := os.Lstat(cfg.Path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket %s: %w", cfg.Path, err)
	}
	ln.SetUnlinkOnClose(false) // Close removes it, and only if it is still ours
	return &Server{cfg: cfg, ln: ln, inode: inode, handler: h, log: cfg.Logger}, nil
}

// prepareDir creates dir if needed, refuses one owned by another user and
// sets its mode: 0700, or 0710 owned by group.
func prepareDir(dir string, group int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create socket directory %s: %w", dir, err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok {
		return fmt.Errorf("socket directory %s is not a directory", dir)
	}
	if int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("socket directory %s belongs to uid %d, not to this process (uid %d): remove it or choose another path", dir, sys.Uid, os.Geteuid())
	}
	mode := os.FileMode(0o700)
	if group != 0 {
		mode = 0o710
		if err := os.Chown(dir, -1, group); err != nil {
			return fmt.Errorf("give socket directory %s to group %d: %w", dir, group, err)
		}
	} else if int(sys.Gid) != os.Getegid() {
		// A directory left by a run with a group keeps it no longer.
		if err := os.Chown(dir, -1, os.Getegid()); err != nil {
			return fmt.Errorf("reset the group of socket directory %s: %w", dir, err)
		}
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("restrict socket directory %s: %w", dir, err)
	}
	return nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.cfg.Path }

// Serve accepts connections until ctx ends or Close is called, then waits
// for the connections in progress and removes the socket.
func (s *Server) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	defer s.wg.Wait()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accept on %s: %w", s.cfg.Path, err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(ctx, c)
		}()
	}
}

// Close stops accepting and removes the socket file, if it is still the
// one this server created.
func (s *Server) Close() error {
	var err error
	s.closeMu.Do(func() {
		err = s.ln.Close()
		if st, serr := os.Lstat(s.cfg.Path); serr == nil && os.SameFile(st, s.inode) {
			_ = os.Remove(s.cfg.Path)
		}
	})
	return err
}

func (s *Server) serveConn(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	peer, err := PeerOf(c)
	if err != nil {
		s.refusedPeer.Add(1)
		s.log.Warn("connection refused: peer credentials unreadable", "socket", filepath.Base(s.cfg.Path), "err", err)
		s.write(c, ErrorResponse{Error: "peer credentials unreadable"})
		return
	}
	if peer.PIDFD != nil {
		defer peer.PIDFD.Close()
	}
	if !s.admitted(peer) {
		s.refusedPeer.Add(1)
		s.log.Warn("connection refused", "socket", filepath.Base(s.cfg.Path), "peer_pid", peer.PID, "peer_uid", peer.UID)
		s.write(c, ErrorResponse{Error: s.refusal(peer)})
		return
	}
	r := &lineReader{c: c, max: s.cfg.MaxLine, maxFDs: s.cfg.MaxFDs}
	defer r.closeFDs()
	for ctx.Err() == nil {
		_ = c.SetReadDeadline(time.Now().Add(s.cfg.Timeout))
		line, fds, err := r.next()
		if err != nil {
			if !errors.Is(err, errEOF) {
				s.refusedLine.Add(1)
				s.write(c, ErrorResponse{Error: err.Error()})
			}
			return
		}
		resp := s.handler(ctx, peer, Request{Line: line, FDs: fds})
		if err := s.write(c, resp); err != nil {
			return
		}
	}
}

// Refused counts the connections refused for their peer and the request
// lines refused before the handler saw them (oversized, unreadable, too
// many descriptors).
func (s *Server) Refused() (peer, line uint64) {
	return s.refusedPeer.Load(), s.refusedLine.Load()
}

// admitted: root, the server's own user, or a member of the group.
func (s *Server) admitted(p *Peer) bool {
	if p.UID == 0 || int(p.UID) == os.Geteuid() {
		return true
	}
	if g := s.cfg.Group; g != 0 {
		return int(p.GID) == g || slices.Contains(p.Groups, uint32(g))
	}
	return false
}

func (s *Server) refusal(p *Peer) string {
	if s.cfg.Group != 0 {
		return fmt.Sprintf("permission denied: uid %d is neither root, the server's user, nor in group %d", p.UID, s.cfg.Group)
	}
	return fmt.Sprintf("permission denied: uid %d is neither root nor the server's user", p.UID)
}

func (s *Server) write(c *net.UnixConn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(ErrorResponse{Error: "internal error: answer not encodable"})
	}
	_ = c.SetWriteDeadline(time.Now().Add(s.cfg.Timeout))
	_, err = c.Write(append(b, '\n'))
	return err
}

// PeerOf reads the credentials of a connection's peer.
func PeerOf(c *net.UnixConn) (*Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var p Peer
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		var cred *unix.Ucred
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr != nil {
			return
		}
		p.PID, p.UID, p.GID = int(cred.Pid), cred.Uid, cred.Gid
		p.Groups, cerr = peerGroups(int(fd))
		if cerr != nil {
			return
		}
		if pfd, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			p.PIDFD = os.NewFile(uintptr(pfd), "peer-pidfd")
		}
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	return &p, nil
}

// peerGroups reads SO_PEERGROUPS, growing the buffer as the kernel asks.
func peerGroups(fd int) ([]uint32, error) {
	n := 64
	for {
		buf := make([]uint32, n)
		size := uint32(4 * n)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch errno {
		case 0:
			return buf[:size/4], nil
		case unix.ERANGE:
			if int(size/4) <= n || size > 1<<20 {
				return nil, fmt.Errorf("SO_PEERGROUPS: %w", errno)
			}
			n = int(size / 4)
		default:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", errno)
		}
	}
}

var errEOF = errors.New("eof")

// lineReader reads request lines and the descriptors sent with them. A
// descriptor belongs to the line being read when it arrives.
type lineReader struct {
	c      *net.UnixConn
	max    int
	maxFDs int
	buf    []byte // read, not yet returned
	fds    []int  // received for the line in progress
	bad    error  // the line in progress is refused (too many fds, truncated control data)
}

func (r *lineReader) closeFDs() {
	for _, fd := range r.fds {
		unix.Close(fd)
	}
	r.fds = nil
}

func (r *lineReader) next() ([]byte, []*os.File, error) {
	oob := make([]byte, unix.CmsgSpace(4*max(r.maxFDs, 1)+64))
	chunk := make([]byte, 16<<10)
	for {
		if i := indexNewline(r.buf); i >= 0 {
			line := slices.Clone(r.buf[:i+1])
			r.buf = append(r.buf[:0], r.buf[i+1:]...)
			if r.bad != nil {
				err := r.bad
				r.bad = nil
				r.closeFDs()
				return nil, nil, err
			}
			files := make([]*os.File, 0, len(r.fds))
			for _, fd := range r.fds {
				files = append(files, os.NewFile(uintptr(fd), "received-fd"))
			}
			r.fds = nil
			return line, files, nil
		}
		if len(r.buf) >= r.max {
			return nil, nil, fmt.Errorf("request larger than %d bytes", r.max)
		}
		n, oobn, flags, _, err := r.c.ReadMsgUnix(chunk[:min(len(chunk), r.max+1-len(r.buf))], oob)
		n, oobn = max(n, 0), max(oobn, 0) // -1 on an error (a deadline, a reset)
		if oobn > 0 {
			r.takeFDs(oob[:oobn])
		}
		if flags&unix.MSG_CTRUNC != 0 && r.bad == nil {
			r.bad = errors.New("request carried more file descriptors than allowed")
		}
		r.buf = append(r.buf, chunk[:n]...)
		if err != nil {
			if n > 0 {
				continue // return what arrived; the error comes back next
			}
			// Nothing pending (an idle connection timed out, the peer left):
			// close without an answer nobody asked for.
			if len(r.buf) == 0 || isBlank(r.buf) {
				return nil, nil, errEOF
			}
			return nil, nil, fmt.Errorf("read request: %w", err)
		}
		if n == 0 && oobn == 0 {
			if len(r.buf) == 0 || isBlank(r.buf) {
				return nil, nil, errEOF
			}
			return nil, nil, errors.New("read request: connection closed in the middle of a line")
		}
	}
}

func (r *lineReader) takeFDs(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		r.bad = errors.New("request carried unreadable control data")
		return
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue // not SCM_RIGHTS
		}
		for _, fd := range fds {
			if len(r.fds) >= r.maxFDs {
				unix.Close(fd)
				if r.bad == nil {
					r.bad = fmt.Errorf("request carried more than %d file descriptors", r.maxFDs)
				}
				continue
			}
			unix.CloseOnExec(fd)
			r.fds = append(r.fds, fd)
		}
	}
}

func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

func isBlank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}
