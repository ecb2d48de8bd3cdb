package scopegen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// runtimeDirFlags take a directory that is the server's own code or
// project, not data it serves.
var runtimeDirFlags = []string{"--directory", "--project", "--prefix", "-C", "--cwd", "--with-editable", "--from", "--cache-dir"}

// DirectoryArgs finds the directories a server is given: arguments (or
// the value of --flag=VALUE) that are existing directories, absolute, '~'
// based or relative to the working directory ("./x", "."). It returns them
// resolved, the arguments to rewrite ('~' expands against the run's
// private home under the fence, so such an argument is made absolute),
// and notes for the review.
func DirectoryArgs(args []string, home, cwd string) (dirs []string, rewritten map[int]string, notes []string) {
	rewritten = map[int]string{}
	seen := map[string]bool{}
	for i, a := range args {
		if i > 0 && slices.Contains(runtimeDirFlags, args[i-1]) {
			continue
		}
		val := a
		prefix := ""
		if strings.HasPrefix(a, "-") {
			k, v, ok := strings.Cut(a, "=")
			if !ok {
				continue
			}
			if slices.Contains(runtimeDirFlags, k) {
				continue
			}
			prefix, val = k+"=", v
		}
		p := val
		switch {
		case p == "~" || strings.HasPrefix(p, "~/"):
			p = filepath.Join(home, strings.TrimPrefix(p, "~"))
		case p == "." || p == ".." || strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../"):
			p = filepath.Join(cwd, p)
		case !filepath.IsAbs(p):
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			if filepath.IsAbs(val) || strings.HasPrefix(val, "~") {
				notes = append(notes, fmt.Sprintf("argument %q names a path that does not exist here (%v); it is not in the scope", a, errors.Unwrap(err)))
			}
			continue
		}
		st, err := os.Stat(real)
		if err != nil {
			continue
		}
		if !st.IsDir() {
			if st.Mode().IsRegular() && !isCode(real) {
				notes = append(notes, fmt.Sprintf("argument %q is a file, which the starting scope does not grant: add it to allowed_paths if the server reads it (and set access_mode to write if it writes it)", a))
			}
			continue
		}
		if strings.Contains(real, "/node_modules/") || strings.Contains(real, "/site-packages/") {
			continue
		}
		if strings.HasPrefix(val, "~") {
			rewritten[i] = prefix + p
			notes = append(notes, fmt.Sprintf("argument %q became %q: under the fence the server's home is a private directory, so '~' would not reach yours", a, prefix+p))
		}
		if !seen[real] {
			seen[real] = true
			dirs = append(dirs, real)
		}
	}
	return dirs, rewritten, notes
}

// isCode: a script or program, not data (the server's own entry point).
func isCode(p string) bool {
	switch filepath.Ext(p) {
	case ".js", ".mjs", ".cjs", ".ts", ".py", ".pyz", ".jar", ".sh", ".rb", ".pl":
		return true
	}
	st, err := os.Stat(p)
	return err == nil && st.Mode()&0o111 != 0
}
