package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Sizes of the run's tmpfs mounts.
const (
	rootTmpfsOptions = "mode=0755,size=4m,nr_inodes=16384" // directories, mount points and links only
	// DefaultTmpSize bounds the run's private TMPDIR (also HOME).
	DefaultTmpSize = 256 << 20
)

// setupNamespaces does, as the run's init, what the namespaces it was
// started in need: the host name, loopback, and the first part of the
// minimal root (rootBuild.start). It needs nothing of the exec stage, so
// it runs while the stage is being started; finishNamespaces does the
// rest once the server's user namespace exists.
func setupNamespaces(s *Spec) (*rootBuild, *Status) {
	ns := s.NS
	if ns.UTS && ns.Hostname != "" {
		if err := unix.Sethostname([]byte(ns.Hostname)); err != nil {
			return nil, &Status{Stage: StageNamespaces, Errno: errnoOf(err), Message: "set the run's host name: " + err.Error()}
		}
	}
	if ns.Net {
		if err := loopbackUp(); err != nil {
			return nil, &Status{Stage: StageNamespaces, Errno: errnoOf(err), Message: "bring up loopback in the run's network namespace: " + err.Error()}
		}
	}
	if !ns.Mount {
		return nil, nil
	}
	b := &rootBuild{ns: ns}
	return b, b.start()
}

// finishNamespaces completes the minimal root begun by setupNamespaces
// (b nil: there is none); idmap is the server's user namespace, or -1.
func finishNamespaces(b *rootBuild, idmap int) *Status {
	if b == nil {
		return nil
	}
	return b.finish(idmap)
}

// mountRunProc makes the mount tree private (nothing mounted here may
// propagate back to the host) and mounts the run's own /proc over the
// host's: only the run's processes. hidepid: a process sees the /proc
// entries of its own uid only. rootBuild.finish moves it into the new root.
func mountRunProc() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the run's mounts private: %w", err)
	}
	return unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible")
}

// rootBuild builds the minimal root: a fresh tmpfs on the staging
// directory, every path of the spec bind-mounted onto the same path below
// it (parents first), the links, the private TMPDIR and the run's /proc,
// and then it becomes the root. It goes in two parts: start makes the
// mounts up to the first idmapped one (which needs the server's user
// namespace, so the exec stage must exist), finish the rest.
type rootBuild struct {
	ns     *Namespaces
	mounts []Mount // sorted, parents first
	next   int     // the first of mounts not made yet
	masks  bool    // the mask sources exist (maskDir below the staging directory)
}

// maskDir holds, in the root's own tmpfs, the empty file and directory
// that Mask mounts are clones of; finish removes it before pivot_root.
const maskDir = "/.mcpwarden-mask"

func rootFail(path, what string, err error) *Status {
	return &Status{Stage: StageRoot, Errno: errnoOf(err), Path: path, Message: fmt.Sprintf("%s %s: %v", what, path, err)}
}

// start mounts the root's tmpfs and every mount before the first idmapped one.
func (b *rootBuild) start() *Status {
	top := b.ns.Root.Staging
	if err := unix.Mount("tmpfs", top, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, rootTmpfsOptions); err != nil {
		return rootFail(top, "mount the new root's tmpfs on", err)
	}
	b.mounts = append([]Mount(nil), b.ns.Root.Mounts...)
	// Parents first: a file granted inside a granted directory is mounted
	// over that directory's bind.
	sort.SliceStable(b.mounts, func(i, j int) bool { return b.mounts[i].Path < b.mounts[j].Path })
	return b.bind(-1, true)
}

// bind makes the mounts from b.next on, stopping before an idmapped one
// when untilIdmap.
func (b *rootBuild) bind(idmap int, untilIdmap bool) *Status {
	top := b.ns.Root.Staging
	for ; b.next < len(b.mounts); b.next++ {
		m := b.mounts[b.next]
		if m.Idmap && untilIdmap {
			return nil
		}
		if m.Mask {
			if err := b.maskInto(m); err != nil {
				// The path of a secret is not named.
				return &Status{Stage: StageRoot, Errno: errnoOf(err), Message: "mask a secret of the scope: " + err.Error()}
			}
			continue
		}
		if err := bindInto(top, m, idmap); err != nil {
			return rootFail(m.Path, "bind", err)
		}
	}
	return nil
}

