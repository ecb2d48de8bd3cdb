package main

import (
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// nsOps: namespaces: what a run can see of the host (mounts, /proc, /tmp,
// hostname, network), planting, identity. Landlock does not decide stat or
// statfs: these ops show what exists for the server, not what it may open.
var nsOps = map[string]op{
	// lstat of Path: whether it exists for the server, and its owner as the
	// server sees it.
	"lstat": func(r Request) (string, error) {
		var st unix.Stat_t
		if err := unix.Lstat(r.Path, &st); err != nil {
			return "", err
		}
		return fmt.Sprintf("mode=%o uid=%d gid=%d dev=%d", st.Mode, st.Uid, st.Gid, st.Dev), nil
	},
	// statfs of Path: the file system type and mount flags (ST_RDONLY,
	// ST_NOSUID, ST_NODEV, ST_NOEXEC).
	"statfs": func(r Request) (string, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(r.Path, &st); err != nil {
			return "", err
		}
		return fmt.Sprintf("type=%x flags=%x", st.Type, st.Flags), nil
	},
	"hostname": func(Request) (string, error) { return os.Hostname() },
	// The network interfaces the server sees, "name:up" or "name:down".
	"ifaces": func(Request) (string, error) {
		ifs, err := net.Interfaces()
		if err != nil {
			return "", err
		}
		var out []string
		for _, i := range ifs {
			state := "down"
			if i.Flags&net.FlagUp != 0 {
				state = "up"
			}
			out = append(out, i.Name+":"+state)
		}
		return strings.Join(out, ","), nil
	},
	"mkfifo": func(r Request) (string, error) { return "", unix.Mkfifo(r.Path, 0o644) },
	// copy Path to To (a regular file's bytes, the way cp copies them).
	"copy": func(r Request) (string, error) {
		b, err := os.ReadFile(r.Path)
		if err != nil {
			return "", err
		}
		return "", os.WriteFile(r.To, b, 0o755)
	},
}
