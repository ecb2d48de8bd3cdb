#!/usr/bin/env bash
# Installs, starts and stops what mcpwarden's tests need. Idempotent.
#   install      Debian packages, pinned npm servers, Go tools, Debian's
#                nats-server unpacked into build/nats-server-debian
#   install-npm  only the pinned npm MCP servers (for `make demo`)
#                (install also installs deploy/interop: the interop tests' clients)
#   up           start services that are not running; remember which we started
#   down         stop only what `up` started (a server recorded by pid and
#                start time, while that pid is still that process)
#   check        what the machine must have for `make test` (docs/pipeline.md,
#                "What the CI machine must have"): fails, naming each thing
#                missing and how to fix it, before anything is built or run
#   gobin        where install puts the Go tools (staticcheck, helm, ...)
#   check-ports  the ClickHouse ports are free or held by the expected servers
#                (up checks this first)
#   check-current CMD...
#                run CMD (tests against ClickHouse 26.7); if it fails and the
#                engine (chdb-listen) died, print the engine's fatal report
#
# Two ClickHouse servers: Debian's clickhouse-server 18.16 on 127.0.0.1:9000,
# and a current release (chDB's libchdb, ClickHouse 26.7, pinned in
# deploy/clickhouse-current) served by chdb-listen on 127.0.0.1:19000.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
STATE="$ROOT/build/test-env"
mkdir -p "$STATE"
# A runner without HOME (a service manager's environment, env -i): go then
# has no build cache (GOCACHE=off: "build cache is required") and no GOPATH,
# so every build and tool install failed, and GOBIN_DIR was /bin. HOME is
# then the user's home from the user database (the Makefile does the same).
if [ -z "${HOME:-}" ]; then
	HOME=$({ getent passwd "$(id -u)" || true; } | cut -d: -f6)
	export HOME
fi
# Where `go install` puts the Go tools: GOBIN when set (the tools were put
# there, and then looked for in GOPATH/bin), else the first GOPATH entry's bin.
GOBIN_DIR=$(go env GOBIN)
[ -n "$GOBIN_DIR" ] || GOBIN_DIR="$(go env GOPATH | cut -d: -f1)/bin"

APT_PACKAGES=(gcc libc6-dev clang llvm libbpf-dev bpftool clickhouse-server clickhouse-client docker-compose python3 python3-venv util-linux git systemd zookeeper btrfs-progs e2fsprogs)
# Installed without their recommendations: prometheus recommends
# prometheus-node-exporter, which the tests do not need.
APT_PACKAGES_NO_RECOMMENDS=(prometheus)
STATICCHECK_VERSION=v0.8.2
# helm renders deploy/helm/mcpwarden in deploy.TestHelmChart (Debian has no
# helm package; the Go module proxy has its source).
HELM_VERSION=v3.22.0
GOSDK_VERSION=v1.8.0

as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
		echo "test-env: need root for: $*" >&2; return 1; fi
}

# missing_apt PACKAGE... prints the packages that are not installed.
missing_apt() {
	local p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
	done
}

install_apt() {
	local missing norec
	missing=$(missing_apt "${APT_PACKAGES[@]}")
	norec=$(missing_apt "${APT_PACKAGES_NO_RECOMMENDS[@]}")
	[ -z "$missing$norec" ] && return 0
	echo "test-env: installing Debian packages:" $missing $norec
	as_root apt-get update -qq
	# shellcheck disable=SC2086 # word splitting of the package lists is meant
	[ -z "$missing" ] || as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
	# shellcheck disable=SC2086
	[ -z "$norec" ] || as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $norec >/dev/null
}

# npm_ci_pinned DIR WHAT [npm ci options]: installs DIR's package-lock.json
# once, again only when the lock file changes (.npmrc sets fund/audit off).
npm_ci_pinned() {
	local dir=$1 what=$2
	shift 2
	local mark="$dir/node_modules/.mcpwarden-installed"
	[ -f "$mark" ] && [ "$mark" -nt "$dir/package-lock.json" ] && return 0
	echo "test-env: installing $what from npm"
	(cd "$dir" && npm ci --loglevel=error "$@" >/dev/null)
	touch "$mark"
}

install_npm() {
	npm_ci_pinned "$ROOT/deploy/mcp-servers" "the pinned MCP servers"
	# Servers of online services, in their own tree (docs/compatibility.md).
	npm_ci_pinned "$ROOT/deploy/mcp-servers-online" "the pinned MCP servers of online services"
}

