package runtimeprofile

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// ProcSelf stands for the server's own /proc entry in a profile. Landlock
// rules are bound to inodes, and /proc/self is a symlink that each process
// resolves to its own /proc/PID: the sandbox helper turns a rule on
// ProcSelf into one on its own /proc/PID directory just before exec, and
// the helper's pid is the server's (exec keeps it). Children the server
// spawns get other /proc/PID directories that the rule does not cover: their
// reads of /proc/self are denied, unless the run has its own pid namespace
// and /proc, where every entry is the run's.
const ProcSelf = "/proc/self"

// Host names the files the profile reads to learn about the host.
type Host struct {
	Cgroup    string // the launcher's /proc/self/cgroup (the server inherits the cgroup)
	MountInfo string // the launcher's /proc/self/mountinfo (where the cgroup hierarchies are mounted)
}

// DefaultHost reads the running system.
var DefaultHost = Host{Cgroup: "/proc/self/cgroup", MountInfo: "/proc/self/mountinfo"}

// hostEntry is one host file or directory that runtimes read.
type hostEntry struct {
	path    string
	tree    bool // a directory of public data, granted with read_dir
	network bool // only when the scope grants TCP ports
	reason  string
}

// HostEntries are the host files granted read-only when they exist, with
// what reads them (measured with strace -f on node 20, CPython 3.11 and
// Go 1.26 programs; docs/launcher.md has the list). None holds a secret:
// they are the C library's and the runtimes' configuration, public data
// (time zones, locales, CA certificates) and system-wide counters.
var hostEntries = []hostEntry{
	{path: "/etc/ld.so.cache", reason: "the dynamic loader's cache"},
	{path: "/usr/bin/ldd", reason: "native-module loaders (napi-rs, node-gyp-build) read it to tell glibc from musl"},
	{path: "/etc/localtime", reason: "the time zone (libc, node, python, Go)"},
	{path: "/usr/share/zoneinfo", tree: true, reason: "time zone data (TZ=Area/City, python's zoneinfo, Go's time)"},
	{path: "/usr/lib/locale", tree: true, reason: "locale data (setlocale with LANG/LC_*)"},
	{path: "/usr/share/locale/locale.alias", reason: "locale aliases (setlocale)"},
	{path: "/etc/ssl/openssl.cnf", reason: "OpenSSL's configuration (node reads it at start-up)"},
	{path: "/usr/lib/ssl/openssl.cnf", reason: "OpenSSL's configuration (node reads it at start-up)"},
	{path: "/etc/ssl/certs/ca-certificates.crt", reason: "the CA bundle (node reads it at start-up)"},
	{path: "/dev/urandom", reason: "random numbers"},
	{path: "/dev/random", reason: "random numbers"},
	{path: "/proc/meminfo", reason: "system memory (node's heap sizing, os.totalmem)"},
	{path: "/proc/stat", reason: "CPU counters (node's os.cpus)"},
	{path: "/proc/cpuinfo", reason: "CPU models (node's os.cpus)"},
	{path: "/proc/uptime", reason: "uptime (node's os.uptime)"},
	{path: "/proc/loadavg", reason: "load average"},
	{path: "/proc/filesystems", reason: "file system types (libc, libselinux)"},
	{path: "/proc/sys/vm/overcommit_memory", reason: "overcommit policy (node/V8 at start-up)"},
	{path: "/proc/sys/net/core/somaxconn", reason: "listen backlog (Go's net.Listen)"},
	{path: "/sys/kernel/mm/transparent_hugepage", tree: true, reason: "huge page settings (Go runtime at start-up, V8)"},
	{path: "/sys/devices/system/cpu/online", reason: "online CPUs (sysconf(_SC_NPROCESSORS_ONLN): python's os.cpu_count, libuv)"},
	{path: "/sys/devices/system/cpu/possible", reason: "possible CPUs (libc get_nprocs_conf)"},
	{path: "/sys/devices/system/cpu/present", reason: "present CPUs"},

	{path: "/etc/nsswitch.conf", network: true, reason: "name service switch (host lookups)"},
	{path: "/etc/resolv.conf", network: true, reason: "DNS resolver configuration"},
	{path: "/etc/hosts", network: true, reason: "static host names"},
	{path: "/etc/host.conf", network: true, reason: "resolver options"},
	{path: "/etc/gai.conf", network: true, reason: "getaddrinfo address ordering"},
	{path: "/etc/services", network: true, reason: "service names (getaddrinfo with a service)"},
	{path: "/etc/protocols", network: true, reason: "protocol names"},
	{path: "/etc/ssl/certs", tree: true, network: true, reason: "CA certificates by hash (OpenSSL's CApath, python's ssl)"},
	{path: "/usr/share/ca-certificates", tree: true, network: true, reason: "the CA certificates /etc/ssl/certs links to"},
	{path: "/usr/lib/ssl/cert.pem", network: true, reason: "OpenSSL's default CA file"},
}

