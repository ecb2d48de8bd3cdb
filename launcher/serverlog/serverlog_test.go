package serverlog_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"github.com/mcpwarden/mcpwarden/launcher/serverlog"
)

const prefix = "[server naive pid 42] "
const cont = "[server naive pid 42]+ "

func render(chunks ...string) string {
	var out bytes.Buffer
	w := serverlog.New(&out, prefix)
	for _, c := range chunks {
		_, _ = w.Write([]byte(c))
	}
	_ = w.Flush()
	return out.String()
}

func TestEscaping(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"plain", "hello\n", prefix + "hello\n"},
		{"impersonation", "mcpwarden: WARNING: running DEGRADED\n", prefix + "mcpwarden: WARNING: running DEGRADED\n"},
		{"two lines", "a\nb\n", prefix + "a\n" + prefix + "b\n"},
		{"no newline at the end", "tail", prefix + "tail\n"},
		{"empty line", "\n", prefix + "\n"},
		{"CRLF", "a\r\nb\r\n", prefix + "a\n" + prefix + "b\n"},
		{"CR overwrite", "safe\rmcpwarden: fake\n", prefix + `safe\rmcpwarden: fake` + "\n"},
		{"ESC title", "\x1b]0;owned\x07x\n", prefix + `\x1b]0;owned\x07x` + "\n"},
		{"OSC 8 hyperlink", "\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\\n", prefix + `\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\` + "\n"},
		{"CSI colour and clear", "\x1b[2J\x1b[31mred\n", prefix + `\x1b[2J\x1b[31mred` + "\n"},
		{"backspace", "abc\b\b\bxyz\n", prefix + `abc\x08\x08\x08xyz` + "\n"},
		{"NUL and DEL", "a\x00b\x7f\n", prefix + `a\x00b\x7f` + "\n"},
		{"tab kept", "a\tb\n", prefix + "a\tb\n"},
		{"backslash doubled", `C:\path` + "\n", prefix + `C:\\path` + "\n"},
		{"C1 CSI", "a\u009b31mb\n", prefix + `a\u009b31mb` + "\n"},
		{"C1 NEL", "a\u0085b\n", prefix + `a\u0085b` + "\n"},
		{"bidi override", "file\u202etxt.exe\n", prefix + `file\u202etxt.exe` + "\n"},
		{"bidi isolate", "\u2066x\u2069\n", prefix + `\u2066x\u2069` + "\n"},
		{"zero width", "mcp\u200bwarden\n", prefix + `mcp\u200bwarden` + "\n"},
		{"line separator", "a\u2028b\n", prefix + `a\u2028b` + "\n"},
		{"tag character", "a\U000E0041\n", prefix + `a\U000e0041` + "\n"},
		{"BOM", "\ufeffx\n", prefix + `\ufeffx` + "\n"},
		{"invalid UTF-8", "a\xff\xc3(b\n", prefix + `a\xff\xc3(b` + "\n"},
		{"replacement char", "\ufffd\n", prefix + `\ufffd` + "\n"},
		{"printable unicode kept", "héllo 世界 🙂\n", prefix + "héllo 世界 🙂\n"},
		{"overlong encoding", "\xc0\xaf\n", prefix + `\xc0\xaf` + "\n"},
		{"surrogate half", "\xed\xa0\x80\n", prefix + `\xed\xa0\x80` + "\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := render(c.in); got != c.want {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

// TestSplitWrites: the output does not depend on how the input was split
// into writes (a UTF-8 character or a CRLF across two writes).
func TestSplitWrites(t *testing.T) {
	for _, in := range []string{"héllo\r\n世界\n", "a\r", "a\r\nb", "🙂🙂\n", "\xe4\xb8"} {
		whole := render(in)
		for i := 0; i <= len(in); i++ {
			if got := render(in[:i], in[i:]); got != whole {
				t.Errorf("%q split at %d: %q, whole %q", in, i, got, whole)
			}
		}
	}
}

func TestLongLinesAreCut(t *testing.T) {
	in := strings.Repeat("x", 3*serverlog.MaxLine) + "\n" + strings.Repeat("\x1b", serverlog.MaxLine) + "\nend\n"
	out := render(in)
	lines := strings.SplitAfter(out, "\n")
	lines = lines[:len(lines)-1]
	conts := 0
	for _, l := range lines {
		if len(l) > serverlog.MaxLine {
			t.Fatalf("line of %d bytes", len(l))
		}
		if strings.HasPrefix(l, cont) {
			conts++
		} else if !strings.HasPrefix(l, prefix) {
			t.Fatalf("line without prefix: %q", l[:40])
		}
	}
	if conts < 3 || !strings.HasSuffix(out, prefix+"end\n") {
		t.Errorf("%d continuation lines; tail %q", conts, out[len(out)-40:])
	}
	if got := decode(t, out); got != strings.TrimSuffix(in, "\n") {
		t.Errorf("long lines do not decode back")
	}
}

func TestPrefix(t *testing.T) {
	for name, want := range map[string]string{
		"node":                     "[server node pid 7] ",
		"mcp-server_x.1+":          "[server mcp-server_x.1+ pid 7] ",
		"evil] mcpwarden: \x1b[2J": "[server evil__mcpwarden____2J pid 7] ",
		"":                         "[server _ pid 7] ",
		strings.Repeat("a", 100):   "[server " + strings.Repeat("a", 32) + " pid 7] ",
	} {
		if got := serverlog.Prefix(name, 7); got != want {
			t.Errorf("Prefix(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestCopyShowsAPartialLineWhenIdle: a server that writes a prompt without
// a newline and then waits is still shown.
func TestCopyShowsAPartialLineWhenIdle(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &testenv.LockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- serverlog.Copy(out, r, prefix) }()
	if _, err := w.WriteString("loading..."); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), "loading...\n") {
		if time.Now().After(deadline) {
			t.Fatalf("the partial line was never shown: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, _ = w.WriteString(" done\nnext\n")
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.Close()
	want := prefix + "loading...\n" + cont + " done\n" + prefix + "next\n"
	if got := out.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestCopyReportsWriteErrorsAndKeepsReading: a stderr that cannot be
// written must not block the server.
func TestCopyReportsWriteErrorsAndKeepsReading(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan error, 1)
	go func() { done <- serverlog.Copy(failing{}, r, prefix) }()
	for i := 0; i < 100; i++ {
		if _, err := w.Write(bytes.Repeat([]byte("y\n"), 1024)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if err := <-done; err == nil {
		t.Fatal("no error reported")
	}
}

type failing struct{}

func (failing) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// decode reverses the escaping of a whole output: lines joined, escapes
// undone. It fails t on anything the writer must never produce.
func decode(t testing.TB, out string) string {
	t.Helper()
	if out == "" {
		return ""
	}
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("output does not end with a newline: %q", out)
	}
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if len(line)+1 > serverlog.MaxLine {
			t.Fatalf("line of %d bytes", len(line)+1)
		}
		var body string
		switch {
		case strings.HasPrefix(line, cont):
			body = line[len(cont):]
		case strings.HasPrefix(line, prefix):
			if i > 0 {
				b.WriteByte('\n')
			}
			body = line[len(prefix):]
		default:
			t.Fatalf("line without prefix: %q", line)
		}
		if !utf8.ValidString(body) {
			t.Fatalf("invalid UTF-8 in output line %q", body)
		}
		for j := 0; j < len(body); {
			r, size := utf8.DecodeRuneInString(body[j:])
			switch {
			case r == '\\':
				n, v := unescape(t, body[j:])
				b.WriteString(v)
				j += n
				continue
			case r == '\t':
			case r < 0x20 || r == 0x7f:
				t.Fatalf("raw control %#x in output %q", r, body)
			case serverlog.UnsafeRuneForTest(r):
				t.Fatalf("raw unsafe rune %U in output %q", r, body)
			}
			b.WriteString(body[j : j+size])
			j += size
		}
	}
	return b.String()
}

func unescape(t testing.TB, s string) (int, string) {
	t.Helper()
	if len(s) < 2 {
		t.Fatalf("dangling backslash")
	}
	hex := func(n int) uint64 {
		if len(s) < 2+n {
			t.Fatalf("short escape %q", s)
		}
		v, err := strconv.ParseUint(s[2:2+n], 16, 32)
		if err != nil {
			t.Fatalf("bad escape %q", s[:2+n])
		}
		return v
	}
	switch s[1] {
	case '\\':
		return 2, `\`
	case 'r':
		return 2, "\r"
	case 'n':
		return 2, "\n"
	case 'x':
		return 4, string([]byte{byte(hex(2))})
	case 'u':
		return 6, string(rune(hex(4)))
	case 'U':
		return 10, string(rune(hex(8)))
	}
	t.Fatalf("unknown escape %q", s[:2])
	return 0, ""
}

func FuzzWriter(f *testing.F) {
	for _, s := range []string{"", "a\n", "\x1b]8;;x\x1b\\\n", "é\r\n\u202e", strings.Repeat("\xff", 2000), "\\x41", "a\r"} {
		f.Add([]byte(s), uint16(1))
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint16) {
		whole := render(string(in))
		// The same bytes split into writes of split bytes: the same output.
		step := int(split%64) + 1
		var chunks []string
		for i := 0; i < len(in); i += step {
			chunks = append(chunks, string(in[i:min(i+step, len(in))]))
		}
		if got := render(chunks...); got != whole {
			t.Fatalf("split into %d-byte writes: %q, whole %q", step, got, whole)
		}
		want := strings.TrimSuffix(strings.ReplaceAll(string(in), "\r\n", "\n"), "\n")
		if got := decode(t, whole); got != want {
			t.Fatalf("round trip: %q, want %q (output %q)", got, want, whole)
		}
	})
}

// TestCopyDropsAFlood: a server writing more than Burst bytes at once to
// stderr gets Burst bytes shown, the rest read and dropped (it never
// blocks), one warning when the dropping starts and the count when it
// slows down again or ends. Before, every byte reached the operator's log
// (a read-only server could fill the disk under it). The limiter's clock
// is the test's: it moves only when the test says.
func TestCopyDropsAFlood(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var clock atomic.Int64 // nanoseconds since start
	start := time.Unix(1e9, 0)
	now := func() time.Time { return start.Add(time.Duration(clock.Load())) }
	out := &testenv.LockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- serverlog.CopyClockForTest(out, r, prefix, now) }()

	var in bytes.Buffer
	for i := 0; in.Len() < 3*serverlog.Burst; i++ {
		fmt.Fprintf(&in, "line %d %s\n", i, strings.Repeat("x", 90))
	}
	flood := in.Bytes()
	if _, err := w.Write(flood); err != nil { // whole: the copy never blocks the writer
		t.Fatal(err)
	}
	waitFor(t, out, "dropping it until it slows down")
	clock.Add(int64(serverlog.Burst / 2 / serverlog.Rate * int(time.Second))) // half the burst is back
	const after = "after the flood\n"
	if _, err := w.WriteString(after); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, after)
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var server []string
	dropped := 0
	var notices []string
	for _, line := range strings.SplitAfter(out.String(), "\n") {
		if strings.HasPrefix(line, "mcpwarden: ") {
			notices = append(notices, line)
			var n int
			if _, err := fmt.Sscanf(line, "mcpwarden: WARNING: %d bytes of the server's stderr were dropped", &n); err == nil {
				dropped += n
			}
			continue
		}
		server = append(server, line)
	}
	shown := decode(t, strings.Join(server, ""))
	if len(notices) != 2 || !strings.Contains(notices[0], "dropping it") || !strings.Contains(notices[1], "were dropped") {
		t.Fatalf("want one warning when dropping starts and one count, got %q", notices)
	}
	total := len(flood) + len(after)
	if len(shown)+1+dropped != total { // +1: decode leaves out the last newline
		t.Errorf("shown %d + dropped %d bytes, the server wrote %d", len(shown), dropped, total)
	}
	if len(shown) > serverlog.Burst+serverlog.Burst/2+serverlog.Rate+1 {
		t.Errorf("%d bytes shown, more than the burst and what came back", len(shown))
	}

	if !strings.HasPrefix(shown, string(flood[:serverlog.Burst])) {
		t.Errorf("the first %d bytes are not shown as written", serverlog.Burst)
	}
	if !strings.HasSuffix(shown, strings.TrimSuffix(after, "\n")) {
		t.Errorf("what the server wrote once it slowed down is not shown last: %q", shown[max(0, len(shown)-100):])
	}
	if i := strings.Index(out.String(), "were dropped"); i > strings.Index(out.String(), strings.TrimSuffix(after, "\n")) {
		t.Errorf("the count of dropped bytes comes after the line that followed them")
	}
}

func waitFor(t *testing.T, out *testenv.LockedBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("never saw %q", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
