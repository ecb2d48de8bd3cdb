package sandbox

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The three Landlock system calls, called directly: the helper links no
// Landlock library (go-landlock's syscall package pulls in libcap's psx,
// which wraps pthread_create through cgo). The launcher, which decides the
// ruleset, uses go-landlock.

// rulesetAttr is struct landlock_ruleset_attr up to the scoped field (ABI 6);
// the kernel takes the size we pass.
type rulesetAttr struct {
	handledFS, handledNet, scoped uint64
}

// pathBeneathAttr is struct landlock_path_beneath_attr, which the kernel
// declares packed: 12 bytes.
type pathBeneathAttr struct {
	allowed  uint64
	parentFD int32
}

type netPortAttr struct {
	allowed, port uint64
}

const (
	ruleKindPathBeneath = 1
	ruleKindNetPort     = 2
)

func landlockCreateRuleset(attr *rulesetAttr) (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr), 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

func landlockAddPathRule(ruleset int, attr *pathBeneathAttr) error {
	_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), ruleKindPathBeneath, uintptr(unsafe.Pointer(attr)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func landlockAddPortRule(ruleset int, attr *netPortAttr) error {
	_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), ruleKindNetPort, uintptr(unsafe.Pointer(attr)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func landlockRestrictSelf(ruleset int, flags uint32) error {
	_, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), uintptr(flags), 0)
	if e != 0 {
		return e
	}
	return nil
}
