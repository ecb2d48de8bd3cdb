package runtimeprofile

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const hybridMountInfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:40 /docker/abc /sys/fs/cgroup/odd\040name rw shared:5 - cgroup cgroup rw,blkio
`

func TestCgroupLimitFiles(t *testing.T) {
	tests := []struct {
		name      string
		cgroup    string
		mountinfo string
		want      []string
		notWant   []string
	}{
		{
			name:      "hybrid, nested memory cgroup",
			cgroup:    "4:memory:/process_api/abc\n2:cpu,cpuacct:/\n8:pids:/\n0::/user.slice\n",
			mountinfo: hybridMountInfo,
			want: []string{
				"/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes",
				"/sys/fs/cgroup/memory/process_api/memory.limit_in_bytes",
				"/sys/fs/cgroup/memory/memory.soft_limit_in_bytes",
				"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us",
				"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us",
				"/sys/fs/cgroup/unified/user.slice/cpu.max",
				"/sys/fs/cgroup/unified/memory.max",
			},
			notWant: []string{"/sys/fs/cgroup/pids/cpu.max", "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/cpu.max"},
		},
		{
			name:      "pure v2",
			cgroup:    "0::/system.slice/x.service\n",
			mountinfo: "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
			want:      []string{"/sys/fs/cgroup/system.slice/x.service/cpu.max", "/sys/fs/cgroup/system.slice/memory.high", "/sys/fs/cgroup/cpu.max"},
		},
		{
			name:      "inside a cgroup namespace: the namespace's root",
			cgroup:    "0::/\n",
			mountinfo: "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			want:      []string{"/sys/fs/cgroup/cpu.max"},
		},
		{
			name:      "cgroup outside the mount's root is not visible",
			cgroup:    "0::/other\n",
			mountinfo: "25 20 0:22 /kubepods /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			want:      nil,
		},
		{
			name:      "a path with .. cannot climb out of the mount",
			cgroup:    "0::/../../etc\n",
			mountinfo: "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			want:      []string{"/sys/fs/cgroup/cpu.max"},
			notWant:   []string{"/etc/cpu.max", "/sys/cpu.max"},
		},
		{
			name:      "escaped mount point",
			cgroup:    "9:blkio:/docker/abc/x\n",
			mountinfo: hybridMountInfo,
			want:      nil, // blkio has no limit files runtimes read
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CgroupLimitFiles([]byte(tt.cgroup), []byte(tt.mountinfo))
			for _, w := range tt.want {
				if !slices.Contains(got, w) {
					t.Errorf("missing %s in %v", w, got)
				}
			}
			for _, w := range tt.notWant {
				if slices.Contains(got, w) {
					t.Errorf("%s granted: %v", w, got)
				}
			}
			if tt.want == nil && len(got) != 0 {
				t.Errorf("want nothing, got %v", got)
			}
		})
	}
}

func TestParseMountInfoEscapes(t *testing.T) {
	m := parseMountInfo([]byte(hybridMountInfo))
	var points []string
	for _, e := range m {
		points = append(points, e.point)
	}
	want := []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/odd name"}
	if !reflect.DeepEqual(points, want) {
		t.Errorf("points %q, want %q", points, want)
	}
}

// FuzzCgroupLimitFiles: whatever /proc/self/cgroup and mountinfo say, only
// clean absolute paths beneath a cgroup mount point come out.
func FuzzCgroupLimitFiles(f *testing.F) {
	f.Add("4:memory:/a/b\n0::/x\n", hybridMountInfo)
	f.Add("0::/../..\n", "1 1 0:1 / /sys/fs/cgroup rw - cgroup2 c rw\n")
	f.Add("0::/a\n", "1 1 0:1 /a\\ /m\\04 rw - cgroup2 c rw\n")
	f.Fuzz(func(t *testing.T, cgroup, mountinfo string) {
		mounts := parseMountInfo([]byte(mountinfo))
		for _, p := range CgroupLimitFiles([]byte(cgroup), []byte(mountinfo)) {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p {
				t.Fatalf("path %q", p)
			}
			ok := false
			for _, m := range mounts {
				if within(m.point, filepath.Dir(p)) {
					ok = true
				}
			}
			if !ok {
				t.Fatalf("%q is outside every cgroup mount", p)
			}
		}
	})
}

func TestNSSServices(t *testing.T) {
	conf := "# comment\npasswd:         files systemd\ngroup: files [SUCCESS=merge] systemd\nhosts: files mdns4_minimal [NOTFOUND=return] dns myhostname\nshadow: files ../../evil\nnetgroup: nis\n"
	if got, want := nssServices(conf, []string{"passwd", "group"}), []string{"files", "systemd"}; !reflect.DeepEqual(got, want) {
		t.Errorf("passwd/group: %v, want %v", got, want)
	}
	if got, want := nssServices(conf, []string{"hosts"}), []string{"files", "mdns4_minimal", "dns", "myhostname"}; !reflect.DeepEqual(got, want) {
		t.Errorf("hosts: %v, want %v", got, want)
	}
	if got := nssServices(conf, []string{"shadow"}); !reflect.DeepEqual(got, []string{"files"}) {
		t.Errorf("a service name with a path was accepted: %v", got)
	}
}

func FuzzNSSServices(f *testing.F) {
	f.Add("hosts: files [!UNAVAIL=return] dns\n")
	f.Fuzz(func(t *testing.T, conf string) {
		for _, s := range nssServices(conf, []string{"hosts", "passwd"}) {
			if !isNSSName(s) || strings.ContainsAny(s, "/.") {
				t.Fatalf("service %q", s)
			}
		}
	})
}

// TestResolveHostFiles: every profile has the run's own /proc entry and the
// host files runtimes read, never /proc or /sys as a whole; name resolution
// comes only with network.
func TestResolveHostFiles(t *testing.T) {
	for _, network := range []bool{false, true} {
		p, err := Resolve([]string{"sh"}, Options{PATH: "/usr/bin:/bin", Network: network})
		if err != nil {
			t.Fatal(err)
		}
		m := entryPaths(p)
		if m[ProcSelf] != ClassReadTree {
			t.Errorf("no %s: %v", ProcSelf, m)
		}
		for _, f := range []string{"/proc/meminfo", "/proc/sys/vm/overcommit_memory", "/sys/kernel/mm/transparent_hugepage", "/etc/ld.so.cache"} {
			if _, err := os.Stat(f); err == nil && m[f] == "" {
				t.Errorf("network=%v: %s missing", network, f)
			}
		}
		for _, f := range []string{"/", "/proc", "/sys", "/etc", "/proc/1", "/sys/fs/cgroup", "/etc/shadow", "/proc/kcore", "/proc/sys"} {
			if _, ok := m[f]; ok {
				t.Errorf("network=%v: %s granted", network, f)
			}
		}
		resolv, err := filepath.EvalSymlinks("/etc/resolv.conf")
		if err != nil {
			continue
		}
		if _, ok := m[resolv]; ok != network {
			t.Errorf("network=%v: resolv.conf granted=%v", network, ok)
		}
		if network {
			var dns bool
			for path := range m {
				dns = dns || strings.Contains(filepath.Base(path), "libnss_")
			}
			if _, err := os.Stat("/etc/nsswitch.conf"); err == nil && !dns {
				t.Errorf("no NSS module with network: %v", m)
			}
		}
	}
}

// TestHostResolverMatchesEvalSymlinks holds hostResolver to the two calls
// it replaces (filepath.EvalSymlinks, then os.Stat of the result): the
// same path, the same file, an error where they fail. On the host's own
// entries and on a tree of symlinks (relative, absolute, chained, through
// .., dangling, looping, to a file used as a directory), in one resolver,
// so that the remembered directories are shared as in addHost.
func TestHostResolverMatchesEvalSymlinks(t *testing.T) {
	d := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(d, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := func(p string) {
		if err := os.WriteFile(filepath.Join(d, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.Symlink(target, filepath.Join(d, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("usr/lib/x")
	mk("usr/share/zoneinfo/Etc")
	file("usr/share/zoneinfo/Etc/UTC")
	file("usr/lib/x/f")
	mk("etc/ssl")
	file("etc/ssl/openssl.cnf")
	file("etc/hosts")
	link("usr/lib", "lib")                                    // relative, at the top
	link(filepath.Join(d, "usr/lib"), "lib64")                // absolute
	link("lib", "chain")                                      // to another link
	link("../usr/share/zoneinfo/Etc/UTC", "etc/localtime")    // relative with ..
	link("../../../etc/ssl/openssl.cnf", "usr/lib/x/ssl.cnf") // a file, by a long way
	link("missing", "dangling")
	link("loop2", "loop1")
	link("loop1", "loop2")
	link("hosts", "etc/hostsdir") // a file, used as a directory below
	link("x/../x", "usr/lib/dotdot")
	link(".", "usr/self")
	paths := []string{
		"", "lib", "lib64", "chain", "lib/x", "lib/x/f", "lib64/x/f", "chain/x/f", "chain/x/ssl.cnf", "etc/localtime",
		"usr/lib/x/ssl.cnf", "dangling", "dangling/f", "loop1", "loop1/f", "etc/hostsdir", "etc/hostsdir/f",
		"etc/hosts/f", "usr/lib/dotdot", "usr/lib/dotdot/f", "usr/self/self/lib/x", "usr/missing", "usr/missing/f",
		"usr/share/zoneinfo", "usr/share/zoneinfo/Etc/UTC",
	}
	var all []string
	for _, p := range paths {
		all = append(all, filepath.Join(d, p))
	}
	for _, h := range hostEntries {
		all = append(all, h.path)
	}
	all = append(all, "/", "/proc/self", "/proc/self/status", "/lib/x86_64-linux-gnu/gconv", "/usr/lib/x86_64-linux-gnu/gconv",
		"/lib64", "/nonexistent/x", "relative/path", d+"/lib/../etc", d+"//lib")
	var r hostResolver
	for round := 0; round < 2; round++ { // the second round from what the first remembered
		for _, p := range all {
			wantReal, wantSt, wantErr := evalAndStat(p)
			real, st, err := r.resolve(p)
			if (err == nil) != (wantErr == nil) {
				t.Errorf("%s: error %v, want %v", p, err, wantErr)
				continue
			}
			if err != nil {
				continue
			}
			if real != wantReal || !os.SameFile(st, wantSt) || st.Mode() != wantSt.Mode() {
				t.Errorf("%s: %s (%v), want %s (%v)", p, real, st.Mode(), wantReal, wantSt.Mode())
			}
		}
	}
}
