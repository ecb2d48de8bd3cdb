package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Identity is a host uid and gid.
type Identity struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Namespaces is what the helper sets up inside the namespaces the launcher
// cloned it into. The launcher decides which namespaces to create; the
// helper refuses to run (Status, nothing exec'd) when any step fails.
type Namespaces struct {
	// Which namespaces the helper was started in. PID implies Mount: the
	// helper is then the run's init and mounts the run's own /proc.
	User  bool `json:"user,omitempty"` // the launcher's own user namespace (unprivileged launcher)
	Mount bool `json:"mount,omitempty"`
	PID   bool `json:"pid,omitempty"`
	IPC   bool `json:"ipc,omitempty"`
	UTS   bool `json:"uts,omitempty"`
	Net   bool `json:"net,omitempty"` // loopback only: the helper brings lo up

	Hostname string `json:"hostname,omitempty"` // set in the uts namespace
	// MemfdNoexec sets vm.memfd_noexec=2 for the run's pid namespace: no
	// executable memfds (kernel 6.3+; the launcher checks support).
	MemfdNoexec bool `json:"memfd_noexec,omitempty"`
	// NoNestedUserNS sets user.max_user_namespaces=0 in the run's own user
	// namespace (User), so nothing in the run can create another one.
	NoNestedUserNS bool `json:"no_nested_userns,omitempty"`

	Root Root `json:"root"`
	// Server is the user namespace the server runs in (a root launcher):
	// uid and gid Inside map to the dedicated host Identity.UID/GID. The
	// same mapping is the idmap of Idmap mounts, so files the server creates
	// there belong to Inside on disk. Nil: the server stays in the helper's
	// user namespace.
	Server *ServerUserNS `json:"server,omitempty"`
}

// ServerUserNS maps the server's ids inside its user namespace to the
// dedicated host ids it runs as.
type ServerUserNS struct {
	Inside Identity `json:"inside"` // the file owner chosen by the operator
	Host   Identity `json:"host"`   // the dedicated host uid and gid
}

// Root is the minimal root the server sees: a fresh tmpfs holding only the
// paths listed, each at its host path.
type Root struct {
	// Staging is an empty directory, private to the run, on which the new
	// root is built before pivot_root.
	Staging string   `json:"staging"`
	Mounts  []Mount  `json:"mounts"`
	Links   []Link   `json:"links,omitempty"`
	Dirs    []string `json:"dirs,omitempty"` // empty directories (the working directory)
	// Tmp is mounted as a tmpfs of TmpSize bytes, mode 0700, owned by the
	// server (the run's private TMPDIR and HOME).
	Tmp     string `json:"tmp,omitempty"`
	TmpSize int64  `json:"tmp_size,omitempty"`
	// TmpOwner owns Tmp, as ids of the helper's user namespace: the
	// server's identity.
	TmpOwner Identity `json:"tmp_owner"`
}

// Mount is one bind mount of a host path onto the same path inside. Every
// mount is nosuid; read-only unless Write; noexec unless Exec; nodev unless
// Dev (a character device the runtime opens).
type Mount struct {
	Path  string `json:"path"`
	Dir   bool   `json:"dir,omitempty"`
	Write bool   `json:"write,omitempty"`
	Exec  bool   `json:"exec,omitempty"`
	Dev   bool   `json:"dev,omitempty"`
	// Idmap maps the server's ids to the file owner's on this mount
	// (Namespaces.Server): scope paths.
	Idmap bool `json:"idmap,omitempty"`
	// Mask covers Path (inside the new root, on the bind of the scope
	// that holds it) with an empty object of the kind Dir says: a
	// directory or a regular file, owned by the helper's root, mode 000,
	// mounted read-only, nosuid, nodev, noexec. The host path is not
	// opened: the server finds no content there, cannot rename or unlink
	// the entry (a mount point: EBUSY). A Path gone by mount time is
	// skipped (nothing left to hide); one that became a symlink or the
	// other kind refuses the run. Never with Write, Exec, Dev or Idmap.
	Mask bool `json:"mask,omitempty"`
}

// Link is a symlink recreated inside, so that a literal path the runtime
// opens (PT_INTERP, /bin/sh, a library's soname) resolves as on the host.
type Link struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// check refuses a namespace spec the helper cannot apply safely: relative
// or unclean paths (the helper joins them under the staging directory),
// a pid namespace without its mount namespace.
func (n *Namespaces) check() error {
	if n == nil {
		return nil
	}
	if n.PID && !n.Mount {
		return errors.New("spec: a pid namespace needs its mount namespace (for the run's /proc)")
	}
	if !n.Mount {
		return nil
	}
	paths := []string{n.Root.Staging}
	paths = append(paths, n.Root.Dirs...)
	if n.Root.Tmp != "" {
		paths = append(paths, n.Root.Tmp)
	}
	for _, m := range n.Root.Mounts {
		paths = append(paths, m.Path)
		if m.Mask && (m.Write || m.Exec || m.Dev || m.Idmap) {
			return fmt.Errorf("spec: the mask of %s must be read-only, noexec and nodev, and not idmapped", m.Path)
		}
	}
	for _, l := range n.Root.Links {
		paths = append(paths, l.Path)
		if l.Target == "" || strings.ContainsRune(l.Target, 0) {
			return fmt.Errorf("spec: link %s has no target", l.Path)
		}
	}
	for _, p := range paths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" || strings.ContainsRune(p, 0) {
			return fmt.Errorf("spec: %q is not a clean absolute path below /", p)
		}
	}
	if n.Server != nil && (n.Server.Host.UID <= 0 || n.Server.Host.GID <= 0) {
		return errors.New("spec: the server's dedicated host ids must not be root")
	}
	return nil
}