# The interop tests' real clients (conformance suite, Inspector CLI, the
# TypeScript SDKs), the stdio<->HTTP bridge, server-everything and Node 22
# (npm's node package fetches its binary in a preinstall script).
install_interop() { npm_ci_pinned "$ROOT/deploy/interop" "the interop clients and Node 22"; }

CH_CURRENT_DIR="$ROOT/deploy/clickhouse-current"
CH_CURRENT_BIN="$ROOT/build/clickhouse-current/chdb-listen"
CH_CURRENT_PORT=19000

install_clickhouse_current() {
	local lib="$CH_CURRENT_DIR/node_modules/@chdb/lib-linux-x64-gnu"
	# --ignore-scripts: the package is a prebuilt library; nothing may run at install.
	npm_ci_pinned "$CH_CURRENT_DIR" "the current ClickHouse release (chDB's libchdb)" --ignore-scripts
	if [ ! -x "$CH_CURRENT_BIN" ] || [ "$CH_CURRENT_DIR/chdb-listen.c" -nt "$CH_CURRENT_BIN" ]; then
		mkdir -p "$(dirname "$CH_CURRENT_BIN")"
		gcc -O2 -Wall -Wextra -Werror -o "$CH_CURRENT_BIN" "$CH_CURRENT_DIR/chdb-listen.c" \
			-L"$lib" -l:libchdb.so -Wl,-rpath,"$lib"
	fi
}

# Debian's own nats-server (2.9.10), for the test that runs deploy/nats on the
# distribution's server: the package is unpacked, not installed, so no
# service of it starts and takes a port the tests use.
NATS_DEBIAN_DIR="$ROOT/build/nats-server-debian"
install_nats_debian() {
	[ -x "$NATS_DEBIAN_DIR/usr/sbin/nats-server" ] && return 0
	echo "test-env: unpacking Debian's nats-server"
	local tmp
	tmp=$(mktemp -d)
	(cd "$tmp" && apt-get download nats-server >/dev/null 2>&1 || { as_root apt-get update -qq && apt-get download nats-server >/dev/null; })
	rm -rf "$NATS_DEBIAN_DIR"
	dpkg -x "$tmp"/nats-server_*.deb "$NATS_DEBIAN_DIR"
	rm -rf "$tmp"
}

install_go_tools() {
	if [ ! -x "$GOBIN_DIR/staticcheck" ]; then
		echo "test-env: installing staticcheck"
		go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
	fi
	if [ ! -x "$GOBIN_DIR/helm" ]; then
		echo "test-env: installing helm $HELM_VERSION"
		go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
	fi
	if [ ! -x "$GOBIN_DIR/everything-server" ]; then
		echo "test-env: installing go-sdk conformance everything-server"
		go install "github.com/modelcontextprotocol/go-sdk/conformance/everything-server@$GOSDK_VERSION"
	fi
}

mount_kernel_fs() {
	[ "$(id -u)" -eq 0 ] || return 0
	mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
	mountpoint -q /sys/kernel/security || mount -t securityfs securityfs /sys/kernel/security 2>/dev/null || true
}

# clickhouse_drop_test_dbs removes databases left by test processes that were
# killed before their cleanup ran (each test makes its own mcpw_test_*).
# Only those untouched for an hour: tests running right now keep theirs.
clickhouse_drop_test_dbs() {
	local db
	for db in $(clickhouse-client --query "SELECT database FROM system.tables WHERE database LIKE 'mcpw\\_test\\_%' GROUP BY database HAVING max(metadata_modification_time) < now() - 3600" 2>/dev/null); do
		clickhouse-client --query "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
	done
}

# port_holder PORT names the process that listens on PORT ("" when none).
# It never fails: with pipefail, grep finding no listener made the caller's
# assignment fail and set -e end `up` with status 1 and no word on a machine
# where nothing held the ports yet (a fresh CI machine: the official CI of
# 3badea1 stopped there after 50 s).
port_holder() {
	{ ss -ltnpH "sport = :$1" 2>/dev/null || true; } | { grep -o 'users:(("[^"]*"' || true; } | head -n 1 | cut -d'"' -f2
}