// finish makes the remaining mounts (idmap: the server's user namespace,
// or -1), the links, directories, the private TMPDIR and the run's /proc,
// and pivots into the new root.
func (b *rootBuild) finish(idmap int) *Status {
	if st := b.bind(idmap, false); st != nil {
		return st
	}
	if st := b.removeMaskSources(); st != nil {
		return st
	}
	ns := b.ns
	r := &ns.Root
	top := r.Staging
	fail := rootFail
	for _, l := range r.Links {
		at := top + l.Path
		if _, err := os.Lstat(at); err == nil {
			continue // there already, through a bind
		}
		if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
			return fail(l.Path, "make the directory of link", err)
		}
		if err := os.Symlink(l.Target, at); err != nil {
			return fail(l.Path, "recreate link", err)
		}
	}
	for _, d := range r.Dirs {
		if err := os.MkdirAll(top+d, 0o755); err != nil {
			return fail(d, "make directory", err)
		}
	}
	if r.Tmp != "" {
		if err := os.MkdirAll(top+r.Tmp, 0o755); err != nil {
			return fail(r.Tmp, "make the private TMPDIR", err)
		}
		size := r.TmpSize
		if size <= 0 {
			size = DefaultTmpSize
		}
		owner := r.TmpOwner
		opts := fmt.Sprintf("mode=0700,size=%d,uid=%d,gid=%d", size, owner.UID, owner.GID)
		if err := unix.Mount("tmpfs", top+r.Tmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
			return fail(r.Tmp, "mount the private TMPDIR's tmpfs on", err)
		}
	}
	if ns.PID {
		proc := top + "/proc"
		if err := os.MkdirAll(proc, 0o555); err != nil {
			return fail("/proc", "make", err)
		}
		if err := unix.Mount("/proc", proc, "", unix.MS_MOVE, ""); err != nil {
			return fail("/proc", "move the run's /proc into the new root:", err)
		}
		if ns.MemfdNoexec {
			if err := os.WriteFile(proc+"/sys/vm/memfd_noexec", []byte("2"), 0); err != nil {
				return fail("/proc/sys/vm/memfd_noexec", "set", err)
			}
		}
		if ns.NoNestedUserNS {
			if err := os.WriteFile(proc+"/sys/user/max_user_namespaces", []byte("0"), 0); err != nil {
				return fail("/proc/sys/user/max_user_namespaces", "set", err)
			}
		}
	}
	if err := unix.Chdir(top); err != nil {
		return fail(top, "enter the new root", err)
	}
	// pivot_root(".", "."): the old root ends up stacked on the new one
	// and is detached at once; nothing of it stays reachable.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fail(top, "pivot_root into", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fail("/", "detach the old root from", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fail("/", "enter", err)
	}
	// The root itself holds only directories, mount points and links.
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &attr); err != nil {
		return fail("/", "make the new root read-only:", err)
	}
	return nil
}

