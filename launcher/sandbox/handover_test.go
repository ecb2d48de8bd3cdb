package sandbox

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
	"golang.org/x/sys/unix"
)

// cReader runs the exec stage's handover reader (execstage/handover.c)
// through its test driver (execstage/check.c), built with the address and
// undefined-behaviour sanitizers, in one long-lived process.
type cReader struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

var cReaderOnce struct {
	once sync.Once
	r    *cReader
	err  error
}

func startCReader(tb testing.TB) *cReader {
	tb.Helper()
	o := &cReaderOnce
	o.once.Do(func() {
		cc := "cc"
		if _, err := exec.LookPath(cc); err != nil {
			o.err = fmt.Errorf("no C compiler (scripts/test-env.sh install installs gcc): %v", err)
			return
		}
		dir, err := os.MkdirTemp("", "handover-check-")
		if err != nil {
			o.err = err
			return
		}
		bin := filepath.Join(dir, "check")
		src := filepath.Join(testenv.RepoRoot(), "launcher/sandbox/execstage")
		b, err := exec.Command(cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
			"-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-o", bin,
			filepath.Join(src, "check.c"), filepath.Join(src, "handover.c")).CombinedOutput()
		if err != nil {
			o.err = fmt.Errorf("build the handover check driver: %v\n%s", err, b)
			return
		}
		r := &cReader{cmd: exec.Command(bin)}
		r.cmd.Stderr = os.Stderr
		if r.in, err = r.cmd.StdinPipe(); err != nil {
			o.err = err
			return
		}
		out, err := r.cmd.StdoutPipe()
		if err != nil {
			o.err = err
			return
		}
		r.out = bufio.NewReaderSize(out, 1<<20)
		o.err = r.cmd.Start()
		o.r = r
	})
	if o.err != nil {
		tb.Fatal(o.err)
	}
	return o.r
}

// read is what the C reader says of in: "ok ..." or "refused REASON".
func (r *cReader) read(tb testing.TB, in []byte) string {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	frame := binary.LittleEndian.AppendUint32(nil, uint32(len(in)))
	if _, err := r.in.Write(append(frame, in...)); err != nil {
		tb.Fatalf("the C reader died (input %x): %v", in, err)
	}
	line, err := r.out.ReadString('\n')
	if err != nil {
		tb.Fatalf("the C reader died on input %x: %v", in, err)
	}
	return strings.TrimSuffix(line, "\n")
}

// dump is what check.c prints for an accepted h.
func dump(h *handover) string {
	flags := h.flags()
	var uid, gid uint32
	if flags&hoFIdentity != 0 {
		uid, gid = uint32(h.identity.UID), uint32(h.identity.GID)
	}
	var b strings.Builder
	fileSize, restrict := uint64(0), uint32(0)
	if flags&hoFFSize != 0 {
		fileSize = h.fileSize
	}
	if flags&hoFLandlock != 0 {
		restrict = h.restrictFlags
	}
	fmt.Fprintf(&b, "ok flags=%d uid=%d gid=%d fsize=%d landlock=%d filter=", flags, uid, gid, fileSize, restrict)
	if flags&hoFSeccomp != 0 {
		for _, in := range h.filter {
			fmt.Fprintf(&b, "%04x%02x%02x%08x", in.Code, in.Jt, in.Jf, in.K)
		}
	}
	str := func(k, v string) { fmt.Fprintf(&b, " %s=%s", k, hex.EncodeToString([]byte(v))) }
	if h.dir != "" {
		str("dir", h.dir)
	}
	str("exe", h.exe)
	for _, a := range h.argv {
		str("arg", a)
	}
	for _, e := range h.env {
		str("env", e)
	}
	return b.String()
}

