package kevent

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"unsafe"

	"github.com/mcpwarden/mcpwarden/bpf"
)

// TestLayoutMatchesC checks the offsets this package decodes at against the
// Go type bpf2go generated from the C struct's BTF.
func TestLayoutMatchesC(t *testing.T) {
	var e bpf.WatchEvent
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"ktime_ns", unsafe.Offsetof(e.KtimeNs), offKtime},
		{"tgid", unsafe.Offsetof(e.Tgid), offTGID},
		{"pid", unsafe.Offsetof(e.Pid), offPID},
		{"slot", unsafe.Offsetof(e.Slot), offSlot},
		{"op", unsafe.Offsetof(e.Op), offOp},
		{"ret", unsafe.Offsetof(e.Ret), offRet},
		{"flags", unsafe.Offsetof(e.Flags), offFlags},
		{"ev_flags", unsafe.Offsetof(e.EvFlags), offEvFlags},
		{"field_len", unsafe.Offsetof(e.FieldLen), offFieldLen},
		{"comm", unsafe.Offsetof(e.Comm), offComm},
		{"ns_tgid", unsafe.Offsetof(e.NsTgid), offNSTGID},
		{"ns_pid", unsafe.Offsetof(e.NsPid), offNSPID},
		{"sizeof", unsafe.Sizeof(e), HeaderSize},
		{"fields", uintptr(len(e.FieldLen)), numFields},
		{"comm len", uintptr(len(e.Comm)), commLen},
	} {
		if c.got != c.want {
			t.Errorf("%s: C layout %d, decoder uses %d: update kevent.go after changing bpf/event.h", c.name, c.got, c.want)
		}
	}
}

// build makes a raw record the way the probes do.
func build(op Op, ret int64, flags uint64, evFlags uint32, comm string, fields ...[]byte) []byte {
	raw := make([]byte, HeaderSize)
	le := binary.LittleEndian
	le.PutUint64(raw[offKtime:], 123)
	le.PutUint32(raw[offTGID:], 10)
	le.PutUint32(raw[offPID:], 11)
	le.PutUint32(raw[offSlot:], 3)
	le.PutUint32(raw[offOp:], uint32(op))
	le.PutUint64(raw[offRet:], uint64(ret))
	le.PutUint64(raw[offFlags:], flags)
	le.PutUint32(raw[offEvFlags:], evFlags)
	copy(raw[offComm:offComm+commLen], comm)
	for i, f := range fields {
		le.PutUint16(raw[offFieldLen+2*i:], uint16(len(f)))
		raw = append(raw, f...)
	}
	return raw
}

func walk(names ...string) []byte { // leaf first, as the probes write it
	var b []byte
	for _, n := range names {
		b = append(append(b, n...), 0)
	}
	return b
}

func cstr(s string) []byte { return append([]byte(s), 0) }

