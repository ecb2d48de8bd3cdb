package runtimeprofile

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNotInstalled says a package launcher (npx, uvx) was asked for a
// package that is not installed: the fence would deny its download.
var ErrNotInstalled = errors.New("package not installed")

// isPackageLauncher reports whether argv0 names npx or uv, which need not
// be installed themselves when the package they would run is.
func isPackageLauncher(argv0 string) bool {
	switch filepath.Base(argv0) {
	case "npx", "uvx", "uv":
		return true
	}
	return false
}

// launcherPackage recognises package launchers that fetch their package at
// start-up (npx, uvx / uv tool run) and returns the command line of the
// installed package they would run, or nil for any other program. Under
// the fence npx cannot reach the registry or write its cache (it hangs and
// then fails), so the launcher runs what npx would have run; a package that
// is not installed is refused at once with how to install it.
func (b *builder) launcherPackage(argv []string, exe string) ([]string, string, error) {
	name := filepath.Base(argv[0])
	switch {
	case name == "npx" || filepath.Base(exe) == "npx-cli.js":
		out, err := b.npx(argv[1:])
		return out, KindNPX, err
	case name == "uvx":
		out, err := b.uvTool(argv[1:])
		return out, KindUV, err
	case name == "uv" && len(argv) > 2 && argv[1] == "tool" && argv[2] == "run":
		out, err := b.uvTool(argv[3:])
		return out, KindUV, err
	}
	return nil, "", nil
}

// npxArgs is an npx command line: the packages to provide, the command to
// run and its arguments.
type npxArgs struct {
	packages []string // -p/--package values, or the command's package
	command  string   // bin name; "" = the package's own bin
	args     []string
}

// parseNPX splits npx's own options from the command. Options npx takes
// with a value are skipped with it; anything after the command belongs to
// the command.
func parseNPX(args []string) (npxArgs, error) {
	var out npxArgs
	withValue := map[string]bool{"--cache": true, "--userconfig": true, "--registry": true, "-c": true, "--call": true, "--prefix": true, "-w": true, "--workspace": true, "--loglevel": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 >= len(args) {
				return out, errors.New("npx: no command after '--'")
			}
			return out.withCommand(args[i+1], args[i+2:]), nil
		case a == "-p" || a == "--package":
			if i+1 >= len(args) {
				return out, fmt.Errorf("npx %s: missing package", a)
			}
			out.packages = append(out.packages, args[i+1])
			i++
		case strings.HasPrefix(a, "--package="):
			out.packages = append(out.packages, strings.TrimPrefix(a, "--package="))
		case a == "-c" || a == "--call" || strings.HasPrefix(a, "--call="):
			return out, errors.New("npx -c/--call runs a shell command line; give the server's own command instead")
		case withValue[a]:
			i++
		case strings.HasPrefix(a, "-"):
			// -y, --yes, --no-install, -q, --prefer-offline, --foo=bar ...
		default:
			return out.withCommand(a, args[i+1:]), nil
		}
	}
	return out, errors.New("npx: no package or command given")
}

func (n npxArgs) withCommand(cmd string, args []string) npxArgs {
	if len(args) > 0 {
		n.args = args
	}
	if len(n.packages) == 0 {
		n.packages = []string{cmd}
		n.command = ""
	} else {
		n.command = cmd
	}
	return n
}

// packageName strips the version from an npm spec: "@s/p@1.2" → "@s/p".
func packageName(spec string) string {
	at := strings.LastIndexByte(spec, '@')
	if at > 0 {
		return spec[:at]
	}
	return spec
}

// npxCacheKey is the directory name npm exec gives a set of package specs
// in its npx cache: the first 16 hex digits of the SHA-512 of the sorted
// specs joined by newlines (libnpmexec).
func npxCacheKey(specs []string) string {
	s := slices.Clone(specs)
	slices.SortFunc(s, collate)
	sum := sha512.Sum512([]byte(strings.Join(s, "\n")))
	return hex.EncodeToString(sum[:])[:16]
}