// undump parses check.c's "ok" line back into a handover.
func undump(tb testing.TB, line string) *handover {
	tb.Helper()
	f := strings.Fields(line)
	if len(f) < 7 || f[0] != "ok" {
		tb.Fatalf("not an ok line: %q", line)
	}
	num := func(field, key string) uint64 {
		v, ok := strings.CutPrefix(field, key+"=")
		n, err := strconv.ParseUint(v, 10, 64)
		if !ok || err != nil {
			tb.Fatalf("bad %s in %q", key, line)
		}
		return n
	}
	flags := num(f[1], "flags")
	h := &handover{
		enforce:  flags&hoFEnforce != 0,
		dropCaps: flags&hoFDropCaps != 0,
		landlock: flags&hoFLandlock != 0,
		fileSize: num(f[4], "fsize"),
	}
	if flags&hoFIdentity != 0 {
		h.identity = &Identity{UID: int(num(f[2], "uid")), GID: int(num(f[3], "gid"))}
	}
	h.restrictFlags = uint32(num(f[5], "landlock"))
	prog, _ := strings.CutPrefix(f[6], "filter=")
	for i := 0; i+16 <= len(prog); i += 16 {
		c, _ := strconv.ParseUint(prog[i:i+4], 16, 16)
		jt, _ := strconv.ParseUint(prog[i+4:i+6], 16, 8)
		jf, _ := strconv.ParseUint(prog[i+6:i+8], 16, 8)
		k, _ := strconv.ParseUint(prog[i+8:i+16], 16, 32)
		h.filter = append(h.filter, unix.SockFilter{Code: uint16(c), Jt: uint8(jt), Jf: uint8(jf), K: uint32(k)})
	}
	for _, kv := range f[7:] {
		k, v, _ := strings.Cut(kv, "=")
		s, err := hex.DecodeString(v)
		if err != nil {
			tb.Fatalf("bad %s in %q", k, line)
		}
		switch k {
		case "dir":
			h.dir = string(s)
		case "exe":
			h.exe = string(s)
		case "arg":
			h.argv = append(h.argv, string(s))
		case "env":
			h.env = append(h.env, string(s))
		default:
			tb.Fatalf("unknown field %s in %q", k, line)
		}
	}
	return h
}

var testFilter = []unix.SockFilter{{Code: 0x20, K: 4}, {Code: 0x15, Jt: 1, Jf: 0, K: 0xc000003e}, {Code: 0x06, K: 0x7fff0000}}

func validHandovers() []*handover {
	return []*handover{
		{exe: "/bin/true", argv: []string{"true"}},
		{enforce: true, exe: "/usr/bin/node", argv: []string{"node", "", "server.js"}, env: []string{"PATH=/usr/bin", "HOME=/tmp/x"}, dir: "/work/space"},
		{
			enforce: true, dropCaps: true, identity: &Identity{UID: 0, GID: 0}, fileSize: 1 << 30,
			landlock: true, restrictFlags: 7, filter: testFilter,
			dir: "/", exe: "/x", argv: []string{"x", "é\x01\"\\"}, env: []string{"A=\xff"},
		},
		{enforce: true, identity: &Identity{UID: 1 << 31, GID: 65534}, exe: "/x", argv: []string{"x"}},
		{enforce: true, filter: make([]unix.SockFilter, hoMaxFilter), exe: "/x", argv: []string{"x"}},
	}
}

// TestHandoverMatchesC: what the Go encoder writes, the C reader reads as
// the same fence, field by field.
func TestHandoverMatchesC(t *testing.T) {
	r := startCReader(t)
	for i, h := range validHandovers() {
		b, err := encodeHandover(h)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if got, want := r.read(t, b), dump(h); got != want {
			t.Errorf("%d: the C reader read\n%s\nwant\n%s", i, got, want)
		}
	}
}