# check_ports: the tests' two ClickHouse ports are free (up starts the
# servers) or held by the server the tests expect; anything else on them is
# named before anything is started (tests against another server, or
# against no ClickHouse at all, fail one by one on its version). The holder
# is told by its process name; a ClickHouse server there must also report
# the expected version when it answers (a busy one that does not answer
# in time is left to the tests, which wait for it).
check_ports() {
	local bad=0 spec port comm want what holder v
	[ "$(id -u)" -eq 0 ] || return 0
	for spec in "9000 clickhouse-serv 18. Debian's clickhouse-server 18.16" "$CH_CURRENT_PORT chdb-listen 26. chdb-listen (ClickHouse 26.7)"; do
		read -r port comm want what <<<"$spec"
		holder=$(port_holder "$port")
		[ -n "$holder" ] || continue
		if [ "$holder" = "$comm" ]; then
			v=$(timeout 60 clickhouse-client --port "$port" --query 'SELECT version()' 2>/dev/null </dev/null || true)
			case "$v" in "" | "$want"*) continue ;; esac
			echo "test-env: port $port, where the tests expect $what, is held by a ClickHouse $v: stop it (ss -ltnp 'sport = :$port' names it), then run make test again" >&2
		else
			echo "test-env: port $port, where the tests expect $what, is held by $holder: stop it (ss -ltnp 'sport = :$port' names it), then run make test again" >&2
		fi
		bad=1
	done
	return "$bad"
}

# The servers up starts are recorded in $STATE/NAME.started as "PID START"
# (START: the process's start time in clock ticks since boot), and down
# stops a recorded server only while that pid is still the process up
# started: a pid alone, once its process is gone (a crash, a reboot, a
# checkout copied with its build/), may name an unrelated process that was
# given the same pid, which down used to kill.

# proc_start PID prints the start time of process PID ("" when there is
# none, or only its zombie).
proc_start() {
	{ sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null || true; } | awk '$1 != "Z" { print $20 }'
}

# proc_runs PID START: process PID, started at START, runs: itself, or, once
# it is a zombie, any of its threads (a multi-threaded server's leader turns
# zombie while its other threads still exit, holding its descriptors, its
# listening port among them, until the last one is gone).
proc_runs() {
	[ -n "$2" ] || return 1
	[ "$(proc_start "$1")" = "$2" ] && return 0
	[ "$({ sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null || true; } | awk '{ print $20 }')" = "$2" ] || return 1
	[ "$({ ls "/proc/$1/task" 2>/dev/null || true; } | wc -l)" -gt 1 ]
}

# record_started NAME PID
record_started() { echo "$2 $(proc_start "$2")" >"$STATE/$1.started"; }

