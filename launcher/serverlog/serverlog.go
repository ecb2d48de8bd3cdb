// Package serverlog turns what a fenced server writes to stderr into lines
// an operator can trust: every line carries a prefix naming the server and
// its pid, so that server output never passes for mcpwarden's own lines
// ("mcpwarden: WARNING ..."), and every byte that a terminal or a log
// viewer would interpret is escaped: C0 and C1 controls (ESC sequences,
// CR, backspace, OSC 8 hyperlinks, BEL), DEL, Unicode format characters
// (bidi overrides and isolates, zero-width characters), line and paragraph
// separators, and bytes that are not UTF-8. Lines are bounded; a longer
// line is cut and continued on a line marked as a continuation.
//
// The escaping is reversible: a backslash is written as `\\`, so every
// `\` in the output starts an escape.
package serverlog

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxLine bounds one output line, prefix and newline included; a single
// write of that size reaches a pipe whole (PIPE_BUF is 4096).
const MaxLine = 4000

// IdleFlush is how long a partial line (no newline yet) waits for the rest
// before it is shown anyway, ended, and continued on the next line.
const IdleFlush = 250 * time.Millisecond

// Prefix is the mark of one server's lines: "[server NAME pid N] ". NAME is
// cut to 32 bytes and reduced to letters, digits and . _ + - so that it
// cannot contain the closing bracket or escapes of its own.
func Prefix(name string, pid int) string {
	b := make([]byte, 0, 32)
	for i := 0; i < len(name) && len(b) < 32; i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '+', c == '-':
			b = append(b, c)
		default:
			b = append(b, '_')
		}
	}
	if len(b) == 0 {
		b = append(b, '_')
	}
	return "[server " + string(b) + " pid " + strconv.Itoa(pid) + "] "
}

// Writer writes what it is given to dst as prefixed, escaped lines, each
// with one Write call. It holds back a partial line until its newline,
// until it would exceed MaxLine, or until Flush.
type Writer struct {
	mu     sync.Mutex
	dst    io.Writer
	prefix string
	cont   string // prefix of a continuation line
	line   []byte // the escaped line being built, prefix included
	cut    bool   // line is a continuation of a line cut before
	pend   []byte // bytes of an incomplete UTF-8 sequence from the last Write
}

// New returns a Writer that marks every line with prefix (see Prefix).
func New(dst io.Writer, prefix string) *Writer {
	cont := prefix
	if n := len(prefix); n >= 2 && prefix[n-2:] == "] " {
		cont = prefix[:n-2] + "]+ "
	}
	w := &Writer{dst: dst, prefix: prefix, cont: cont}
	w.line = append(make([]byte, 0, MaxLine), prefix...)
	return w
}

// Write takes any bytes; it never fails because of their content. It
// returns dst's error, if any, with len(p): the bytes were consumed.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	if len(w.pend) > 0 {
		p = append(w.pend, p...)
		w.pend = nil
	}
	var err error
	for len(p) > 0 {
		// Fast path: a run of printable ASCII other than '\\' goes as is.
		if k := plainRun(p, MaxLine-1-len(w.line)); k > 0 {
			w.line = append(w.line, p[:k]...)
			p = p[k:]
			continue
		}
		r, size := utf8.DecodeRune(p)
		if r == utf8.RuneError && size <= 1 && !utf8.FullRune(p) {
			// The rest of a multi-byte character may come with the next Write.
			w.pend = append([]byte(nil), p...)
			break
		}
		if p[0] == '\n' {
			if e := w.endLine(); e != nil && err == nil {
				err = e
			}
			p = p[1:]
			continue
		}
		if p[0] == '\r' && len(p) > 1 && p[1] == '\n' {
			p = p[1:] // CRLF ends a line like LF
			continue
		}
		if p[0] == '\r' && len(p) == 1 {
			// Maybe the CR of a CRLF split across writes.
			w.pend = []byte{'\r'}
			break
		}
		var esc [10]byte
		e := appendEscaped(esc[:0], p[:size], r)
		if len(w.line)+len(e)+1 > MaxLine {
			if e := w.emit(true); e != nil && err == nil {
				err = e
			}
		}
		w.line = append(w.line, e...)
		p = p[size:]
	}
	return n, err
}