// rec is one raw record.
func rec(tag uint16, v []byte) []byte {
	b := binary.LittleEndian.AppendUint16(nil, tag)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// frame puts a header before records.
func frame(records ...[]byte) []byte {
	body := bytes.Join(records, nil)
	b := append([]byte(hoMagic), 1, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	return append(b, body...)
}

// TestHandoverRefusedByC: every malformed handover is refused as a whole,
// with its reason.
func TestHandoverRefusedByC(t *testing.T) {
	r := startCReader(t)
	exe, arg := rec(hoExe, []byte("/x")), rec(hoArg, []byte("x"))
	enforce := func(flags uint32) []byte { return rec(hoFlags, u32(hoFEnforce|flags)) }
	valid, err := encodeHandover(validHandovers()[2])
	if err != nil {
		t.Fatal(err)
	}
	header := func(mut func(b []byte)) []byte {
		b := append([]byte(nil), valid...)
		mut(b)
		return b
	}
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "short header"},
		{"short header", []byte("MWXS\x01\x00"), "short header"},
		{"bad magic", header(func(b []byte) { b[0] = 'X' }), "bad magic"},
		{"version 2", header(func(b []byte) { b[4] = 2 }), "unknown handover version"},
		{"reserved bits", header(func(b []byte) { b[7] = 1 }), "reserved header bits"},
		{"body too large", header(func(b []byte) { binary.LittleEndian.PutUint32(b[8:], hoMaxBody+1) }), "too large"},
		{"body shorter than said", valid[:len(valid)-1], "does not match"},
		{"no records", frame(), "no flags record"},
		{"truncated record header", frame(enforce(0), []byte{7, 0, 2}), "truncated record header"},
		{"record longer than the body", frame(enforce(0), []byte{7, 0, 9, 0, 0, 0, '/', 'x'}), "longer than the handover"},
		{"flags not first", frame(exe, enforce(0), arg), "flags record must come first"},
		{"exe before flags", frame(exe, arg), "flags record must come first"},
		{"flags twice", frame(enforce(0), enforce(0), exe, arg), "out of order or repeated"},
		{"exe twice", frame(enforce(0), exe, exe, arg), "out of order or repeated"},
		{"out of order", frame(enforce(0), arg, exe), "out of order"},
		{"env before arg", frame(enforce(0), exe, rec(hoEnv, []byte("A=1")), arg), "out of order"},
		{"flags of 3 bytes", frame(rec(hoFlags, []byte{1, 0, 0}), exe, arg), "flags record of the wrong size"},
		{"unknown flag", frame(enforce(1<<6), exe, arg), "unknown flags"},
		{"fence without enforce", frame(rec(hoFlags, u32(hoFSeccomp)), rec(hoSeccomp, make([]byte, 8)), exe, arg), "fence flags without enforce"},
		{"identity without flag", frame(enforce(0), rec(hoIdentity, make([]byte, 8)), exe, arg), "identity record without its flag"},
		{"identity flag without record", frame(enforce(hoFIdentity), exe, arg), "identity flag without its record"},
		{"identity of 4 bytes", frame(enforce(hoFIdentity), rec(hoIdentity, make([]byte, 4)), exe, arg), "identity record of the wrong size"},
		{"uid -1", frame(enforce(hoFIdentity), rec(hoIdentity, append(u32(^uint32(0)), u32(1)...)), exe, arg), "identity -1"},
		{"gid -1", frame(enforce(hoFIdentity), rec(hoIdentity, append(u32(1), u32(^uint32(0))...)), exe, arg), "identity -1"},
		{"fsize without flag", frame(enforce(0), rec(hoFSize, make([]byte, 8)), exe, arg), "file size record without its flag"},
		{"fsize flag without record", frame(enforce(hoFFSize), exe, arg), "file size flag without its record"},
		{"fsize 0", frame(enforce(hoFFSize), rec(hoFSize, make([]byte, 8)), exe, arg), "file size limit 0"},
		{"fsize of 4 bytes", frame(enforce(hoFFSize), rec(hoFSize, u32(1)), exe, arg), "file size record of the wrong size"},
		{"landlock without flag", frame(enforce(0), rec(hoLandlock, u32(0)), exe, arg), "landlock record without its flag"},
		{"landlock flag without record", frame(enforce(hoFLandlock), exe, arg), "landlock flag without its record"},
		{"landlock of 8 bytes", frame(enforce(hoFLandlock), rec(hoLandlock, make([]byte, 8)), exe, arg), "landlock record of the wrong size"},
		{"seccomp without flag", frame(enforce(0), rec(hoSeccomp, make([]byte, 8)), exe, arg), "seccomp record without its flag"},
		{"seccomp flag without record", frame(enforce(hoFSeccomp), exe, arg), "seccomp flag without its record"},
		{"seccomp empty", frame(enforce(hoFSeccomp), rec(hoSeccomp, nil), exe, arg), "seccomp program of the wrong size"},
		{"seccomp of 12 bytes", frame(enforce(hoFSeccomp), rec(hoSeccomp, make([]byte, 12)), exe, arg), "seccomp program of the wrong size"},
		{"seccomp too long", frame(enforce(hoFSeccomp), rec(hoSeccomp, make([]byte, 8*(hoMaxFilter+1))), exe, arg), "seccomp program of the wrong size"},
		{"relative dir", frame(enforce(0), rec(hoDir, []byte("work")), exe, arg), "not absolute"},
		{"empty dir", frame(enforce(0), rec(hoDir, nil), exe, arg), "not absolute"},
		{"NUL in dir", frame(enforce(0), rec(hoDir, []byte("/a\x00b")), exe, arg), "NUL"},
		{"empty exe", frame(enforce(0), rec(hoExe, nil), arg), "empty executable"},
		{"NUL in exe", frame(enforce(0), rec(hoExe, []byte("/bin/sh\x00x")), arg), "NUL"},
		{"NUL in arg", frame(enforce(0), exe, rec(hoArg, []byte("a\x00")), arg), "NUL"},
		{"NUL in env", frame(enforce(0), exe, arg, rec(hoEnv, []byte("LD_PRELOAD=/x\x00A=1"))), "NUL"},
		{"no exe", frame(enforce(0), arg), "no executable"},
		{"no argv", frame(enforce(0), exe), "no argv"},
		{"unknown record", frame(enforce(0), exe, arg, rec(10, nil)), "unknown record"},
		{"record 0", frame(rec(0, nil), enforce(0), exe, arg), "out of order"},
		{"trailing byte", frame(enforce(0), exe, arg, []byte{0}), "truncated record header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := r.read(t, tt.in)
			if !strings.HasPrefix(got, "refused ") || !strings.Contains(got, tt.want) {
				t.Errorf("the C reader said %q, want it refused: %s", got, tt.want)
			}
		})
	}
	// Too many strings: refused, not truncated.
	many := [][]byte{enforce(0), exe}
	for range 1<<16 + 1 {
		many = append(many, rec(hoArg, nil))
	}
	if got := r.read(t, frame(many...)); !strings.Contains(got, "refused too many") {
		t.Errorf("%d arguments: %q", 1<<16+1, got)
	}
}

