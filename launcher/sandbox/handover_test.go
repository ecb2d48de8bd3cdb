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
	"syscall"
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
	fileSize, openFiles, restrict := uint64(0), uint64(0), uint32(0)
	if flags&hoFFSize != 0 {
		fileSize = h.fileSize
	}
	if flags&hoFNoFile != 0 {
		openFiles = h.openFiles
	}
	if flags&hoFLandlock != 0 {
		restrict = h.restrictFlags
	}
	fmt.Fprintf(&b, "ok flags=%d uid=%d gid=%d fsize=%d nofile=%d landlock=%d filter=", flags, uid, gid, fileSize, openFiles, restrict)
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
	fmt.Fprintf(&b, " ns=%d", h.ns)
	if h.hostname != "" {
		str("hostname", h.hostname)
	}
	if v := h.server; v != nil {
		fmt.Fprintf(&b, " server=%d,%d,%d,%d", v.Inside.UID, v.Inside.GID, v.Host.UID, v.Host.GID)
	}
	if h.initID != nil {
		fmt.Fprintf(&b, " initid=%d,%d", h.initID.UID, h.initID.GID)
	}
	if flags&hoFLandlock != 0 {
		fmt.Fprintf(&b, " ruleset=%d,%d,%d", h.handled[0], h.handled[1], h.handled[2])
	}
	str("staging", h.staging)
	for _, m := range h.mounts {
		fmt.Fprintf(&b, " mount=%d:%x", m.flags, m.path)
	}
	for _, l := range h.links {
		fmt.Fprintf(&b, " link=%x:%x", l.Path, l.Target)
	}
	for _, d := range h.dirs {
		str("mkdir", d)
	}
	if t := h.tmp; t != nil {
		fmt.Fprintf(&b, " tmp=%d,%d,%d:%x", t.size, t.owner.UID, t.owner.GID, t.path)
	}
	for _, r := range h.rules {
		fmt.Fprintf(&b, " rule=%d,%d:%x", r.access, r.flags, r.path)
	}
	for _, p := range h.ports {
		fmt.Fprintf(&b, " port=%d,%d", p.Access, p.Port)
	}
	return b.String()
}

