package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// The handover is what the run's init gives the exec stage (the C program
// mcpwarden-exec, launcher/sandbox/execstage) on its fd 3: a compact,
// versioned binary form that a small C reader checks whole before it
// applies anything. The layout is in execstage/handover.h; the constants
// here must match it (TestHandoverMatchesC runs the C reader on what
// encodeHandover writes).
//
//	header:  "MWXS"  u16 version  u16 0  u32 body length
//	body:    records in increasing tag order: u16 tag, u32 length, bytes
//
// Integers are little-endian; only hoArg and hoEnv repeat.
const (
	hoMagic      = "MWXS"
	hoVersion    = 1
	hoHeaderSize = 12
	hoMaxBody    = 4 << 20
	hoMaxFilter  = 4096
)

const (
	hoFlags    = 1
	hoIdentity = 2
	hoFSize    = 3
	hoLandlock = 4
	hoSeccomp  = 5
	hoDir      = 6
	hoExe      = 7
	hoArg      = 8
	hoEnv      = 9
)

const (
	hoFEnforce  = 1 << 0
	hoFDropCaps = 1 << 1
	hoFLandlock = 1 << 2
	hoFSeccomp  = 1 << 3
	hoFIdentity = 1 << 4
	hoFFSize    = 1 << 5
)

// Descriptors of the exec stage.
const (
	stageInFD      = 3 // the handover, then GoByte
	stageStatusFD  = 4 // status lines, as the Go helper writes them
	stageRulesetFD = 5 // the prepared Landlock ruleset
)

// ExecStageName is the exec stage's file name; the launcher finds it next
// to the fence helper and passes it to the helper opened, on ExecStageFD.
const ExecStageName = "mcpwarden-exec"

// ExecStageFD is where the launcher passes the exec stage's executable
// (opened read-only) to the helper.
const ExecStageFD = 5

// handover is what the exec stage applies; the init fills it from the
// Spec and what it prepared.
type handover struct {
	enforce, dropCaps bool
	identity          *Identity
	fileSize          uint64
	landlock          bool
	restrictFlags     uint32
	filter            []unix.SockFilter
	dir, exe          string
	argv, env         []string
}

// flags are the handover's flags record: which parts of the fence the
// stage applies (none but the working directory without enforce).
func (h *handover) flags() uint32 {
	if !h.enforce {
		return 0
	}
	flags := uint32(hoFEnforce)
	if h.dropCaps {
		flags |= hoFDropCaps
	}
	if h.landlock {
		flags |= hoFLandlock
	}
	if len(h.filter) > 0 {
		flags |= hoFSeccomp
	}
	if h.identity != nil {
		flags |= hoFIdentity
	}
	if h.fileSize > 0 {
		flags |= hoFFSize
	}
	return flags
}

// encodeHandover writes h in the exec stage's form. It refuses what the
// stage would refuse, so that a bad spec fails in the init, with a
// message, rather than in the stage.
func encodeHandover(h *handover) ([]byte, error) {
	flags := h.flags()
	b := make([]byte, hoHeaderSize, 512)
	copy(b, hoMagic)
	binary.LittleEndian.PutUint16(b[4:], hoVersion)
	rec := func(tag uint16, v []byte) {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	str := func(tag uint16, what, s string) error {
		if strings.IndexByte(s, 0) >= 0 {
			return fmt.Errorf("the server's %s holds a NUL byte", what)
		}
		rec(tag, []byte(s))
		return nil
	}
	rec(hoFlags, binary.LittleEndian.AppendUint32(nil, flags))
	if flags&hoFIdentity != 0 {
		id := *h.identity
		if id.UID < 0 || id.GID < 0 || id.UID >= 1<<32-1 || id.GID >= 1<<32-1 {
			return nil, fmt.Errorf("identity %d:%d out of range", id.UID, id.GID)
		}
		v := binary.LittleEndian.AppendUint32(nil, uint32(id.UID))
		rec(hoIdentity, binary.LittleEndian.AppendUint32(v, uint32(id.GID)))
	}
	if flags&hoFFSize != 0 {
		rec(hoFSize, binary.LittleEndian.AppendUint64(nil, h.fileSize))
	}
	if flags&hoFLandlock != 0 {
		rec(hoLandlock, binary.LittleEndian.AppendUint32(nil, h.restrictFlags))
	}
	if flags&hoFSeccomp != 0 {
		if len(h.filter) > hoMaxFilter {
			return nil, fmt.Errorf("seccomp program of %d instructions (at most %d)", len(h.filter), hoMaxFilter)
		}
		v := make([]byte, 0, 8*len(h.filter))
		for _, in := range h.filter {
			v = binary.LittleEndian.AppendUint16(v, in.Code)
			v = append(v, in.Jt, in.Jf)
			v = binary.LittleEndian.AppendUint32(v, in.K)
		}
		rec(hoSeccomp, v)
	}
	if h.dir != "" {
		if h.dir[0] != '/' {
			return nil, fmt.Errorf("working directory %q is not absolute", h.dir)
		}
		if err := str(hoDir, "working directory", h.dir); err != nil {
			return nil, err
		}
	}
	if h.exe == "" || len(h.argv) == 0 {
		return nil, errors.New("spec names no executable")
	}
	if len(h.argv) > 1<<16 || len(h.env) > 1<<16 {
		return nil, errors.New("too many arguments or environment strings")
	}
	if err := str(hoExe, "executable", h.exe); err != nil {
		return nil, err
	}
	for _, a := range h.argv {
		if err := str(hoArg, "argument", a); err != nil {
			return nil, err
		}
	}
	for _, e := range h.env {
		if err := str(hoEnv, "environment", e); err != nil {
			return nil, err
		}
	}
	if len(b)-hoHeaderSize > hoMaxBody {
		return nil, errors.New("the server's command and environment are too large")
	}
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)-hoHeaderSize))
	return b, nil
}