// TestEncodeHandoverRefuses: the encoder refuses what the stage would.
func TestEncodeHandoverRefuses(t *testing.T) {
	for name, h := range map[string]*handover{
		"no exe":         {argv: []string{"x"}},
		"no argv":        {exe: "/x"},
		"NUL in arg":     {exe: "/x", argv: []string{"a\x00b"}},
		"NUL in env":     {exe: "/x", argv: []string{"x"}, env: []string{"A=\x00"}},
		"relative dir":   {exe: "/x", argv: []string{"x"}, dir: "w"},
		"uid -1":         {enforce: true, identity: &Identity{UID: -1, GID: 1}, exe: "/x", argv: []string{"x"}},
		"gid 2^32-1":     {enforce: true, identity: &Identity{UID: 1, GID: 1<<32 - 1}, exe: "/x", argv: []string{"x"}},
		"filter too big": {enforce: true, filter: make([]unix.SockFilter, hoMaxFilter+1), exe: "/x", argv: []string{"x"}},
	} {
		if _, err := encodeHandover(h); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

// FuzzHandover: the C reader never crashes (the sanitizers abort it on an
// over-read or undefined behaviour), and whatever it accepts is exactly the
// Go encoding of what it read: no input is read as a fence other than the
// one its bytes spell.
func FuzzHandover(f *testing.F) {
	for _, h := range validHandovers() {
		b, err := encodeHandover(h)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(frame(rec(hoFlags, u32(hoFEnforce|hoFIdentity)), rec(hoIdentity, make([]byte, 8)), rec(hoExe, []byte("/x")), rec(hoArg, nil)))
	f.Add([]byte("MWXS"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := startCReader(t)
		got := r.read(t, in)
		if strings.HasPrefix(got, "refused ") {
			return
		}
		h := undump(t, got)
		again, err := encodeHandover(h)
		if err != nil {
			t.Fatalf("the C reader accepted %x as %q, which Go cannot encode: %v", in, got, err)
		}
		if !bytes.Equal(again, in) {
			t.Fatalf("the C reader accepted %x as %q, which Go encodes as %x", in, got, again)
		}
	})
}

var execStageBuild struct {
	once sync.Once
	bin  string
	err  error
}

// execStageBin is the exec stage built as `make build` builds it.
func execStageBin(tb testing.TB) string {
	tb.Helper()
	b := &execStageBuild
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "mcpwarden-exec-")
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(dir, ExecStageName)
		b.err = testenv.BuildExecStage(b.bin)
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.bin
}

// runStage runs the exec stage on in (then the go byte, when goAhead) and
// returns its status lines and exit code.
func runStage(t *testing.T, in []byte, goAhead bool) ([]*Status, int) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(execStageBin(t))
	cmd.ExtraFiles = []*os.File{inR, stW}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	stW.Close()
	go func() {
		_, _ = inW.Write(in)
		if goAhead {
			_, _ = inW.Write([]byte{GoByte})
		}
		inW.Close()
	}()
	var sts []*Status
	r := bufio.NewReader(stR)
	for {
		st, err := ReadStatus(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sts = append(sts, st)
	}
	stR.Close()
	_ = cmd.Wait()
	return sts, cmd.ProcessState.ExitCode()
}

// TestExecStage runs the real exec stage: a malformed handover or a failed
// step of the fence is reported (the init tells it from the server's own
// exit by the status line) and nothing is exec'd.
func TestExecStage(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	sh := func(h *handover) *handover {
		h.exe, h.argv, h.dir = "/bin/sh", []string{"sh", "-c", "echo ran > ran"}, dir
		return h
	}
	enc := func(h *handover) []byte {
		b, err := encodeHandover(h)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	weird := filepath.Join(dir, "no\"such\n\x1b[31m")
	tests := []struct {
		name    string
		in      []byte
		goAhead bool
		stages  []Stage // the status lines
		code    int
		ran     bool
		path    string
	}{
		{"garbage", []byte("{\"exe\":\"/bin/sh\"}\n"), true, []Stage{StageSpec}, 127, false, ""},
		{"truncated", enc(sh(&handover{}))[:20], true, []Stage{StageSpec}, 127, false, ""},
		{"refused by the launcher", enc(sh(&handover{})), false, []Stage{StageReady}, 0, false, ""},
		{"audit mode", enc(sh(&handover{})), true, []Stage{StageReady}, 0, true, ""},
		{"enforced", enc(sh(&handover{enforce: true, dropCaps: true})), true, []Stage{StageReady}, 0, true, ""},
		{"landlock without its ruleset", enc(sh(&handover{enforce: true, landlock: true})), true, []Stage{StageLandlock}, 127, false, ""},
		{"a seccomp program the kernel refuses", enc(sh(&handover{enforce: true, filter: []unix.SockFilter{{Code: 0xffff}}})), true, []Stage{StageReady, StageSeccomp}, 127, false, ""},
		{"no such executable", enc(&handover{exe: weird, argv: []string{"x"}}), true, []Stage{StageReady, StageExec}, 127, false, weird},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(marker)
			sts, code := runStage(t, tt.in, tt.goAhead)
			var stages []Stage
			for _, st := range sts {
				stages = append(stages, st.Stage)
			}
			if fmt.Sprint(stages) != fmt.Sprint(tt.stages) || code != tt.code {
				t.Fatalf("statuses %v, exit %d; want %v, exit %d (%+v)", stages, code, tt.stages, tt.code, sts)
			}
			if _, err := os.Stat(marker); (err == nil) != tt.ran {
				t.Errorf("the server ran: %v, want %v", err == nil, tt.ran)
			}
			if last := sts[len(sts)-1]; last.Failed() && (last.Message == "" || tt.path != "" && last.Path != tt.path) {
				t.Errorf("failure %+v: want a message and path %q", last, tt.path)
			}
		})
	}
}

// TestExecStageNotByHand: without the launcher's descriptors the stage
// says what it is and runs nothing.
func TestExecStageNotByHand(t *testing.T) {
	out, err := exec.Command(execStageBin(t)).CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "not run by hand") {
		t.Errorf("exit %d, %q", code, out)
	}
}

func exitCode(err error) int {
	if e, ok := err.(*exec.ExitError); ok {
		return e.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