// bindInto bind-mounts m.Path onto the same path below top. The source is
// opened with RESOLVE_NO_SYMLINKS, like the Landlock rules: the launcher
// sends canonical paths, so a symlink now means a swap since the scope was
// checked.
func bindInto(top string, m Mount, idmap int) error {
	src, err := unix.Openat2(unix.AT_FDCWD, m.Path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return fmt.Errorf("it became a symlink after the scope was checked; refusing to run")
		}
		return err
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return fmt.Errorf("it became a symlink after the scope was checked; refusing to run")
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if isDir != m.Dir {
		return fmt.Errorf("it is no longer a %s", map[bool]string{true: "directory", false: "file"}[m.Dir])
	}
	if m.Dev && st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return errors.New("not a character device")
	}
	at := top + m.Path
	if err := mountPoint(at, isDir); err != nil {
		return fmt.Errorf("make its mount point: %w", err)
	}
	tree, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("clone its mount: %w", err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}
	if !m.Write {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if !m.Exec {
		attr.Attr_set |= unix.MOUNT_ATTR_NOEXEC
	}
	if !m.Dev {
		attr.Attr_set |= unix.MOUNT_ATTR_NODEV
	}
	if m.Idmap {
		if idmap < 0 {
			return errors.New("an idmapped mount without the server's user namespace")
		}
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(idmap)
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		if m.Idmap && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM)) {
			return fmt.Errorf("set its mount attributes (its file system may not support idmapped mounts; --owner with the files' owner or a scope on ext4, xfs, btrfs or tmpfs avoids them): %w", err)
		}
		return fmt.Errorf("set its mount attributes: %w", err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach it: %w", err)
	}
	return nil
}

// mountPoint makes the directory or empty file at to mount on, and its
// parents; one that is already there (through the bind of a granted
// directory above it) is used as it is. Most parents exist already (the
// mounts go parents first), so it tries the mount point alone first.
func mountPoint(at string, dir bool) error {
	create := func() error {
		if dir {
			return unix.Mkdir(at, 0o755)
		}
		fd, err := unix.Open(at, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	err := create()
	if errors.Is(err, unix.ENOENT) {
		if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
			return err
		}
		err = create()
	}
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

// loopbackUp brings up lo, the only interface of a new network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// maskInto covers m.Path below the staging directory with a read-only
// clone of the empty file or directory of maskDir (made on first use).
// The target is opened beneath the staging directory without following
// any symlink; one gone since the launcher's walk is skipped.
func (b *rootBuild) maskInto(m Mount) error {
	top := b.ns.Root.Staging
	if !b.masks {
		if err := unix.Mkdir(top+maskDir, 0); err != nil {
			return fmt.Errorf("make the masks' source: %w", err)
		}
		if err := unix.Mkdir(top+maskDir+"/d", 0); err != nil {
			return fmt.Errorf("make the masks' source: %w", err)
		}
		fd, err := unix.Open(top+maskDir+"/f", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("make the masks' source: %w", err)
		}
		unix.Close(fd)
		b.masks = true
	}
	root, err := unix.Open(top, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	target, err := unix.Openat2(root, m.Path[1:], &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOENT) {
		return nil // gone since the walk: nothing to hide
	}
	if errors.Is(err, unix.ELOOP) {
		return errors.New("a secret's path holds a symlink since the launcher's walk; run again")
	}
	if err != nil {
		return err
	}
	defer unix.Close(target)
	var st unix.Stat_t
	if err := unix.Fstat(target, &st); err != nil {
		return err
	}
	switch kind := st.Mode & unix.S_IFMT; {
	case kind == unix.S_IFLNK:
		return errors.New("a secret became a symlink since the launcher's walk; run again")
	case (kind == unix.S_IFDIR) != m.Dir:
		return errors.New("a secret changed between file and directory since the launcher's walk; run again")
	}
	src := top + maskDir + "/f"
	if m.Dir {
		src = top + maskDir + "/d"
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("clone the mask: %w", err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("set the mask's mount attributes: %w", err)
	}
	if err := unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach the mask: %w", err)
	}
	return nil
}

// removeMaskSources removes maskDir: the masks stay (each holds its own
// reference), nothing of their source shows in the root.
func (b *rootBuild) removeMaskSources() *Status {
	if !b.masks {
		return nil
	}
	top := b.ns.Root.Staging
	for _, p := range []string{maskDir + "/f", maskDir + "/d", maskDir} {
		var err error
		if strings.HasSuffix(p, "/f") {
			err = unix.Unlink(top + p)
		} else {
			err = unix.Rmdir(top + p)
		}
		if err != nil {
			return &Status{Stage: StageRoot, Errno: errnoOf(err), Message: "remove the masks' source: " + err.Error()}
		}
	}
	b.masks = false
	return nil
}
