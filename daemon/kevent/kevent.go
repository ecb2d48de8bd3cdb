// Package kevent decodes the records the eBPF probes (bpf/watch.bpf.c) put on
// the ring buffer into Go values, and rebuilds the paths they carry. It is
// pure Go: every function here runs without a kernel.
package kevent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"

	"golang.org/x/sys/unix"
)

// Op is the probes' own operation number (enum op in bpf/event.h).
type Op uint32

// Operations; keep in step with enum op in bpf/event.h.
const (
	OpOpen           Op = 1
	OpOpenat         Op = 2
	OpOpenat2        Op = 3
	OpCreat          Op = 4
	OpRename         Op = 5
	OpRenameat       Op = 6
	OpRenameat2      Op = 7
	OpUnlink         Op = 8
	OpUnlinkat       Op = 9
	OpRmdir          Op = 10
	OpMkdir          Op = 11
	OpMkdirat        Op = 12
	OpTruncate       Op = 13
	OpLink           Op = 14
	OpLinkat         Op = 15
	OpSymlink        Op = 16
	OpSymlinkat      Op = 17
	OpIOUringSetup   Op = 18
	OpOpenByHandleAt Op = 19
	OpFork           Op = 64
	OpExec           Op = 65
	OpExit           Op = 66
)

var opNames = map[Op]string{
	OpOpen: "open", OpOpenat: "openat", OpOpenat2: "openat2", OpCreat: "creat",
	OpRename: "rename", OpRenameat: "renameat", OpRenameat2: "renameat2",
	OpUnlink: "unlink", OpUnlinkat: "unlinkat", OpRmdir: "rmdir",
	OpMkdir: "mkdir", OpMkdirat: "mkdirat", OpTruncate: "truncate",
	OpLink: "link", OpLinkat: "linkat", OpSymlink: "symlink", OpSymlinkat: "symlinkat",
	OpIOUringSetup: "io_uring_setup", OpOpenByHandleAt: "open_by_handle_at", OpFork: "fork", OpExec: "exec", OpExit: "exit",
}

// String returns the syscall (or process event) name.
func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("op%d", uint32(o))
}

// IsOpen reports whether the operation returns a descriptor for its path.
func (o Op) IsOpen() bool {
	return o == OpOpen || o == OpOpenat || o == OpOpenat2 || o == OpCreat || o == OpOpenByHandleAt
}

// IsProcess reports whether the record is a process-tree event.
func (o Op) IsProcess() bool { return o == OpFork || o == OpExec || o == OpExit }

// Event flags (enum event_flag in bpf/event.h).
const (
	FlagFDResolved = 1 << 0
	FlagTruncated  = 1 << 1
	FlagFault      = 1 << 2
	FlagNoDir      = 1 << 3
)

// Header layout of struct event in bpf/event.h; layout_test.go checks it
// against the bpf2go-generated type.
const (
	offKtime    = 0
	offTGID     = 8
	offPID      = 12
	offSlot     = 16
	offOp       = 20
	offRet      = 24
	offFlags    = 32
	offEvFlags  = 40
	offFieldLen = 44
	offComm     = 52
	commLen     = 16
	offNSTGID   = 68
	offNSPID    = 72
	numFields   = 4
	// HeaderSize is sizeof(struct event).
	HeaderSize = 80
)

// Record is one decoded probe record.
type Record struct {
	KtimeNS uint64 // CLOCK_MONOTONIC
	TGID    uint32
	PID     uint32
	Slot    uint32
	Op      Op
	Ret     int64
	Flags   uint64
	EvFlags uint32
	Comm    string
	// NSTGID and NSPID are the process's and the thread's ids in their own
	// (innermost) pid namespace, what their /proc calls them; equal to
	// TGID and PID outside a pid namespace.
	NSTGID, NSPID uint32
	// Path1 and Path2 are absolute, lexically clean paths; empty when the
	// operation has none. Path1OK/Path2OK are false when the probes could not
	// read the whole path (truncated, faulted, unknown directory).
	Path1, Path2     string
	Path1OK, Path2OK bool
}

// ErrShort is returned for a record shorter than its header or its fields.
var ErrShort = errors.New("kevent: record too short")