# started_pid NAME prints the pid of the server up started as NAME while it
# runs ("" when none was started, or it is gone).
started_pid() {
	local f="$STATE/$1.started" pid="" start="" pidfile
	[ -f "$f" ] || return 0
	read -r pid start _ <"$f" || true
	case "$pid" in
	/*) # an earlier test-env.sh recorded clickhouse-server's pid file
		pidfile=$pid pid="" start=""
		[ -f "$pidfile" ] && read -r pid _ <"$pidfile"
		case "$pid" in '' | *[!0-9]*) return 0 ;; esac
		[ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" = clickhouse-serv ] && echo "$pid"
		return 0 ;;
	'' | *[!0-9]*) return 0 ;;
	esac
	[ -n "$start" ] && [ "$(proc_start "$pid")" = "$start" ] && echo "$pid"
	return 0
}

# stop_started NAME stops the server up started as NAME, if it still runs
# (SIGTERM, then SIGKILL after 2 minutes), and forgets it.
stop_started() {
	local pid start
	pid=$(started_pid "$1")
	if [ -n "$pid" ]; then
		start=$(proc_start "$pid")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 240); do
			proc_runs "$pid" "$start" || break
			sleep 0.5
		done
		if proc_runs "$pid" "$start"; then
			echo "test-env: $1 (pid $pid) did not stop within 2 minutes of SIGTERM: killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$STATE/$1.started"
}

# Servers this invocation of up started: a failing up stops these (and only
# these) before it exits, so nothing it started is left behind unrecorded
# or running for a run that never comes.
STARTED_NOW=()

CH_DATA=/var/lib/clickhouse
CH_LOG=/var/log/clickhouse-server

clickhouse_up() {
	command -v clickhouse-server >/dev/null || return 0
	[ "$(id -u)" -eq 0 ] || return 0
	if clickhouse-client --query 'SELECT 1' >/dev/null 2>&1; then clickhouse_drop_test_dbs; return 0; fi
	echo "test-env: starting clickhouse-server"
	local user=root owner pidfile=/var/run/clickhouse-server/mcpwarden-test.pid pid=""
	id clickhouse >/dev/null 2>&1 && user=clickhouse
	# Debian's package makes the log directory (postinst) and the data
	# directory (the user's home); a machine may lack either (removed,
	# a tmpfs), and clickhouse-server then exits at once.
	mkdir -p /var/run/clickhouse-server "$CH_LOG" "$CH_DATA"
	chown "$user:" /var/run/clickhouse-server "$CH_LOG"
	owner=$(stat -c %U "$CH_DATA")
	if [ "$owner" != "$user" ]; then
		if [ -z "$(ls -A "$CH_DATA")" ]; then
			chown "$user:" "$CH_DATA"
		else
			echo "test-env: $CH_DATA belongs to $owner, not to $user, who runs clickhouse-server: it cannot use its data (chown -R $user: $CH_DATA, or remove it for an empty one)" >&2
			return 1
		fi
	fi
	rm -f "$pidfile"
	runuser -u "$user" -- clickhouse-server --config-file=/etc/clickhouse-server/config.xml --daemon --pid-file="$pidfile"
	# Up to 5 minutes (a loaded machine), while the server lives. The
	# server writes its pid file as it starts; it is recorded before up
	# goes on (it may answer before the file shows here).
	for _ in $(seq 1 600); do
		if [ -z "$pid" ] && [ -s "$pidfile" ]; then
			read -r pid _ <"$pidfile" || true
			record_started clickhouse "$pid"
			STARTED_NOW+=(clickhouse)
		fi
		if [ -n "$pid" ] && clickhouse-client --query 'SELECT 1' >/dev/null 2>&1; then
			clickhouse_drop_test_dbs
			return 0
		fi
		if [ -n "$pid" ] && [ -z "$(started_pid clickhouse)" ]; then
			echo "test-env: clickhouse-server exited while starting; it logged last ($CH_LOG/clickhouse-server.err.log):" >&2
			tail -n 20 "$CH_LOG/clickhouse-server.err.log" >&2 2>/dev/null || true
			return 1
		fi
		sleep 0.5
	done
	echo "test-env: clickhouse-server did not answer within 5 minutes; see $CH_LOG/clickhouse-server.err.log" >&2
	return 1
}

clickhouse_current_answers() {
	(exec 3<>/dev/tcp/127.0.0.1/$CH_CURRENT_PORT) 2>/dev/null
}

clickhouse_current_up() {
	if [ ! -x "$CH_CURRENT_BIN" ]; then
		echo "test-env: $CH_CURRENT_BIN is not built: run scripts/test-env.sh install (make deps)" >&2
		return 1
	fi
	clickhouse_current_answers && return 0
	echo "test-env: starting the current ClickHouse release (chdb-listen on 127.0.0.1:$CH_CURRENT_PORT)"
	local data="$STATE/clickhouse-current"
	rm -rf "$data"
	mkdir -p "$data"
	setsid "$CH_CURRENT_BIN" --path="$data/" --tcp_port=$CH_CURRENT_PORT \
		--logger.log="$data/server.log" --log-level=warning </dev/null >"$data/stdout.log" 2>&1 &
	record_started clickhouse-current "$!"
	STARTED_NOW+=(clickhouse-current)
	# Up to 5 minutes (a loaded machine), while the server lives.
	for _ in $(seq 1 600); do
		clickhouse_current_answers && return 0
		[ -n "$(started_pid clickhouse-current)" ] || break
		sleep 0.5
	done
	echo "test-env: chdb-listen did not answer on 127.0.0.1:$CH_CURRENT_PORT; see $data/server.log and $data/stdout.log" >&2
	return 1
}

clickhouse_current_down() { stop_started clickhouse-current; }

clickhouse_current_crashed() {
	[ -f "$STATE/clickhouse-current.started" ] && [ -z "$(started_pid clickhouse-current)" ]
}

# clickhouse_current_report prints what a crashed chdb-listen logged last and
# keeps its log, since the next start clears the data directory.
clickhouse_current_report() {
	local data="$STATE/clickhouse-current"
	echo "test-env: chdb-listen (ClickHouse 26.7) died during the tests; what it logged last:" >&2
	if ! grep -m 60 '<Fatal>' "$data/server.log" >&2; then tail -n 20 "$data/server.log" >&2 || true; fi
	tail -n 5 "$data/stdout.log" >&2 || true
	cp "$data/server.log" "$STATE/clickhouse-current.crash.log" 2>/dev/null || true
}

# check_current CMD... runs tests against ClickHouse 26.7 (chDB's engine
# behind clickhouse-local). If they fail and the engine itself died, its
# fatal report is printed and its log kept: a crash fails the run, there is
# no second try.
check_current() {
	local rc=0
	"$@" || rc=$?
	[ "$rc" -eq 0 ] && return 0
	if clickhouse_current_crashed; then
		clickhouse_current_report
		echo "test-env: the failures above follow a crash of the ClickHouse 26.7 test engine (report above; log kept in $STATE/clickhouse-current.crash.log)" >&2
	fi
	return "$rc"
}

clickhouse_down() { stop_started clickhouse; }

# up_failed stops what this up started, when it fails.
up_failed() {
	local rc=$? name
	[ "$rc" -ne 0 ] || return 0
	for name in "${STARTED_NOW[@]}"; do
		echo "test-env: up failed: stopping the $name it started" >&2
		stop_started "$name"
	done
	exit "$rc"
}

# What `make test` needs of the machine, checked up front (docs/pipeline.md,
# "What the CI machine must have"): each missing thing is named with how to
# fix it, and the run stops before anything is built (fail closed: under
# CI=true a test missing any of this fails, and a run that fails an hour in
# says less). MCPWARDEN_CHECK_MIN_FREE_GIB / MCPWARDEN_CHECK_MIN_TMP_GIB set
# the free-disk floors.
CHECK_MIN_FREE_GIB=${MCPWARDEN_CHECK_MIN_FREE_GIB:-4}
CHECK_MIN_TMP_GIB=${MCPWARDEN_CHECK_MIN_TMP_GIB:-1}
check_failed=0
check_fail() { echo "test-env check: $*" >&2; check_failed=1; }

# free_gib DIR prints the GiB free (for root) on DIR's file system.
free_gib() { df -P -k "$1" 2>/dev/null | awk 'NR==2 { printf "%d", $4 / 1048576 }' || true; }

check_host() {
	local ci=0 h tmp gocache free
	case "${CI:-}" in true | 1) ci=1 ;; esac
	if [ "$(id -u)" -ne 0 ]; then
		# Outside CI, tests that need root skip, saying so; under CI they fail.
		[ "$ci" -eq 1 ] && check_fail "not root (uid $(id -u)): CI runs every test, and the kernel tests (BPF, Landlock, namespaces, cgroups, audit) need root: run .ci/run as root"
		[ "$ci" -eq 1 ] || echo "test-env check: not root: the tests that need root will skip" >&2
	fi
	# The daemon refuses a host name holding anything but letters, digits,
	# '.' and '-' (schema.CheckHost: with '_', web_1 would publish as web.1):
	# every test that starts a daemon would fail.
	h=$(uname -n)
	if ! printf '%s' "$h" | grep -Eq '^[A-Za-z0-9.-]{1,253}$'; then
		check_fail "the host name \"$h\" holds a character other than letters, digits, '.' and '-': the daemon refuses to start on it (schema.CheckHost), so every daemon test fails; rename the host (hostnamectl set-hostname ${h//_/-})"
	fi
	# IPv6 loopback: the embedded NATS and the local-server owner check are
	# tested on ::1 as well as 127.0.0.1.
	if ! grep -q '^00000000000000000000000000000001 ' /proc/net/if_inet6 2>/dev/null; then
		check_fail "no IPv6 loopback (::1 is not on lo): tests of the embedded NATS and of the local server check listen on ::1; enable IPv6 on lo (sysctl -w net.ipv6.conf.lo.disable_ipv6=0 net.ipv6.conf.all.disable_ipv6=0; not ipv6.disable=1 on the kernel command line)"
	fi
	# Free disk: the race-enabled test binaries, the go build cache, the
	# services' data and the tests' temporary directories. The embedded NATS
	# stores of the tests are capped (natstest.StoreBytes, fitted to the disk
	# in the daemon), so this is what the run writes, not a share of it.
	gocache=$(go env GOCACHE 2>/dev/null || true)
	case "$gocache" in
	/*) mkdir -p "$gocache" 2>/dev/null || true ;;
	*)
		check_fail "go has no build cache (GOCACHE=${gocache:-unset}; HOME is ${HOME:-unset}): set HOME to a home directory, or GOCACHE to a directory"
		gocache=$ROOT ;;
	esac
	for dir in "$ROOT" "$gocache"; do
		free=$(free_gib "$dir")
		if [ -n "$free" ] && [ "$free" -lt "$CHECK_MIN_FREE_GIB" ]; then
			check_fail "$dir has $free GiB free, make test needs $CHECK_MIN_FREE_GIB GiB (the go build cache with the race detector, test binaries, ClickHouse data): free some, or move GOCACHE elsewhere"
		fi
	done
	tmp=${TMPDIR:-/tmp}
	# Tests bind unix sockets of their own (at most 107 bytes of path) in
	# t.TempDir()s under TMPDIR (the product's approval and daemon sockets
	# take any length since session 11, the tests' fixtures do not): with
	# a TMPDIR of 18 bytes launcher tests failed; 9 bytes pass.
	if [ "${#tmp}" -gt 9 ]; then
		check_fail "TMPDIR ($tmp) is ${#tmp} bytes long: tests put unix sockets (at most 107 bytes of path) in directories under it; use a TMPDIR of at most 9 bytes (unset it for /tmp)"
	fi
	# Non-root launchers in the tests make their run's temporary directory
	# in TMPDIR, as their own user.
	if [ ! -d "$tmp" ]; then
		check_fail "TMPDIR ($tmp) is not a directory: make it (mode 1777), or unset TMPDIR for /tmp"
	elif [ "$(stat -c %a "$tmp")" != 1777 ]; then
		check_fail "TMPDIR ($tmp) has mode $(stat -c %a "$tmp"), not 1777: the tests' non-root launchers make their run's temporary directory in it (chmod 1777 $tmp, or unset TMPDIR for /tmp)"
	fi
	free=$(free_gib "$tmp")
	if [ -n "$free" ] && [ "$free" -lt "$CHECK_MIN_TMP_GIB" ]; then
		check_fail "TMPDIR ($tmp) has $free GiB free, the tests' temporary directories need $CHECK_MIN_TMP_GIB GiB: free some, or point TMPDIR at a larger file system"
	fi
	[ "$(id -u)" -eq 0 ] || return 0
	# Kernel features the fence and the daemon are tested on (securityfs,
	# where the LSMs are listed, is mounted as up mounts it).
	mount_kernel_fs
	if ! grep -qw landlock /sys/kernel/security/lsm 2>/dev/null; then
		check_fail "Landlock is not an active LSM (/sys/kernel/security/lsm: $(cat /sys/kernel/security/lsm 2>/dev/null || echo unreadable)): boot with lsm=landlock,... (a kernel of 6.7 or later)"
	fi
	if ! grep -qw cgroup2 /proc/mounts; then
		check_fail "no cgroup v2 hierarchy is mounted: the launcher's run groups and the daemon's cgroup ids need one (mount -t cgroup2 none /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host)"
	fi
	# A launcher that is not root fences its server in a user namespace of
	# its own: the tests of non-root launchers need unprivileged user
	# namespaces that can mount (Ubuntu 24.04 restricts them by AppArmor).
	if ! setpriv --reuid=65534 --regid=65534 --clear-groups -- unshare --user --map-root-user --mount true 2>/dev/null; then
		check_fail "unprivileged user namespaces are restricted (uid 65534 cannot unshare --user --map-root-user --mount): the tests of non-root launchers need them; sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 24.04+), kernel.unprivileged_userns_clone=1 (Debian's older kernels), user.max_user_namespaces above 0"
	fi
}

case "${1:-}" in
install) install_apt; install_npm; install_interop; install_clickhouse_current; install_nats_debian; install_go_tools ;;
install-npm) install_npm ;;
check) check_host; [ "$check_failed" -eq 0 ] || { echo "test-env check: the machine lacks what make test needs (above; docs/pipeline.md, \"What the CI machine must have\")" >&2; exit 1; } ;;
check-ports) check_ports ;;
gobin) echo "$GOBIN_DIR" ;;
up) trap up_failed EXIT; check_ports; mount_kernel_fs; clickhouse_up; clickhouse_current_up ;;
down) clickhouse_down; clickhouse_current_down ;;
check-current) shift; check_current "$@" ;;
*) echo "usage: $0 install|install-npm|check|check-ports|gobin|up|down|check-current CMD..." >&2; exit 64 ;;
esac