func TestDecode(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
		want Record
	}{
		{"open resolved from fd", build(OpOpenat, 5, 0, FlagFDResolved, "node", nil, walk("hostname", "etc")),
			Record{Op: OpOpenat, Ret: 5, EvFlags: FlagFDResolved, Comm: "node", Path1: "/etc/hostname", Path1OK: true}},
		{"fd walk of the root", build(OpOpenat, 5, 0, FlagFDResolved, "x", nil, nil),
			Record{Op: OpOpenat, Ret: 5, EvFlags: FlagFDResolved, Comm: "x", Path1: "/", Path1OK: true}},
		{"failed absolute", build(OpOpenat, -13, 0, 0, "node", cstr("/etc/../etc/shadow")),
			Record{Op: OpOpenat, Ret: -13, Comm: "node", Path1: "/etc/shadow", Path1OK: true}},
		{"failed relative to cwd", build(OpOpen, -2, 0, 0, "sh", cstr("../x/y"), walk("ws", "base", "tmp")),
			Record{Op: OpOpen, Ret: -2, Comm: "sh", Path1: "/tmp/base/x/y", Path1OK: true}},
		{"relative with unknown dir", build(OpOpenat, -2, 0, FlagNoDir, "sh", cstr("a")),
			Record{Op: OpOpenat, Ret: -2, EvFlags: FlagNoDir, Comm: "sh", Path1: "/a", Path1OK: false}},
		{"truncated walk is not ok", build(OpOpenat, 3, 0, FlagFDResolved|FlagTruncated, "n", nil, walk("deep", "x")),
			Record{Op: OpOpenat, Ret: 3, EvFlags: FlagFDResolved | FlagTruncated, Comm: "n", Path1: "/x/deep", Path1OK: false}},
		{"rename two paths", build(OpRenameat2, 0, 1, 0, "mv", cstr("a"), walk("ws"), cstr("/out/b")),
			Record{Op: OpRenameat2, Flags: 1, Comm: "mv", Path1: "/ws/a", Path1OK: true, Path2: "/out/b", Path2OK: true}},
		{"fault", build(OpUnlink, -14, 0, FlagFault, "rm"),
			Record{Op: OpUnlink, Ret: -14, EvFlags: FlagFault, Comm: "rm"}},
		{"fork", build(OpFork, 99, 0, 0, "bash"), Record{Op: OpFork, Ret: 99, Comm: "bash"}},
		{"comm control chars", build(OpExec, 0, 0, 0, "a\x1bb\n"), Record{Op: OpExec, Comm: "a?b?"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Record
			if err := Decode(tc.raw, &r); err != nil {
				t.Fatal(err)
			}
			tc.want.KtimeNS, tc.want.TGID, tc.want.PID, tc.want.Slot = 123, 10, 11, 3
			if !reflect.DeepEqual(r, tc.want) {
				t.Errorf("got  %+v\nwant %+v", r, tc.want)
			}
		})
	}
}

func TestDecodeShort(t *testing.T) {
	if err := Decode(make([]byte, HeaderSize-1), &Record{}); !errors.Is(err, ErrShort) {
		t.Errorf("short header: %v", err)
	}
	raw := build(OpOpenat, -2, 0, 0, "x", cstr("/etc/passwd"))
	if err := Decode(raw[:len(raw)-1], &Record{}); !errors.Is(err, ErrShort) {
		t.Errorf("short field: %v", err)
	}
}

func TestAccess(t *testing.T) {
	for _, c := range []struct {
		op    Op
		flags uint64
		want  Access
	}{
		{OpOpenat, 0, AccessRead},
		{OpOpenat, 0o2000000, AccessRead}, // O_CLOEXEC
		{OpOpenat, 1, AccessWrite},
		{OpOpenat, 2, AccessWrite},
		{OpOpenat, oTrunc, AccessWrite},
		{OpOpenat, oCreat | 1, AccessCreate},
		{OpOpenat2, oTmpfile | 2, AccessCreate},
		{OpCreat, 0, AccessCreate},
		{OpMkdirat, 0, AccessCreate},
		{OpUnlinkat, 0, AccessWrite},
		{OpRename, 0, AccessWrite},
		{OpTruncate, 0, AccessWrite},
		{OpLink, 0, AccessRead},
	} {
		r := Record{Op: c.op, Flags: c.flags}
		if got := r.Access1(); got != c.want {
			t.Errorf("%s flags %#o: %s, want %s", c.op, c.flags, got, c.want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(build(OpOpenat, 5, 0, FlagFDResolved, "node", nil, walk("hostname", "etc")))
	f.Add(build(OpRenameat2, 0, 1, 0, "mv", cstr("a"), walk("ws"), cstr("/out/b"), walk("x")))
	f.Add(build(OpOpen, -2, 0, 0, "sh", cstr("../x/y"), walk("ws", "base", "tmp")))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var r Record
		if err := Decode(raw, &r); err != nil {
			return
		}
		for _, p := range []string{r.Path1, r.Path2} {
			if p != "" && p[0] != '/' {
				t.Fatalf("relative path %q decoded", p)
			}
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	raw := build(OpOpenat, 5, 0, FlagFDResolved, "node", nil, walk("index.js", "dist", "server-filesystem", "@modelcontextprotocol", "node_modules", "app", "srv"))
	b.ReportAllocs()
	var r Record
	for b.Loop() {
		if err := Decode(raw, &r); err != nil {
			b.Fatal(err)
		}
	}
}
