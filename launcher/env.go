package launcher

import (
	"errors"
	"fmt"
	"strings"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// defaultPATH is used when the launcher itself has no PATH.
const defaultPATH = "/usr/local/bin:/usr/bin:/bin"

// passedVars are copied from the launcher's environment when set: what a
// runtime needs to pick a locale and a time zone. Nothing else crosses
// (no NODE_OPTIONS, LD_PRELOAD, tokens or proxies) unless the operator names
// it with --env.
var passedVars = []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ"}

// serverEnv builds the server's environment. HOME and TMPDIR are added per
// run (both the private temp dir). extra holds --env values.
func serverEnv(extra []string, getenv func(string) string) ([]string, error) {
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, k := range passedVars {
		if v := getenv(k); v != "" {
			set(k, v)
		}
	}
	if vals["PATH"] == "" {
		set("PATH", defaultPATH)
	}
	for _, e := range extra {
		name, value, hasValue := strings.Cut(e, "=")
		if name == "" || strings.ContainsAny(name, "\x00 ") {
			return nil, fmt.Errorf("--env %q: want NAME or NAME=VALUE", e)
		}
		switch name {
		case "HOME", "TMPDIR", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT":
			return nil, fmt.Errorf("--env %s: the launcher sets or forbids this variable", name)
		}
		if strings.ContainsRune(value, 0) {
			return nil, errors.New("--env value contains a NUL byte")
		}
		if !hasValue {
			value = getenv(name)
		}
		set(name, value)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

func envValue(env []string, name string) string {
	for _, e := range env {
		if k, v, ok := strings.Cut(e, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// KernelABI is the running kernel's Landlock ABI, 0 without Landlock. Like
// go-landlock it reports ABI 6+ as 5 when the kernel lacks the fix for the
// signal-scoping erratum.
func KernelABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	if v >= 6 {
		errata, err := ll.LandlockGetErrata()
		if err != nil || errata&0x2 == 0 {
			v = 5
		}
	}
	return v
}