// hostResolver resolves the host entries as filepath.EvalSymlinks and
// os.Stat of the result would, with fewer system calls: the directories
// the entries share (/proc, /proc/sys, /sys/devices/system/cpu, /etc,
// /usr/share ...) are resolved once per profile instead of once per entry
// (filepath.EvalSymlinks lstats every component of every path), and an
// entry that is not a symlink is not stat'ed again (its lstat is its
// stat). About 95 lstat and stat calls became 45 for the default list.
// TestHostResolverMatchesEvalSymlinks holds it to the two calls it
// replaces.
type hostResolver struct {
	dirs map[string]hostDir // a directory's path -> what resolving it gave
}

type hostDir struct {
	real string
	err  error
}

// resolve returns what filepath.EvalSymlinks(p) returns and os.Stat of
// that. p is absolute and clean (the host entries are constants);
// anything else takes the two calls themselves.
func (r *hostResolver) resolve(p string) (string, os.FileInfo, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
		return evalAndStat(p)
	}
	dir, err := r.dir(filepath.Dir(p))
	if err != nil {
		return "", nil, err
	}
	q := filepath.Join(dir, filepath.Base(p))
	st, err := os.Lstat(q)
	if err != nil {
		return "", nil, err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		// Its target may be relative, hold .. or further links: the
		// library's own walk, from the resolved directory.
		return evalAndStat(q)
	}
	return q, st, nil
}

// dir resolves a directory's path, remembering the answer. A path that is
// not a directory is its own answer too (resolve's lstat below it then
// fails with ENOTDIR, as the library's walk does).
func (r *hostResolver) dir(d string) (string, error) {
	if d == "/" {
		return d, nil
	}
	if hd, ok := r.dirs[d]; ok {
		return hd.real, hd.err
	}
	real, _, err := r.resolve(d)
	if r.dirs == nil {
		r.dirs = make(map[string]hostDir)
	}
	r.dirs[d] = hostDir{real, err}
	return real, err
}

func evalAndStat(p string) (string, os.FileInfo, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", nil, err
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", nil, err
	}
	return real, st, nil
}

// devices are the character devices runtimes open and write.
var devices = []string{"/dev/null", "/dev/zero"}

// addHost adds the host files, the run's own /proc entry, the cgroup files
// of the server's cgroup, the NSS modules and the iconv modules.
func (b *builder) addHost() error {
	b.add(ProcSelf, ClassReadTree, "the server's own /proc entry (its maps, statm, status, cgroup, mountinfo, fd, task): read-only, no other process's")
	var hr hostResolver
	for _, h := range hostEntries {
		if h.network && !b.opt.Network {
			continue
		}
		real, st, err := hr.resolve(h.path)
		if err != nil {
			continue
		}
		if real != h.path {
			b.name(h.path) // /etc/localtime is opened by that name
		}
		switch {
		case h.tree && st.IsDir():
			b.add(real, ClassReadTree, h.reason)
		case !h.tree && (st.Mode().IsRegular() || st.Mode()&os.ModeCharDevice != 0):
			b.add(real, ClassRead, h.reason)
		}
	}
	for _, d := range devices {
		if st, err := os.Stat(d); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			b.add(d, ClassDevice, "character device")
		}
	}
	for _, d := range b.opt.Search.Dirs {
		// glibc's iconv modules (python's locale start-up, git), in the
		// first library directory that has them, like the C library's own
		// GCONV_PATH default.
		if real, st, err := hr.resolve(filepath.Join(d, "gconv")); err == nil {
			if st.IsDir() {
				b.add(real, ClassReadTree, "the C library's iconv modules")
				break
			}
		}
	}
	cg, _ := os.ReadFile(b.opt.Host.Cgroup)
	mi, _ := os.ReadFile(b.opt.Host.MountInfo)
	for _, f := range CgroupLimitFiles(cg, mi) {
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
			b.add(f, ClassRead, "the CPU and memory limits of the server's cgroup (Go's GOMAXPROCS, node's heap limit)")
		}
	}
	if !b.opt.Network {
		return nil
	}
	// User and group lookups (/etc/passwd, /etc/group) are not granted: they
	// list the host's accounts; --allow-runtime /etc/passwd grants them.
	nss, _ := os.ReadFile("/etc/nsswitch.conf")
	for _, svc := range nssServices(string(nss), []string{"hosts"}) {
		lib, literal, f, err := findLib("libnss_"+svc+".so.2", "/", "", "", b.opt.Search, nativeClass(), nativeMachine())
		if err != nil {
			continue // a module that is not installed is skipped by the C library too
		}
		f.Close()
		b.add(lib, ClassRead, "name service module ("+svc+")")
		if literal != lib {
			b.name(literal)
		}
		deps, err := ResolveELF(lib, b.opt.Search)
		if err != nil {
			continue
		}
		for _, l := range deps.Libs {
			b.add(l, ClassRead, "shared library of a name service module")
		}
		for _, n := range deps.Names {
			b.name(n)
		}
	}
	return nil
}