// collationOrder is the order of CLDR's root collation (what JavaScript's
// localeCompare(b, 'en') uses, and npm sorts the specs with) for the
// characters of package specs: punctuation and symbols, then digits, then
// letters. Characters not listed sort after them, by code point.
const collationOrder = "_-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$0123456789abcdefghijklmnopqrstuvwxyz"

// collate compares two specs like localeCompare(b, 'en') does for the
// characters npm package specs are made of.
func collate(a, b string) int {
	rank := func(c byte) int {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if i := strings.IndexByte(collationOrder, c); i >= 0 {
			return i
		}
		return len(collationOrder) + int(c)
	}
	for i := 0; i < len(a) && i < len(b); i++ {
		if ra, rb := rank(a[i]), rank(b[i]); ra != rb {
			return ra - rb
		}
	}
	return len(a) - len(b)
}

// validPackageName accepts what npm accepts as a package name (lower-case,
// at most one scope, no path tricks).
func validPackageName(name string) bool {
	if name == "" || len(name) > 214 || strings.Contains(name, "..") || strings.HasPrefix(name, ".") {
		return false
	}
	parts := strings.Split(name, "/")
	if len(parts) > 2 || len(parts) == 2 && !strings.HasPrefix(parts[0], "@") || len(parts) == 1 && strings.HasPrefix(name, "@") {
		return false
	}
	for _, p := range parts {
		p = strings.TrimPrefix(p, "@")
		if p == "" {
			return false
		}
		for _, c := range p {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
				return false
			}
		}
	}
	return true
}

// npx finds the installed package npx would run: in the working
// directory's node_modules, the global prefix, or npm's npx cache.
func (b *builder) npx(args []string) ([]string, error) {
	n, err := parseNPX(args)
	if err != nil {
		return nil, err
	}
	for _, spec := range n.packages {
		if !validPackageName(packageName(spec)) {
			return nil, fmt.Errorf("npx %s: only registry packages (name or name@version) can run under the fence", spec)
		}
	}
	pkg := packageName(n.packages[0])
	cache := b.opt.Getenv("npm_config_cache")
	if cache == "" {
		cache = b.opt.Getenv("NPM_CONFIG_CACHE")
	}
	if cache == "" && b.opt.Home != "" {
		cache = filepath.Join(b.opt.Home, ".npm")
	}
	var roots []string // node_modules directories, in npx's order
	roots = append(roots, filepath.Join(b.opt.Dir, "node_modules"))
	if prefix := b.opt.Getenv("npm_config_prefix"); prefix != "" && filepath.IsAbs(prefix) {
		roots = append(roots, filepath.Join(prefix, "lib", "node_modules"))
	}
	roots = append(roots, "/usr/local/lib/node_modules", "/usr/lib/node_modules")
	if cache != "" {
		roots = append(roots, filepath.Join(cache, "_npx", npxCacheKey(n.packages), "node_modules"))
	}
	for _, nm := range roots {
		bin, err := packageBin(nm, pkg, n.command)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("npx %s: %w", n.packages[0], err)
		}
		return append([]string{bin}, n.args...), nil
	}
	where := "the npm cache"
	if cache != "" {
		where = filepath.Join(cache, "_npx")
	}
	return nil, fmt.Errorf("npx %s: %w: %s is not in ./node_modules, the global node_modules or %s, and the fence denies npx's download at start-up. Install it first (npm install -g %s, or run 'npx -y %s' once outside the fence to fill the cache), or point at an installed package's node_modules/.bin/ script", n.packages[0], ErrNotInstalled, pkg, where, n.packages[0], strings.Join(n.packages, " "))
}