// Flush shows a pending partial line, ended with a newline; what follows
// is marked as its continuation.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pend) > 0 {
		for _, c := range w.pend {
			w.line = appendEscaped(w.line, []byte{c}, utf8.RuneError)
		}
		w.pend = nil
	}
	if !w.partial() {
		return nil
	}
	return w.emit(true)
}

// partial reports whether a line has been started.
func (w *Writer) partial() bool {
	if w.cut {
		return len(w.line) > len(w.cont)
	}
	return len(w.line) > len(w.prefix)
}

// endLine emits the current line for a newline in the input. A line cut
// just before its newline has nothing left to show.
func (w *Writer) endLine() error {
	if w.cut && !w.partial() {
		w.cut = false
		w.line = append(w.line[:0], w.prefix...)
		return nil
	}
	return w.emit(false)
}

// emit writes the current line; cut says the input line goes on.
func (w *Writer) emit(cut bool) error {
	w.line = append(w.line, '\n')
	_, err := w.dst.Write(w.line)
	w.cut = cut
	start := w.prefix
	if cut {
		start = w.cont
	}
	w.line = append(w.line[:0], start...)
	return err
}

// appendEscaped appends the escaped form of one character (r, encoded as
// b; r is utf8.RuneError with len(b) == 1 for a byte that is not UTF-8).
func appendEscaped(dst, b []byte, r rune) []byte {
	switch {
	case r == utf8.RuneError && len(b) == 1:
		return appendHex(dst, `\x`, uint32(b[0]), 2)
	case r == '\\':
		return append(dst, '\\', '\\')
	case r == '\t':
		return append(dst, '\t')
	case r < 0x20 || r == 0x7f:
		switch r {
		case '\r':
			return append(dst, '\\', 'r')
		case '\n':
			return append(dst, '\\', 'n')
		}
		return appendHex(dst, `\x`, uint32(r), 2)
	case r < utf8.RuneSelf:
		return append(dst, b...)
	case unsafeRune(r):
		if r > 0xffff {
			return appendHex(dst, `\U`, uint32(r), 8)
		}
		return appendHex(dst, `\u`, uint32(r), 4)
	}
	return append(dst, b...)
}

// unsafeRune reports a non-ASCII character a terminal or viewer would act
// on or hide: C1 controls, format characters (bidi controls, zero-width
// joiners and spaces, the BOM, tag characters), line and paragraph
// separators, and the replacement character itself (an encoder's sign of
// bad input, kept visible as an escape).
func unsafeRune(r rune) bool {
	return unicode.Is(unicode.Cc, r) || unicode.Is(unicode.Cf, r) ||
		unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) ||
		r == utf8.RuneError
}

func appendHex(dst []byte, lead string, v uint32, digits int) []byte {
	dst = append(dst, lead...)
	const hex = "0123456789abcdef"
	for i := digits - 1; i >= 0; i-- {
		dst = append(dst, hex[(v>>(4*uint(i)))&0xf])
	}
	return dst
}

// Burst and Rate bound how much of the server's stderr reaches the
// launcher's: Burst bytes at once, then Rate bytes a second (a token
// bucket over the bytes the server wrote). The launcher's stderr is the
// operator's log (an MCP client's log file, a journal): without a bound a
// server could fill that disk even with a read-only scope, spend the
// launcher's CPU (outside the run's cgroup) escaping its output, and bury
// mcpwarden's own warnings. What is over the bound is read and dropped, so
// the server never blocks on it, and mcpwarden says how much it dropped.
// Once dropping, output resumes only when half the burst has come back
// (Burst/2/Rate = 4 s without output), so that a steady flood gets two
// lines of mcpwarden's every few seconds, not two per read.
const (
	Burst = 1 << 20
	Rate  = 128 << 10
)

