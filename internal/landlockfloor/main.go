// Command landlockfloor is the benchmark floor for the launcher's fence: the
// smallest program that applies a given Landlock ruleset with the raw
// syscalls (landlock_create_ruleset, landlock_add_rule,
// landlock_restrict_self) and no_new_privs, and nothing else — no seccomp,
// no capability changes — then execs a program.
//
//	landlockfloor -fs HANDLED_HEX [-rule ACCESS_HEX:PATH]... [-seccomp] -- PROG ARGS...
//
// With -seccomp it also installs the launcher's seccomp filter, so that a
// benchmark can tell the filter's share of the fence's cost from Landlock's.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mcpwarden/mcpwarden/launcher/sandbox/seccomp"
)

type rules []string

func (r *rules) String() string     { return strings.Join(*r, " ") }
func (r *rules) Set(v string) error { *r = append(*r, v); return nil }

type rulesetAttr struct{ fs, net, scoped uint64 }

type pathBeneath struct {
	access uint64
	fd     int32
}

func main() {
	handled := flag.String("fs", "", "handled filesystem rights (hex)")
	var rs rules
	flag.Var(&rs, "rule", "ACCESS_HEX:PATH")
	withSeccomp := flag.Bool("seccomp", false, "also install the launcher's seccomp filter")
	restrictFlags := flag.Uint("flags", 0, "landlock_restrict_self flags (2 = log denials after exec)")
	netHandled := flag.Uint64("net", 0, "handled network rights")
	scoped := flag.Uint64("scoped", 0, "handled scopes")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: landlockfloor -fs HEX [-rule HEX:PATH]... -- PROG ARGS")
		os.Exit(64)
	}
	runtime.LockOSThread()
	fs, err := strconv.ParseUint(*handled, 16, 64)
	check(err)
	attr := rulesetAttr{fs: fs, net: *netHandled, scoped: *scoped}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	checkErrno(e)
	for _, r := range rs {
		hex, path, _ := strings.Cut(r, ":")
		access, err := strconv.ParseUint(hex, 16, 64)
		check(err)
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		check(err)
		pb := pathBeneath{access: access, fd: int32(pfd)}
		_, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, 1, uintptr(unsafe.Pointer(&pb)), 0, 0, 0)
		checkErrno(e)
		unix.Close(pfd)
	}
	check(unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
	_, _, e = unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, uintptr(*restrictFlags), 0)
	checkErrno(e)
	if *withSeccomp {
		filter, err := seccomp.Build(seccomp.Native, seccomp.Options{})
		check(err)
		prog := unix.SockFprog{Len: uint16(len(filter.Program)), Filter: &filter.Program[0]}
		check(unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0))
	}
	check(syscall.Exec(flag.Arg(0), flag.Args(), []string{"PATH=/usr/bin:/bin"}))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "landlockfloor:", err)
		os.Exit(1)
	}
}

func checkErrno(e syscall.Errno) {
	if e != 0 {
		check(e)
	}
}
