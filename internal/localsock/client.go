package localsock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/mcpwarden/mcpwarden/internal/unixsock"
	"golang.org/x/sys/unix"
)

// MaxAnswer bounds one answer line a client reads.
const MaxAnswer = 16 << 20

// Conn is a client's connection to a socket; requests on it are serialized
// by the caller.
type Conn struct {
	c *net.UnixConn
	r *bufio.Reader
}

// Dial connects to the socket at path.
func Dial(ctx context.Context, path string) (*Conn, error) {
	// At any path length (internal/unixsock).
	uc, err := unixsock.Dial(ctx, path)
	if err != nil {
		return nil, err
	}
	return &Conn{c: uc, r: bufio.NewReaderSize(uc, 64<<10)}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Do sends req as one JSON line, with fds attached (SCM_RIGHTS), and
// decodes the one-line answer into resp. The deadline is ctx's, or timeout.
func (c *Conn) Do(ctx context.Context, timeout time.Duration, req, resp any, fds ...int) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	dl := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = c.c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	b = append(b, '\n')
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.c.WriteMsgUnix(b, oob, nil)
	if err == nil && n < len(b) {
		_, err = c.c.Write(b[n:])
	}
	if err != nil {
		// A server that refuses a peer answers and hangs up at once: its
		// answer may be waiting even though the request could not be sent.
		if line, rerr := readLine(c.r, MaxAnswer); rerr == nil && json.Unmarshal(line, resp) == nil {
			return nil
		}
		return fmt.Errorf("send request: %w", ctxErr(ctx, err))
	}
	line, err := readLine(c.r, MaxAnswer)
	if err != nil {
		return fmt.Errorf("read answer: %w", ctxErr(ctx, err))
	}
	if err := json.Unmarshal(line, resp); err != nil {
		return fmt.Errorf("malformed answer: %w", err)
	}
	return nil
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > max {
			return nil, fmt.Errorf("answer larger than %d bytes", max)
		}
		if err == nil {
			return buf, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}