// packageBin returns the script of the bin entry cmd ("" = the package's
// own) of package pkg installed under the node_modules directory nm.
func packageBin(nm, pkg, cmd string) (string, error) {
	dir := filepath.Join(nm, pkg)
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		return "", err
	}
	if len(data) > 4<<20 {
		return "", errors.New("package.json larger than 4 MiB")
	}
	var meta struct {
		Name string          `json:"name"`
		Bin  json.RawMessage `json:"bin"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return "", fmt.Errorf("%s/package.json: %w", pkg, err)
	}
	bins := map[string]string{}
	var one string
	if json.Unmarshal(meta.Bin, &one) == nil && one != "" {
		short := pkg[strings.LastIndexByte(pkg, '/')+1:]
		bins[short] = one
	} else if err := json.Unmarshal(meta.Bin, &bins); err != nil || len(bins) == 0 {
		return "", fmt.Errorf("package %s has no bin entry to run", pkg)
	}
	rel, ok := bins[cmd]
	if cmd == "" {
		if len(bins) == 1 {
			for _, v := range bins {
				rel, ok = v, true
			}
		} else {
			rel, ok = bins[pkg[strings.LastIndexByte(pkg, '/')+1:]]
		}
	}
	if !ok {
		names := make([]string, 0, len(bins))
		for k := range bins {
			names = append(names, k)
		}
		slices.Sort(names)
		return "", fmt.Errorf("package %s has no bin %q (it has %s)", pkg, cmd, strings.Join(names, ", "))
	}
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if !within(dir, p) {
		return "", fmt.Errorf("package %s: bin %q leaves the package", pkg, rel)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("package %s: bin %s: %w", pkg, rel, err)
	}
	return p, nil
}

// within reports whether p is dir or lies beneath it, lexically.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// uvTool finds the uv tool environment uvx would run: uv tool install puts
// each tool in its own virtual environment under the tool directory
// (UV_TOOL_DIR, else $XDG_DATA_HOME/uv/tools, else ~/.local/share/uv/tools)
// with its commands in bin/. uvx of a tool that is not installed resolves
// it against the index into uv's cache; the fence denies that, so it is
// refused with how to install the tool.
func (b *builder) uvTool(args []string) ([]string, error) {
	var from, cmd string
	var rest []string
	withValue := map[string]bool{"--with": true, "--python": true, "-p": true, "--index": true, "--index-url": true, "--cache-dir": true, "--directory": true, "--project": true, "--config-file": true, "--env-file": true}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--from":
			if i+1 >= len(args) {
				return nil, errors.New("uvx --from: missing package")
			}
			from = args[i+1]
			i++
		case strings.HasPrefix(a, "--from="):
			from = strings.TrimPrefix(a, "--from=")
		case withValue[a]:
			i++
		case a == "--":
			continue
		case strings.HasPrefix(a, "-"):
		default:
			cmd, rest = a, args[i+1:]
			i = len(args)
		}
	}
	if cmd == "" {
		return nil, errors.New("uvx: no tool given")
	}
	tool := from
	if tool == "" {
		tool = cmd
	}
	// "pkg@1.2", "pkg==1.2", "pkg[extra]" name the tool pkg.
	tool = strings.ToLower(strings.TrimSpace(tool))
	if i := strings.IndexAny(tool, "@=<>~![ "); i > 0 {
		tool = tool[:i]
	}
	if i := strings.IndexAny(cmd, "@=<>~![ "); i > 0 {
		cmd = cmd[:i]
	}
	if !validPackageName(strings.ReplaceAll(tool, "_", "-")) || strings.Contains(tool, "/") || !validPackageName(strings.ToLower(cmd)) || strings.Contains(cmd, "/") {
		return nil, fmt.Errorf("uvx %s: only index packages (name, name@version) can run under the fence", tool)
	}
	dir := b.opt.Getenv("UV_TOOL_DIR")
	if dir == "" {
		if x := b.opt.Getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
			dir = filepath.Join(x, "uv", "tools")
		} else if b.opt.Home != "" {
			dir = filepath.Join(b.opt.Home, ".local", "share", "uv", "tools")
		}
	}
	// uv normalises tool names (PEP 503: runs of -_. become -).
	for _, name := range []string{tool, strings.NewReplacer("_", "-", ".", "-").Replace(tool)} {
		bin := filepath.Join(dir, name, "bin", cmd)
		if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() {
			return append([]string{bin}, rest...), nil
		}
	}
	return nil, fmt.Errorf("uvx %s: %w: no uv tool environment %s, and the fence denies uv's download at start-up. Install it first: uv tool install %s", cmd, ErrNotInstalled, filepath.Join(dir, tool), tool)
}