// Decode parses one ring buffer record into r.
func Decode(raw []byte, r *Record) error {
	if len(raw) < HeaderSize {
		return fmt.Errorf("%w: %d bytes, header is %d", ErrShort, len(raw), HeaderSize)
	}
	le := binary.LittleEndian
	*r = Record{
		KtimeNS: le.Uint64(raw[offKtime:]),
		TGID:    le.Uint32(raw[offTGID:]),
		PID:     le.Uint32(raw[offPID:]),
		Slot:    le.Uint32(raw[offSlot:]),
		Op:      Op(le.Uint32(raw[offOp:])),
		Ret:     int64(le.Uint64(raw[offRet:])),
		Flags:   le.Uint64(raw[offFlags:]),
		EvFlags: le.Uint32(raw[offEvFlags:]),
		Comm:    Comm(raw[offComm : offComm+commLen]),
		NSTGID:  le.Uint32(raw[offNSTGID:]),
		NSPID:   le.Uint32(raw[offNSPID:]),
	}
	var fields [numFields][]byte
	data := raw[HeaderSize:]
	for i := range numFields {
		n := int(le.Uint16(raw[offFieldLen+2*i:]))
		if n > len(data) {
			return fmt.Errorf("%w: field %d wants %d bytes, %d left", ErrShort, i, n, len(data))
		}
		fields[i], data = data[:n], data[n:]
	}
	if r.Op.IsProcess() || r.Op == OpIOUringSetup {
		return nil
	}
	damaged := r.EvFlags&(FlagTruncated|FlagFault) != 0
	if r.EvFlags&FlagFDResolved != 0 {
		r.Path1 = WalkPath(fields[1])
		r.Path1OK = !damaged
		return nil
	}
	r.Path1, r.Path1OK = resolve(fields[0], fields[1], r.EvFlags)
	if len(fields[2]) > 0 {
		r.Path2, r.Path2OK = resolve(fields[2], fields[3], r.EvFlags)
	}
	if damaged {
		r.Path1OK, r.Path2OK = false, false
	}
	return nil
}

// resolve joins a requested path to the walked directory it is relative to.
func resolve(req, dir []byte, evFlags uint32) (string, bool) {
	p := cString(req)
	if p == "" {
		return "", false
	}
	if strings.HasPrefix(p, "/") {
		return path.Clean(p), true
	}
	if evFlags&FlagNoDir != 0 {
		return path.Clean("/" + p), false
	}
	return path.Join(WalkPath(dir), p), true
}

// WalkPath rebuilds an absolute path from the probes' dentry walk: names
// from the leaf up, each NUL-terminated.
func WalkPath(b []byte) string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return "/"
	}
	out := make([]byte, 0, len(b)+1)
	for end := len(b); end >= 0; {
		start := bytes.LastIndexByte(b[:end], 0) + 1
		out = append(out, '/')
		out = append(out, b[start:end]...)
		end = start - 1
	}
	return string(out)
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Comm returns a task's comm as printable text: the process chooses its own
// comm, so control characters are replaced before it goes anywhere.
func Comm(b []byte) string {
	s := cString(b)
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
}

// ExecFile is the device and inode of the executable an OpExec record's
// process now runs, the device in user space's encoding (stat's st_dev).
func (r *Record) ExecFile() (dev, ino uint64) {
	kdev := r.Flags // the kernel's dev_t: MAJOR << 20 | MINOR
	return unix.Mkdev(uint32(kdev>>20), uint32(kdev&(1<<20-1))), uint64(r.Ret)
}

// Access is what an operation does to its path.
type Access string

const (
	AccessRead   Access = "read"
	AccessWrite  Access = "write"
	AccessCreate Access = "create"
)

// Linux open flags (asm-generic/fcntl.h, same on x86 and arm64).
const (
	oAccMode = 0o3
	oCreat   = 0o100
	oTrunc   = 0o1000
	oTmpfile = 0o20000000
)

// Access1 says what the operation does to Path1.
func (r *Record) Access1() Access {
	switch r.Op {
	case OpOpen, OpOpenat, OpOpenat2, OpOpenByHandleAt:
		switch {
		case r.Flags&oCreat != 0 || r.Flags&oTmpfile == oTmpfile:
			return AccessCreate
		case r.Flags&oAccMode != 0 || r.Flags&oTrunc != 0:
			return AccessWrite
		}
		return AccessRead
	case OpCreat, OpMkdir, OpMkdirat, OpSymlink, OpSymlinkat:
		return AccessCreate
	case OpLink, OpLinkat:
		return AccessRead // the existing file gains a name; the new name is Path2
	}
	return AccessWrite // rename source, unlink, rmdir, truncate
}

// Access2 says what the operation does to Path2 (rename and link targets).
func (r *Record) Access2() Access { return AccessCreate }
