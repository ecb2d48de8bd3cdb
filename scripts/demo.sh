#!/usr/bin/env bash
# mcpwarden demo (`make demo`): the whole loop on one host, on embedded
# defaults, with the real @modelcontextprotocol/server-filesystem from
# deploy/mcp-servers and the TypeScript SDK's client (scripts/demo-client.mjs)
# starting it from a Claude Desktop configuration.
#
#  1. `mcpwarden wrap` rewrites the client configuration: the server's entry
#     becomes `mcpwarden run --scope FILE -- node ...`, with a starting scope
#     from a tools/list probe; the demo narrows the scope as a reviewer would.
#  2. An allowed read inside the scope, and an escape outside it denied by
#     the protocol proxy, then again with the proxy off (the kernel's fence).
#  As root, besides:
#  3. the daemon (eBPF, embedded NATS with JetStream) runs, and every run
#     registers with it; an audit-mode canary (no fence, no proxy) reads the
#     file outside the scope, and its escape is an ESCAPE finding in
#     `mcpwarden events`;
#  4. where a ClickHouse answers (MCPWARDEN_DEMO_CLICKHOUSE, default
#     clickhouse://127.0.0.1:9000/mcpwarden_demo_PID), a collector moves the
#     events there and the demo ends with `query runs` and `query findings`.
# As an ordinary user it runs 1 and 2 and says what root adds.
#
# Everything lives in one temporary directory, with its own configuration
# file (MCPWARDEN_CONFIG), daemon socket, state directory and NATS port: the
# host's own configuration, daemon and NATS are not touched. Every process
# it starts is stopped, and the directory removed, when it ends; so is the
# demo's own database (with clickhouse-client; never one named by
# MCPWARDEN_DEMO_CLICKHOUSE).
#
# Builds nothing: `make demo` builds bin/ and installs the pinned npm
# servers first. MCPWARDEN_BIN names another mcpwarden (with
# mcpwarden-pipeline next to it). MCPWARDEN_DEMO_PROBE_TIMEOUT is how long
# wrap's probe waits for each answer of the server (wrap's default, 30s;
# the tests give minutes: on a loaded machine the server's first answer
# under the fence took longer).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=${MCPWARDEN_BIN:-$ROOT/bin/mcpwarden}
PROBE_TIMEOUT=${MCPWARDEN_DEMO_PROBE_TIMEOUT:-30s}
SERVERS="$ROOT/deploy/mcp-servers/node_modules"
FS_SERVER="$SERVERS/@modelcontextprotocol/server-filesystem/dist/index.js"
CLIENT="$ROOT/scripts/demo-client.mjs"

die() { echo "demo: $*" >&2; exit 1; }
say() { printf '%s\n' "$*"; }
hr() { printf '%s\n' "------------------------------------------------------------------------"; }

[ -x "$BIN" ] || die "$BIN is missing; run 'make demo' (or 'make build')"
[ -x "$(dirname "$BIN")/mcpwarden-pipeline" ] || die "$(dirname "$BIN")/mcpwarden-pipeline is missing; run 'make build'"
[ -f "$FS_SERVER" ] && [ -d "$SERVERS/@modelcontextprotocol/sdk" ] ||
	die "the pinned MCP servers are not installed; run 'scripts/test-env.sh install-npm'"
NODE=$(command -v node) || die "node is not installed (Debian/Ubuntu: apt-get install nodejs)"

# The demo's settings come from its own configuration file alone.
for v in $(compgen -e); do
	case $v in MCPWARDEN_CONFIG | MCPWARDEN_STATE_DIR | MCPWARDEN_DAEMON_SOCKET | MCPWARDEN_PATH_KEY | MCPWARDEN_NATS_* | MCPWARDEN_CLICKHOUSE_DSN) unset "$v" ;; esac
done