// limiter is the token bucket of Burst and Rate.
type limiter struct {
	now      func() time.Time
	tokens   float64
	last     time.Time
	dropped  int64 // bytes dropped since the last notice of it
	dropping bool
}

func newLimiter(now func() time.Time) *limiter {
	return &limiter{now: now, tokens: Burst, last: now()}
}

// take returns how many of n bytes may be shown now.
func (l *limiter) take(n int) int {
	t := l.now()
	if d := t.Sub(l.last); d > 0 {
		l.tokens += d.Seconds() * Rate
		if l.tokens > Burst {
			l.tokens = Burst
		}
	}
	l.last = t
	if l.dropping && l.tokens < Burst/2 {
		return 0
	}
	k := n
	if float64(k) > l.tokens {
		k = int(l.tokens)
	}
	l.tokens -= float64(k)
	return k
}

// Copy copies src (the read end of the server's stderr pipe) to dst
// through a Writer with prefix until src ends; a partial line that waits
// longer than IdleFlush is shown then. Output past Burst and Rate is
// dropped and counted. It returns the first write error (reading goes on:
// a full stderr must not block the server).
func Copy(dst io.Writer, src *os.File, prefix string) error {
	return copyClock(dst, src, prefix, time.Now)
}

func copyClock(dst io.Writer, src *os.File, prefix string, now func() time.Time) error {
	w := New(dst, prefix)
	lim := newLimiter(now)
	buf := make([]byte, 32<<10)
	var werr error
	note := func(err error) {
		if err != nil && werr == nil {
			werr = err
		}
	}
	// reportDropped says, as mcpwarden's own line, how much was dropped.
	reportDropped := func() {
		if lim.dropped > 0 {
			_, e := io.WriteString(dst, fmt.Sprintf("mcpwarden: WARNING: %d bytes of the server's stderr were dropped (it wrote more than %d KiB at once, or more than %d KiB/s after that)\n", lim.dropped, Burst>>10, Rate>>10))
			note(e)
			lim.dropped = 0
		}
	}
	deadlines := src.SetReadDeadline(time.Time{}) == nil
	for {
		n, err := src.Read(buf)
		if n > 0 {
			k := lim.take(n)
			if k > 0 && lim.dropping {
				// It slowed down: say what was lost, then go on.
				lim.dropping = false
				reportDropped()
			}
			if k > 0 {
				_, e := w.Write(buf[:k])
				note(e)
			}
			if k < n {
				if !lim.dropping {
					lim.dropping = true
					note(w.Flush()) // the line cut here ends visibly
					_, e := io.WriteString(dst, fmt.Sprintf("mcpwarden: WARNING: the server writes more to stderr than %d KiB at once and %d KiB/s after that: dropping it until it slows down\n", Burst>>10, Rate>>10))
					note(e)
				}
				lim.dropped += int64(n - k)
			}
		}
		if err == nil {
			if deadlines {
				if w.hasPartial() {
					_ = src.SetReadDeadline(time.Now().Add(IdleFlush))
				} else {
					_ = src.SetReadDeadline(time.Time{})
				}
			}
			continue
		}
		if os.IsTimeout(err) {
			note(w.Flush())
			_ = src.SetReadDeadline(time.Time{})
			continue
		}
		note(w.Flush())
		reportDropped()
		if err != io.EOF {
			note(fmt.Errorf("read the server's stderr: %w", err))
		}
		return werr
	}
}

func (w *Writer) hasPartial() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.partial() || len(w.pend) > 0
}

// plainRun is the length of the leading run of p, at most max bytes, that
// needs no escaping: printable ASCII other than the backslash.
func plainRun(p []byte, max int) int {
	n := 0
	for n < len(p) && n < max {
		c := p[n]
		if c < 0x20 || c >= 0x7f || c == '\\' {
			break
		}
		n++
	}
	return n
}