// undump parses check.c's "ok" line back into a handover.
func undump(tb testing.TB, line string) *handover {
	tb.Helper()
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "ok" {
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
		enforce:   flags&hoFEnforce != 0,
		dropCaps:  flags&hoFDropCaps != 0,
		landlock:  flags&hoFLandlock != 0,
		fileSize:  num(f[4], "fsize"),
		openFiles: num(f[5], "nofile"),
	}
	if flags&hoFIdentity != 0 {
		h.identity = &Identity{UID: int(num(f[2], "uid")), GID: int(num(f[3], "gid"))}
	}
	h.restrictFlags = uint32(num(f[6], "landlock"))
	prog, _ := strings.CutPrefix(f[7], "filter=")
	for i := 0; i+16 <= len(prog); i += 16 {
		c, _ := strconv.ParseUint(prog[i:i+4], 16, 16)
		jt, _ := strconv.ParseUint(prog[i+4:i+6], 16, 8)
		jf, _ := strconv.ParseUint(prog[i+6:i+8], 16, 8)
		k, _ := strconv.ParseUint(prog[i+8:i+16], 16, 32)
		h.filter = append(h.filter, unix.SockFilter{Code: uint16(c), Jt: uint8(jt), Jf: uint8(jf), K: uint32(k)})
	}
	nums := func(v string, n int) []uint64 {
		p := strings.Split(v, ",")
		if len(p) != n {
			tb.Fatalf("bad numbers %q in %q", v, line)
		}
		out := make([]uint64, n)
		for i, x := range p {
			u, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				tb.Fatalf("bad number %q in %q", x, line)
			}
			out[i] = u
		}
		return out
	}
	unhex := func(v string) string {
		b, err := hex.DecodeString(v)
		if err != nil {
			tb.Fatalf("bad hex %q in %q", v, line)
		}
		return string(b)
	}
	id := func(uid, gid uint64) Identity { return Identity{UID: int(uid), GID: int(gid)} }
	for _, kv := range f[8:] {
		k, v, _ := strings.Cut(kv, "=")
		pre, post, _ := strings.Cut(v, ":")
		switch k {
		case "ns":
			h.ns = uint32(nums(v, 1)[0])
			continue
		case "server":
			n := nums(v, 4)
			h.server = &ServerUserNS{Inside: id(n[0], n[1]), Host: id(n[2], n[3])}
			continue
		case "initid":
			n := nums(v, 2)
			i := id(n[0], n[1])
			h.initID = &i
			continue
		case "ruleset":
			n := nums(v, 3)
			h.handled = [3]uint64{n[0], n[1], n[2]}
			continue
		case "mount":
			h.mounts = append(h.mounts, planMount{flags: uint32(nums(pre, 1)[0]), path: unhex(post)})
			continue
		case "link":
			h.links = append(h.links, Link{Path: unhex(pre), Target: unhex(post)})
			continue
		case "tmp":
			n := nums(pre, 3)
			h.tmp = &planTmp{size: n[0], owner: id(n[1], n[2]), path: unhex(post)}
			continue
		case "rule":
			n := nums(pre, 2)
			h.rules = append(h.rules, planRule{access: n[0], flags: uint32(n[1]), path: unhex(post)})
			continue
		case "port":
			n := nums(v, 2)
			h.ports = append(h.ports, PortRule{Access: n[0], Port: uint16(n[1])})
			continue
		}
		s, err := hex.DecodeString(v)
		if err != nil {
			tb.Fatalf("bad %s in %q", k, line)
		}
		switch k {
		case "hostname":
			h.hostname = string(s)
		case "staging":
			h.staging = string(s)
		case "mkdir":
			h.dirs = append(h.dirs, string(s))
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
		{exe: "/bin/true", argv: []string{"true"}, staging: "/s"},
		{enforce: true, exe: "/usr/bin/node", argv: []string{"node", "", "server.js"}, env: []string{"PATH=/usr/bin", "HOME=/tmp/x"}, dir: "/work/space", staging: "/tmp/mcpwarden-run-1"},
		{
			enforce: true, dropCaps: true, identity: &Identity{UID: 0, GID: 0}, fileSize: 1 << 30, openFiles: 1024,
			landlock: true, restrictFlags: 7, filter: testFilter,
			dir: "/", exe: "/x", argv: []string{"x", "é\x01\"\\"}, env: []string{"A=\xff"},
			ns: hoNSNet | hoNSMemfdNoexec | hoNSNoUserNS, hostname: "mcpwarden", initID: &Identity{UID: 7, GID: 8},
			handled: [3]uint64{0xffff, 3, 3}, staging: "/tmp/r",
			mounts: []planMount{{hoMDir | hoMExec, "/usr"}, {0, "/etc/ld.so.cache"}, {hoMDev | hoMWrite, "/dev/null"}, {hoMDir | hoMWrite, "/w/é x"}, {hoMMask, "/w/é x/.env"}, {hoMMask | hoMDir, "/w/é x/.ssh"}},
			links:  []Link{{Path: "/bin", Target: "usr/bin"}, {Path: "/lib64/ld.so", Target: "/usr/lib/x86_64-linux-gnu/ld-2.so"}},
			dirs:   []string{"/w", "/w/sub"},
			tmp:    &planTmp{size: 1 << 28, owner: Identity{UID: 1000, GID: 1000}, path: "/tmp/r"},
			rules:  []planRule{{access: 0xffff, path: "/w"}, {access: 1, flags: hoRSelf}, {access: 3, flags: hoRSelf, path: "/fd"}, {access: 1, flags: hoRPin, path: "/proc/cpuinfo"}},
			ports:  []PortRule{{Port: 443, Access: 2}, {Port: 0, Access: 1}},
		},
		{enforce: true, identity: &Identity{UID: 1 << 31, GID: 65534}, exe: "/x", argv: []string{"x"}, staging: "/s"},
		{enforce: true, filter: make([]unix.SockFilter, hoMaxFilter), exe: "/x", argv: []string{"x"}, staging: "/s"},
		{
			enforce: true, dropCaps: true, exe: "/x", argv: []string{"x"}, staging: "/s",
			server: &ServerUserNS{Inside: Identity{UID: 1000, GID: 100}, Host: Identity{UID: 0x70000001, GID: 0x70000001}},
			initID: &Identity{UID: 0x70000001, GID: 0x70000001},
			mounts: []planMount{{hoMDir | hoMWrite | hoMIdmap, "/home/u/w"}},
		},
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
func frame(records ...[]byte) framed {
	body := bytes.Join(records, nil)
	b := append([]byte(hoMagic), hoVersion, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	return append(b, body...)
}

type framed []byte

// with is f with more records at its end.
func (f framed) with(records ...[]byte) framed {
	body := append(append([]byte(nil), f[hoHeaderSize:]...), bytes.Join(records, nil)...)
	return frame(body)
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
	ns0, staging := rec(hoNS, u32(0)), rec(hoStaging, []byte("/s"))
	ids := func(v ...uint32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		return b
	}
	mount := func(flags uint32, p string) []byte { return rec(hoMount, append(u32(flags), p...)) }
	tmp := rec(hoTmp, append(append(binary.LittleEndian.AppendUint64(nil, 1), ids(0, 0)...), "/t"...))
	rule := func(access uint64, flags uint32, p string) []byte {
		return rec(hoRule, append(append(binary.LittleEndian.AppendUint64(nil, access), u32(flags)...), p...))
	}
	port := func(access uint64, p uint16) []byte {
		return rec(hoPort, binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint64(nil, access), p))
	}
	// A plan with a ruleset handling fs 0xffff and net 3, to add rules to.
	ll := [][]byte{enforce(hoFLandlock), rec(hoLandlock, u32(0)), exe, arg, ns0, rec(hoRuleset, append(append(binary.LittleEndian.AppendUint64(nil, 0xffff), binary.LittleEndian.AppendUint64(nil, 3)...), make([]byte, 8)...)), staging}
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "short header"},
		{"short header", []byte("MWXS\x01\x00"), "short header"},
		{"bad magic", header(func(b []byte) { b[0] = 'X' }), "bad magic"},
		{"version 1 (the exec stage's handover of session 6)", header(func(b []byte) { b[4] = 1 }), "unknown handover version"},
		{"version 3", header(func(b []byte) { b[4] = 3 }), "unknown handover version"},
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
		{"unknown flag", frame(enforce(1<<7), exe, arg), "unknown flags"},
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
		{"nofile without flag", frame(enforce(0), rec(hoNoFile, make([]byte, 8)), exe, arg), "open files record without its flag"},
		{"nofile flag without record", frame(enforce(hoFNoFile), exe, arg), "open files flag without its record"},
		{"nofile 0", frame(enforce(hoFNoFile), rec(hoNoFile, make([]byte, 8)), exe, arg), "open files limit 0"},
		{"nofile of 4 bytes", frame(enforce(hoFNoFile), rec(hoNoFile, u32(1)), exe, arg), "open files record of the wrong size"},
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
		{"unknown record", frame(enforce(0), exe, arg, ns0, rec(23, nil)), "unknown record"},
		{"record 0", frame(rec(0, nil), enforce(0), exe, arg), "out of order"},
		{"trailing byte", frame(enforce(0), exe, arg, []byte{0}), "truncated record header"},
		// The run's set-up.
		{"no namespaces record", frame(enforce(0), exe, arg, staging), "no namespaces record"},
		{"no staging directory", frame(enforce(0), exe, arg, ns0), "no staging directory"},
		{"namespaces of 2 bytes", frame(enforce(0), exe, arg, rec(hoNS, []byte{0, 0}), staging), "namespaces record of the wrong size"},
		{"unknown namespace flag", frame(enforce(0), exe, arg, rec(hoNS, u32(1<<3)), staging), "unknown namespace flags"},
		{"namespaces twice", frame(enforce(0), exe, arg, ns0, ns0, staging), "out of order or repeated"},
		{"empty host name", frame(enforce(0), exe, arg, ns0, rec(hoHostname, nil), staging), "host name of the wrong size"},
		{"host name of 65 bytes", frame(enforce(0), exe, arg, ns0, rec(hoHostname, bytes.Repeat([]byte("h"), 65)), staging), "host name of the wrong size"},
		{"NUL in host name", frame(enforce(0), exe, arg, ns0, rec(hoHostname, []byte("a\x00")), staging), "NUL"},
		{"server of 12 bytes", frame(enforce(0), exe, arg, ns0, rec(hoServer, make([]byte, 12)), staging), "server user namespace record of the wrong size"},
		{"server host uid 0", frame(enforce(0), exe, arg, ns0, rec(hoServer, ids(1, 1, 0, 5)), staging), "must not be root"},
		{"server host gid 0", frame(enforce(0), exe, arg, ns0, rec(hoServer, ids(1, 1, 5, 0)), staging), "must not be root"},
		{"server host uid -1", frame(enforce(0), exe, arg, ns0, rec(hoServer, ids(1, 1, ^uint32(0), 5)), staging), "must not be root or -1"},
		{"server inside uid -1", frame(enforce(0), exe, arg, ns0, rec(hoServer, ids(^uint32(0), 1, 5, 5)), staging), "server identity -1"},
		{"identity and server", frame(enforce(hoFIdentity), rec(hoIdentity, make([]byte, 8)), exe, arg, ns0, rec(hoServer, ids(1, 1, 5, 5)), staging), "an identity and the server's user namespace"},
		{"init id of 4 bytes", frame(enforce(0), exe, arg, ns0, rec(hoInitID, u32(1)), staging), "init identity record of the wrong size"},
		{"init uid -1", frame(enforce(0), exe, arg, ns0, rec(hoInitID, ids(^uint32(0), 1)), staging), "init identity -1"},
		{"ruleset without landlock", frame(enforce(0), exe, arg, ns0, rec(hoRuleset, make([]byte, 24)), staging), "ruleset record without the landlock flag"},
		{"landlock without ruleset", frame(enforce(hoFLandlock), rec(hoLandlock, u32(0)), exe, arg, ns0, staging), "landlock flag without its ruleset"},
		{"ruleset of 16 bytes", frame(enforce(hoFLandlock), rec(hoLandlock, u32(0)), exe, arg, ns0, rec(hoRuleset, make([]byte, 16)), staging), "ruleset record of the wrong size"},
		{"relative staging", frame(enforce(0), exe, arg, ns0, rec(hoStaging, []byte("tmp/r"))), "staging directory not a clean"},
		{"staging /", frame(enforce(0), exe, arg, ns0, rec(hoStaging, []byte("/"))), "staging directory not a clean"},
		{"staging with ..", frame(enforce(0), exe, arg, ns0, rec(hoStaging, []byte("/tmp/../etc"))), "staging directory not a clean"},
		{"staging with //", frame(enforce(0), exe, arg, ns0, rec(hoStaging, []byte("/tmp//r"))), "staging directory not a clean"},
		{"staging with a trailing /", frame(enforce(0), exe, arg, ns0, rec(hoStaging, []byte("/tmp/r/"))), "staging directory not a clean"},
		{"staging with .", frame(enforce(0), exe, arg, ns0, rec(hoStaging, []byte("/tmp/./r"))), "staging directory not a clean"},
		{"staging of 4096 bytes", frame(enforce(0), exe, arg, ns0, rec(hoStaging, append([]byte("/"), bytes.Repeat([]byte("a"), 4095)...))), "staging directory not a clean"},
		{"mount of 3 bytes", frame(enforce(0), exe, arg, ns0, staging, rec(hoMount, []byte{0, 0, 0})), "mount record of the wrong size"},
		{"mount without a path", frame(enforce(0), exe, arg, ns0, staging, rec(hoMount, u32(0))), "mount path not a clean"},
		{"mount with ..", frame(enforce(0), exe, arg, ns0, staging, mount(0, "/usr/../etc/shadow")), "mount path not a clean"},
		{"unknown mount flag", frame(enforce(0), exe, arg, ns0, staging, mount(1<<6, "/usr")), "unknown mount flags"},
		{"writable mask", frame(enforce(0), exe, arg, ns0, staging, mount(hoMMask|hoMWrite, "/w/.env")), "a mask must be read-only"},
		{"executable mask", frame(enforce(0), exe, arg, ns0, staging, mount(hoMMask|hoMExec, "/w/.env")), "a mask must be read-only"},
		{"device mask", frame(enforce(0), exe, arg, ns0, staging, mount(hoMMask|hoMDev, "/w/.env")), "a mask must be read-only"},
		{"idmap without server", frame(enforce(0), exe, arg, ns0, staging, mount(hoMIdmap|hoMDir, "/w")), "idmapped mount without"},
		{"device directory", frame(enforce(0), exe, arg, ns0, staging, mount(hoMDev|hoMDir, "/dev")), "device mount of a directory"},
		{"mount before staging", frame(enforce(0), exe, arg, ns0, mount(0, "/usr"), staging), "out of order"},
		{"link of 3 bytes", frame(enforce(0), exe, arg, ns0, staging, rec(hoLink, []byte{1, 0, 0})), "link record of the wrong size"},
		{"link path longer than the record", frame(enforce(0), exe, arg, ns0, staging, rec(hoLink, append(u32(9), "/bin"...))), "link record of the wrong size"},
		{"link without a target", frame(enforce(0), exe, arg, ns0, staging, rec(hoLink, append(u32(4), "/bin"...))), "link record of the wrong size"},
		{"link path relative", frame(enforce(0), exe, arg, ns0, staging, rec(hoLink, append(u32(3), "binusr/bin"...))), "link path not clean"},
		{"NUL in link target", frame(enforce(0), exe, arg, ns0, staging, rec(hoLink, append(u32(4), "/binusr\x00"...))), "link path not clean or target holds a NUL"},
		{"mkdir relative", frame(enforce(0), exe, arg, ns0, staging, rec(hoMkdir, []byte("w"))), "directory not a clean"},
		{"tmp of 15 bytes", frame(enforce(0), exe, arg, ns0, staging, rec(hoTmp, make([]byte, 15))), "tmp record of the wrong size"},
		{"tmp size 0", frame(enforce(0), exe, arg, ns0, staging, rec(hoTmp, append(make([]byte, 16), "/t"...))), "tmp size 0"},
		{"tmp owner -1", frame(enforce(0), exe, arg, ns0, staging, rec(hoTmp, append(append(binary.LittleEndian.AppendUint64(nil, 1), ids(^uint32(0), 0)...), "/t"...))), "tmp owner -1"},
		{"tmp without a path", frame(enforce(0), exe, arg, ns0, staging, rec(hoTmp, append(binary.LittleEndian.AppendUint64(nil, 1), ids(0, 0)...))), "tmp path not a clean"},
		{"tmp twice", frame(enforce(0), exe, arg, ns0, staging, tmp, tmp), "out of order or repeated"},
		{"rule without ruleset", frame(enforce(0), exe, arg, ns0, staging, rule(1, 0, "/w")), "rule without a ruleset"},
		{"rule of 11 bytes", frame(ll...).with(rec(hoRule, make([]byte, 11))), "rule record of the wrong size"},
		{"rule access 0", frame(ll...).with(rule(0, 0, "/w")), "rule access not handled"},
		{"rule access not handled", frame(ll...).with(rule(1<<20, 0, "/w")), "rule access not handled"},
		{"unknown rule flag", frame(ll...).with(rule(1, 1<<2, "/w")), "unknown rule flags"},
		{"rule without a path", frame(ll...).with(rule(1, 0, "")), "rule path not a clean"},
		{"self rule with a relative path", frame(ll...).with(rule(1, hoRSelf, "fd")), "rule path not a clean"},
		{"self rule with ..", frame(ll...).with(rule(1, hoRSelf, "/../1/mem")), "rule path not a clean"},
		{"port without ruleset", frame(enforce(0), exe, arg, ns0, staging, port(1, 80)), "port rule without a ruleset"},
		{"port of 12 bytes", frame(ll...).with(rec(hoPort, make([]byte, 12))), "port record of the wrong size"},
		{"port access 0", frame(ll...).with(port(0, 80)), "port access not handled"},
		{"port access not handled", frame(ll...).with(port(4, 80)), "port access not handled"},
		{"port before rule", frame(ll...).with(port(1, 80), rule(1, 0, "/w")), "out of order"},
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
	f.Add([]byte(frame(rec(hoFlags, u32(hoFEnforce|hoFIdentity)), rec(hoIdentity, make([]byte, 8)), rec(hoExe, []byte("/x")), rec(hoArg, nil), rec(hoNS, u32(0)), rec(hoStaging, []byte("/s")))))
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

// TestMain removes the exec stage execStageBin built, once the package's
// tests are done (it is built once for all of them).
func TestMain(m *testing.M) {
	code := m.Run()
	if b := execStageBuild.bin; b != "" {
		os.RemoveAll(filepath.Dir(b))
	}
	os.Exit(code)
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

// runInit runs the C init as pid 1 of new mount, pid, ipc and uts
// namespaces (as the launcher clones it) on in (then the go byte, when
// goAhead) and returns its status lines and exit code.
func runInit(t *testing.T, in []byte, goAhead bool) ([]*Status, int) {
	t.Helper()
	testenv.RequireRoot(t)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(execStageBin(t), InitArg)
	cmd.Args[0] = InitName
	cmd.ExtraFiles = []*os.File{inR, stW}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
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

// TestInit runs the real C init on plans: it builds the root, the ruleset
// and the stage, and runs the server only with the launcher's go-ahead; a
// malformed plan, a path swapped for a symlink or a failed step is
// reported with its step and path, and nothing is exec'd.
func TestInit(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran")
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const readExec = 1 | 4 | 8 // execute, read_file, read_dir
	plan := func(mut func(h *handover)) []byte {
		staging, err := os.MkdirTemp(dir, "root-")
		if err != nil {
			t.Fatal(err)
		}
		h := &handover{
			enforce: true, dropCaps: true, landlock: true,
			exe: "/bin/sh", argv: []string{"sh", "-c", "echo ran > ran"}, dir: dir,
			ns: hoNSNet, hostname: "mcpwarden", handled: [3]uint64{1<<16 - 1, 0, 0},
			staging: staging,
			mounts:  []planMount{{hoMDir | hoMExec, "/usr"}, {hoMDir | hoMWrite, dir}},
			links:   []Link{{Path: "/bin", Target: "usr/bin"}, {Path: "/lib", Target: "usr/lib"}, {Path: "/lib64", Target: "usr/lib64"}},
			tmp:     &planTmp{size: 1 << 20, path: staging}, // as the launcher's: the run's temp dir
			rules:   []planRule{{access: readExec, path: "/usr"}, {access: 1<<16 - 1, path: dir}, {access: 8, flags: hoRSelf}},
		}
		if mut != nil {
			mut(h)
		}
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
		{"runs", plan(nil), true, []Stage{StageReady, StageStarted, StageExit}, 0, true, ""},
		{"refused by the launcher", plan(nil), false, []Stage{StageReady}, 0, false, ""},
		{"garbage", []byte("{\"exe\":\"/bin/sh\"}\n"), true, []Stage{StageSpec}, 127, false, ""},
		{"truncated", plan(nil)[:40], true, []Stage{StageSpec}, 127, false, ""},
		{"a mount swapped for a symlink", plan(func(h *handover) { h.mounts = append(h.mounts, planMount{hoMDir, link}) }), true, []Stage{StageRoot}, 127, false, link},
		{"a mount no longer a directory", plan(func(h *handover) { h.mounts = append(h.mounts, planMount{hoMDir, file}) }), true, []Stage{StageRoot}, 127, false, file},
		{"a rule swapped for a symlink", plan(func(h *handover) { h.rules = append(h.rules, planRule{access: 1, path: link}) }), true, []Stage{StageLandlock}, 127, false, link},
		{"a rule on a missing path", plan(func(h *handover) { h.rules = append(h.rules, planRule{access: 1, path: weird}) }), true, []Stage{StageLandlock}, 127, false, weird},
		{"no such executable", plan(func(h *handover) { h.exe = weird }), true, []Stage{StageReady, StageExec}, 127, false, weird},
		{"the fence denies the executable", plan(func(h *handover) { h.rules = h.rules[1:] }), true, []Stage{StageReady, StageExec}, 127, false, "/bin/sh"},
		{"a seccomp program the kernel refuses", plan(func(h *handover) { h.filter = []unix.SockFilter{{Code: 0xffff}} }), true, []Stage{StageReady, StageSeccomp}, 127, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(marker)
			sts, code := runInit(t, tt.in, tt.goAhead)
			var stages []Stage
			for _, st := range sts {
				stages = append(stages, st.Stage)
			}
			if fmt.Sprint(stages) != fmt.Sprint(tt.stages) || code != tt.code {
				t.Fatalf("statuses %v, exit %d; want %v, exit %d (%+v, path %q)", stages, code, tt.stages, tt.code, sts, sts[len(sts)-1].Path)
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

// TestExecStageNotByHand: run by hand, the program says what it is and
// runs nothing.
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
