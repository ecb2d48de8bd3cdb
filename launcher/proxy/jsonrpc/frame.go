// Package jsonrpc reads, validates and writes the newline-delimited JSON-RPC
// 2.0 frames that MCP uses on stdio. It is strict on purpose: anything the
// proxy and the server could read differently (duplicate keys, invalid UTF-8,
// lone surrogates, batches, odd id types) is refused before any decision is
// made on it.
package jsonrpc

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// DefaultMaxFrame is the default limit on one message: 16 MiB.
const DefaultMaxFrame = 16 << 20

// ErrFrameTooLarge is returned by Reader.Next for a frame longer than the
// limit. The frame has been skipped; the next call reads the frame after it.
var ErrFrameTooLarge = errors.New("jsonrpc: frame larger than the size limit")

// Reader splits a byte stream into frames at '\n'.
type Reader struct {
	br  *bufio.Reader
	max int
	buf []byte
	// Head and Tail keep the first and last bytes of the last oversized frame,
	// so that a caller can still find the id of a response that was too large.
	Head, Tail []byte
}

// NewReader returns a Reader that refuses frames longer than max bytes
// (DefaultMaxFrame when max <= 0).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

const keepBytes = 256

// Next returns the next non-blank frame without its line ending. The slice
// is valid until the next call. At the end of the stream it returns io.EOF;
// a final frame without a newline is returned first.
func (r *Reader) Next() ([]byte, error) {
	for {
		r.buf = r.buf[:0]
		tooLarge := false
		r.Head, r.Tail = r.Head[:0], r.Tail[:0]
		for {
			chunk, err := r.br.ReadSlice('\n')
			if !tooLarge {
				n := len(chunk)
				if n > 0 && chunk[n-1] == '\n' {
					n-- // the newline is not part of the frame
				}
				if len(r.buf)+n > r.max {
					tooLarge = true
					r.Head = append(r.Head, r.buf[:min(len(r.buf), keepBytes)]...)
					if len(r.Head) < keepBytes {
						r.Head = append(r.Head, chunk[:min(len(chunk), keepBytes-len(r.Head))]...)
					}
					r.buf = r.buf[:0]
				} else {
					r.buf = append(r.buf, chunk...)
				}
			}
			if tooLarge {
				r.Tail = appendTail(r.Tail, chunk)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err != nil {
				if tooLarge {
					return nil, ErrFrameTooLarge
				}
				line := bytes.TrimSpace(r.buf)
				if len(line) > 0 {
					return line, nil
				}
				return nil, err
			}
			break
		}
		if tooLarge {
			return nil, ErrFrameTooLarge
		}
		line := bytes.TrimRight(r.buf, "\r\n")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return line, nil
	}
}

func appendTail(tail, chunk []byte) []byte {
	tail = append(tail, chunk...)
	if len(tail) > keepBytes {
		n := copy(tail, tail[len(tail)-keepBytes:])
		tail = tail[:n]
	}
	return tail
}