// nssServices lists the services nsswitch.conf names for the databases
// dbs, in order, without the built-in ones the C library needs no module
// for and without [STATUS=action] items.
func nssServices(conf string, dbs []string) []string {
	want := map[string]bool{}
	for _, d := range dbs {
		want[d] = true
	}
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(conf, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		db, rest, ok := strings.Cut(line, ":")
		if !ok || !want[strings.TrimSpace(db)] {
			continue
		}
		inAction := false
		for _, w := range strings.Fields(rest) {
			if strings.HasPrefix(w, "[") {
				inAction = !strings.HasSuffix(w, "]")
				continue
			}
			if inAction {
				inAction = !strings.HasSuffix(w, "]")
				continue
			}
			if !isNSSName(w) || seen[w] {
				continue
			}
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

func isNSSName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// cgroupLimitNames are the files runtimes read to learn their limits: Go's
// GOMAXPROCS (cpu.max, cpu.cfs_*), libuv's constrained memory and
// available parallelism (memory.max/high, memory.*limit_in_bytes).
var cgroupLimitNames = map[string][]string{
	"cpu":    {"cpu.cfs_quota_us", "cpu.cfs_period_us"},
	"memory": {"memory.limit_in_bytes", "memory.soft_limit_in_bytes"},
	"":       {"cpu.max", "memory.max", "memory.high"}, // cgroup v2
}

// LimitFilesIn returns the limit files runtimes read (see cgroupLimitNames)
// that exist in the cgroup directories dirs: those of a cgroup the launcher
// made for the run after the profile was resolved.
func LimitFilesIn(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		for _, names := range [][]string{cgroupLimitNames[""], cgroupLimitNames["cpu"], cgroupLimitNames["memory"]} {
			for _, n := range names {
				f := filepath.Join(d, n)
				if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
					out = append(out, f)
				}
			}
		}
	}
	return out
}

// CgroupLimitFiles returns the limit files of the cgroups in procCgroup
// (the contents of /proc/PID/cgroup) and of their ancestors up to each
// hierarchy's mount point, found through mountinfo (the contents of
// /proc/PID/mountinfo). The files need not exist; callers stat them.
// Hybrid layouts (v1 controllers plus a cgroup2 mount) yield both kinds.
func CgroupLimitFiles(procCgroup, mountinfo []byte) []string {
	mounts := parseMountInfo(mountinfo)
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(procCgroup))
	for n := 0; sc.Scan() && n < 64; n++ {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		controllers, cgPath := parts[1], filepath.Clean(parts[2])
		for _, m := range mounts {
			var names []string
			switch {
			case controllers == "" && m.fstype == "cgroup2":
				names = cgroupLimitNames[""]
			case controllers != "" && m.fstype == "cgroup" && sameControllers(controllers, m.superopts):
				for _, c := range strings.Split(controllers, ",") {
					names = append(names, cgroupLimitNames[c]...)
				}
			}
			if len(names) == 0 {
				continue
			}
			rel, err := filepath.Rel(m.root, cgPath)
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				continue // the cgroup is not visible through this mount
			}
			dir := filepath.Join(m.point, rel)
			for depth := 0; depth < 32; depth++ {
				for _, name := range names {
					f := filepath.Join(dir, name)
					if !seen[f] {
						seen[f] = true
						out = append(out, f)
					}
				}
				if dir == m.point || !within(m.point, dir) {
					break
				}
				dir = filepath.Dir(dir)
			}
		}
	}
	return out
}

// sameControllers reports whether a v1 mount's options name exactly the
// controllers of a /proc/PID/cgroup line.
func sameControllers(controllers, superopts string) bool {
	opts := map[string]bool{}
	for _, o := range strings.Split(superopts, ",") {
		opts[o] = true
	}
	for _, c := range strings.Split(controllers, ",") {
		if !opts[c] {
			return false
		}
	}
	return true
}

type mountEntry struct {
	root, point, fstype, superopts string
}

// parseMountInfo reads the cgroup mounts of a mountinfo file (proc(5)):
// "ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS".
func parseMountInfo(data []byte) []mountEntry {
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 0; sc.Scan() && n < 10000; n++ {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(f) {
			continue
		}
		fstype := f[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		superopts := ""
		if sep+3 < len(f) {
			superopts = f[sep+3]
		}
		root, point := unescapeMount(f[3]), unescapeMount(f[4])
		if !filepath.IsAbs(root) || !filepath.IsAbs(point) {
			continue
		}
		out = append(out, mountEntry{root: filepath.Clean(root), point: filepath.Clean(point), fstype: fstype, superopts: superopts})
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// nativeClass and nativeMachine are the ELF class and machine of this
// build: the server's NSS modules are loaded by a C library of the same
// kind as the launcher's on every supported platform (amd64, arm64).
func nativeClass() elf.Class { return elf.ELFCLASS64 }

func nativeMachine() elf.Machine {
	if runtime.GOARCH == "arm64" {
		return elf.EM_AARCH64
	}
	return elf.EM_X86_64
}