AS_ROOT=0
[ "$(id -u)" = 0 ] && AS_ROOT=1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mcpwarden-demo.XXXXXX")
# The runs' approval sockets live in STATE_DIR/approvals/RUN_ID.sock, and a
# unix socket's path has at most 107 bytes.
if [ $((${#WORK} + 6 + 11 + 37)) -gt 107 ]; then
	rmdir "$WORK"
	die "TMPDIR (${TMPDIR:-/tmp}) is too long for the runs' socket paths; run with TMPDIR=/tmp"
fi
PIDS=()
DB_DROP=""
cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [ -n "$DB_DROP" ]; then eval "$DB_DROP" >/dev/null 2>&1 || echo "demo: could not drop the demo database: $DB_DROP" >&2; fi
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for SECONDS WHAT CMD...: until CMD succeeds (generous: the machine
# may be loaded).
wait_for() {
	local secs=$1 what=$2; shift 2
	local end=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$end" ] || return 1
		sleep 1
	done
}

free_port() { "$NODE" -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

WS="$WORK/workspace"
mkdir -p "$WS/project/docs" "$WS/private" "$WORK/client" "$WORK/scopes" "$WORK/state"
echo "Quarterly plan: ship the fence." >"$WS/project/docs/plan.txt"
echo "api_key=sk-DEMO-SECRET-0000" >"$WS/private/credentials.txt"
CFG="$WORK/client/claude_desktop_config.json"
cat >"$CFG" <<JSON
{
  "mcpServers": {
    "filesystem": {
      "command": "$NODE",
      "args": ["$FS_SERVER", "$WS"]
    }
  }
}
JSON

# One configuration file holds what every command needs.
export MCPWARDEN_CONFIG="$WORK/config.json"
if [ "$AS_ROOT" = 1 ]; then
	NATS_PORT=$(free_port)
	NATS_URL="nats://127.0.0.1:$NATS_PORT"
	DSN=${MCPWARDEN_DEMO_CLICKHOUSE:-clickhouse://127.0.0.1:9000/mcpwarden_demo_$$}
	cat >"$MCPWARDEN_CONFIG" <<JSON
{
  "state_dir": "$WORK/state",
  "daemon_socket": "$WORK/run/daemon.sock",
  "nats": {"url": "$NATS_URL"},
  "clickhouse_dsn": "$DSN"
}
JSON
else
	cat >"$MCPWARDEN_CONFIG" <<JSON
{
  "state_dir": "$WORK/state",
  "daemon_socket": "off"
}
JSON
fi
chmod 0600 "$MCPWARDEN_CONFIG"

say "mcpwarden demo ($([ "$AS_ROOT" = 1 ] && echo "as root" || echo "as $(id -un), not root"))"
hr
say "Workspace: $WS"
say "  project/docs/plan.txt     the project"
say "  private/credentials.txt   a secret next to it"
say "Client configuration ($CFG): the filesystem server, given the whole workspace:"
sed 's/^/    /' "$CFG"
say "Host configuration (MCPWARDEN_CONFIG=$MCPWARDEN_CONFIG; 'mcpwarden config show' explains it):"
sed 's/^/    /' "$MCPWARDEN_CONFIG"
hr

if [ "$AS_ROOT" = 1 ]; then
	say "0) The daemon: eBPF probes, the registration socket, an embedded NATS server"
	say "   with JetStream on 127.0.0.1:$NATS_PORT (the events of every run on this host)"
	# nats.url in the file is where the other commands find NATS; the
	# daemon serves it itself (--nats "" keeps it embedded).
	"$BIN" daemon --nats "" --nats-listen "127.0.0.1:$NATS_PORT" --crosscheck-window 10s >"$WORK/daemon.log" 2>&1 &
	PIDS+=($!)
	wait_for 180 "the daemon" grep -q "daemon started" "$WORK/daemon.log" ||
		{ cat "$WORK/daemon.log" >&2; die "the daemon did not start"; }
	say "   $(grep -o 'hooks=[^ ]*' "$WORK/daemon.log" | head -1) $(grep -o 'landlock_abi=[^ ]*' "$WORK/daemon.log" | head -1)"
	"$BIN" config show | grep -A1 "^daemon for" | sed 's/^/   /'
	CLICKHOUSE=0
	if out=$("$BIN" collect --migrate-only 2>&1); then
		CLICKHOUSE=1
		say "   A ClickHouse answers at $DSN: a collector moves the events there."
		"$BIN" collect >"$WORK/collect.log" 2>&1 &
		PIDS+=($!)
		DB=${DSN##*/}
		DB=${DB%%\?*}
		if [ -z "${MCPWARDEN_DEMO_CLICKHOUSE:-}" ] && command -v clickhouse-client >/dev/null; then
			HP=${DSN#clickhouse://}
			HP=${HP%%/*}
			DB_DROP="clickhouse-client --host ${HP%:*} --port ${HP##*:} --query 'DROP DATABASE IF EXISTS \`$DB\`'"
		fi
		wait_for 180 "the collector" grep -q "msg=collecting" "$WORK/collect.log" ||
			{ cat "$WORK/collect.log" >&2; die "the collector did not start"; }
	else
		say "   No ClickHouse at $DSN ($(printf '%s' "$out" | tail -1)): the demo ends with 'events';"
		say "   install one (apt-get install clickhouse-server) or set MCPWARDEN_DEMO_CLICKHOUSE to add 'query'."
	fi
	hr
fi

say "1) mcpwarden wrap: every stdio server of the file runs under 'mcpwarden run',"
say "   with a starting scope from a tools/list probe of the server under the fence"
"$BIN" wrap --dry-run --probe-timeout "$PROBE_TIMEOUT" --base "$WS" --scope-dir "$WORK/scopes" "$CFG" | sed 's/^/    /'
"$BIN" wrap --probe-timeout "$PROBE_TIMEOUT" --base "$WS" --scope-dir "$WORK/scopes" "$CFG" >"$WORK/wrap.out" 2>&1 ||
	{ cat "$WORK/wrap.out" >&2; die "wrap failed"; }
SCOPE=$("$NODE" -e '
const a = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).mcpServers.filesystem.args;
console.log(a[0] === "run" && a.indexOf("--scope") > 0 ? a[a.indexOf("--scope") + 1] : "");' "$CFG")
[ -f "$SCOPE" ] || { cat "$WORK/wrap.out" >&2; die "the wrapped entry names no scope file"; }
say "   The starting scope grants what the server was given (the whole workspace), read-only."
say "   A reviewer narrows it to the project ($SCOPE):"
"$NODE" -e '
const fs = require("fs"), f = process.argv[1];
const s = JSON.parse(fs.readFileSync(f, "utf8"));
s.allowed_paths = ["project"];
fs.writeFileSync(f, JSON.stringify(s, null, 2) + "\n", { mode: 0o600 });' "$SCOPE"
sed 's/^/    /' "$SCOPE"
hr

# calls FILE TOOL PATH...: one read_text_file call a path.
calls() {
	local f=$1; shift
	"$NODE" -e 'console.log(JSON.stringify(process.argv.slice(1).map((p) => ["read_text_file", { path: p }])))' "$@" >"$f"
}
calls "$WORK/reads.json" "$WS/project/docs/plan.txt" "$WS/private/credentials.txt"

# session NAME [RUN_FLAG...]: the client starts the wrapped entry and reads
# both files; ANSWERS holds its JSON lines.
session() {
	local name=$1; shift
	if ! "$NODE" "$CLIENT" "$CFG" filesystem "$WORK/reads.json" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"; then
		cat "$WORK/$name.err" >&2
		die "the client's session ($name) failed"
	fi
	INSIDE=$(sed -n 1p "$WORK/$name.out")
	OUTSIDE=$(sed -n 2p "$WORK/$name.out")
	# The session's run: the last launch record of the local audit log.
	RUN_ID=$("$NODE" -e '
const ids = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)
  .map((l) => JSON.parse(l)).filter((e) => e.kind === "launch" && e.run_id).map((e) => e.run_id);
console.log(ids.length ? ids[ids.length - 1] : "");' "$WORK/state/audit.jsonl")
}
field() { "$NODE" -e 'const l = JSON.parse(process.argv[1]); console.log(process.argv[2] === "ok" ? String(l.ok) : l.text.split("\n")[0].slice(0, 160))' "$1" "$2"; }
check_inside() {
	[ "$(field "$INSIDE" ok)" = true ] && case $INSIDE in *"Quarterly plan"*) true ;; *) false ;; esac ||
		die "the read inside the scope failed: $INSIDE"
	say "  [allowed] read project/docs/plan.txt -> \"$(field "$INSIDE" text)\""
}
check_denied() {
	case $OUTSIDE in *SECRET*) die "ESCAPE: the secret reached the client: $OUTSIDE" ;; esac
	[ "$(field "$OUTSIDE" ok)" = false ] || die "the read outside the scope was not refused: $OUTSIDE"
	say "  [denied]  read private/credentials.txt -> $1:"
	say "            $(field "$OUTSIDE" text)"
}

say "2) The client (the TypeScript SDK) starts the wrapped entry: fence + protocol proxy"
session enforce
check_inside
check_denied "refused by the proxy before it reached the server"
say "   The same with the proxy off (--proxy=false): only the kernel's fence stands"
session kernel --proxy=false
check_inside
check_denied "the server tried; the fence (its own mount namespace and Landlock) said no"
hr

if [ "$AS_ROOT" != 1 ]; then
	say "The proxy's decision records in the local audit log ($WORK/state/audit.jsonl;"
	say "paths only as keyed hashes):"
	"$NODE" -e '
for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)) {
  const e = JSON.parse(l);
  if (e.kind !== "decision") continue;
  const d = e.decision;
  console.log(`    run=${e.run_id.slice(0, 8)} ${d.tool} ${d.action_class} ${d.decision}${d.error_code ? " " + d.error_code : ""} path=${(d.path_hashes || []).map((h) => h.slice(0, 12)).join(",")}`);
}' "$WORK/state/audit.jsonl"
	if grep -qF "$WS" "$WORK/state/audit.jsonl"; then die "an audit record holds a workspace path in clear"; fi
	hr
	say "As root, 'make demo' also runs the daemon (eBPF probes and an embedded NATS"
	say "server): every run registers with it, an audit-mode canary's read outside the"
	say "scope becomes an ESCAPE finding in 'mcpwarden events', and with a ClickHouse"
	say "installed it ends with 'mcpwarden query runs' and 'mcpwarden query findings'."
	say "Done: the allowed read worked; the escape was denied by the proxy and by the kernel."
	exit 0
fi

say "3) A canary: the operator rolls the scope out in audit mode first (--mode audit:"
say "   no fence; --proxy=false: no proxy), to learn what enforce mode would deny"
session canary --mode audit --proxy=false
check_inside
case $OUTSIDE in
*SECRET*) say "  [escape]  read private/credentials.txt -> the canary read it (audit mode denies nothing; not shown)" ;;
*) die "the canary's read outside the scope did not succeed: $OUTSIDE" ;;
esac
[ -n "$RUN_ID" ] || die "the canary's run has no launch record in $WORK/state/audit.jsonl"
say "   The daemon saw it: mcpwarden events --kind finding (run $RUN_ID)"
escape_found() { "$BIN" events --kind finding --run "$RUN_ID" --json 2>/dev/null | grep -q '"ESCAPE"'; }
wait_for 180 "the ESCAPE finding" escape_found ||
	{ "$BIN" events --run "$RUN_ID" >&2 || true; cat "$WORK/daemon.log" >&2; die "no ESCAPE finding for the canary's run"; }
"$BIN" events --kind finding --run "$RUN_ID" | sed 's/^/    /'
if "$BIN" events --json | grep -qF "$WS"; then die "an event holds a workspace path in clear"; fi
hr

if [ "$CLICKHOUSE" = 1 ]; then
	say "4) In ClickHouse ($DSN): mcpwarden query runs, then query findings"
	in_store() { "$BIN" query findings --run "$RUN_ID" --json | grep -q ESCAPE; }
	wait_for 180 "the finding in ClickHouse" in_store ||
		{ cat "$WORK/collect.log" >&2; die "the canary's finding did not reach ClickHouse"; }
	"$BIN" query runs | sed 's/^/    /'
	"$BIN" query findings | sed 's/^/    /'
	hr
fi
say "Done: the allowed read worked; the escape was denied by the proxy and by the"
say "kernel; the canary's escape is an ESCAPE finding$([ "$CLICKHOUSE" = 1 ] && echo ", in events and in ClickHouse" || echo " in events")."
