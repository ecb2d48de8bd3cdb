#!/usr/bin/env bash
# mcpwarden demo: the real @modelcontextprotocol/server-filesystem behind
# `mcpwarden run`. A short scripted MCP session reads a file inside the scope
# (allowed), then tries a file the server itself would happily serve but the
# scope does not grant (denied), once with the protocol proxy in front and
# once with the proxy switched off, so that only the kernel's Landlock fence
# stands in the way. Then it prints the audit records.
#
# Builds nothing: `make demo` builds bin/mcpwarden and installs the pinned
# npm server first. Works as root and as an ordinary user.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN="$ROOT/bin/mcpwarden"
FS_SERVER="$ROOT/deploy/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"

die() { echo "demo: $*" >&2; exit 1; }
[ -x "$BIN" ] || die "$BIN is missing; run 'make demo' (or 'make build')"
[ -f "$FS_SERVER" ] || die "the filesystem server is not installed; run 'scripts/test-env.sh install-npm'"
command -v node >/dev/null || die "node is not installed (Debian/Ubuntu: apt-get install nodejs)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mcpwarden-demo.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
BASE="$WORK/base"
mkdir -p "$BASE/project/docs" "$BASE/private"
echo "Quarterly plan: ship the fence." > "$BASE/project/docs/plan.txt"
echo "api_key=sk-DEMO-SECRET-0000" > "$BASE/private/credentials.txt"
AUDIT="$WORK/audit.jsonl"
cat > "$WORK/scope.json" <<JSON
{
  "scope_id": "demo-docs-read",
  "allowed_paths": ["project/docs"],
  "resource_refs": [],
  "access_mode": "read",
  "tool_allowlist": ["read_text_file", "list_allowed_directories"],
  "approval": "none",
  "expires_after_minutes": 15
}
JSON

say() { printf '%s\n' "$*"; }
hr() { printf '%s\n' "------------------------------------------------------------------------"; }

# session NAME [run flags...]: one MCP session; sets INSIDE and OUTSIDE to
# the server's answers for the two reads.
session() {
	local name=$1; shift
	local stderr="$WORK/$name.stderr"
	coproc MW { "$BIN" run --scope "$WORK/scope.json" --base "$BASE" --audit-log "$AUDIT" --state-dir "$WORK/state" "$@" \
		-- node "$FS_SERVER" "$BASE" 2>"$stderr"; }
	local in=${MW[1]} out=${MW[0]} pid=$MW_PID
	send() { printf '%s\n' "$1" >&"$in"; }
	recv() { # recv ID: the response line with that id
		local line
		while IFS= read -r -t 30 line <&"$out"; do
			case $line in *"\"id\":$1,"* | *"\"id\":$1}"*) printf '%s' "$line"; return 0 ;; esac
		done
		echo "demo: no answer for request $1; server stderr:" >&2; cat "$stderr" >&2; return 1
	}
	send '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mcpwarden-demo","version":"1"}}}'
	recv 1 >/dev/null
	send '{"jsonrpc":"2.0","method":"notifications/initialized"}'
	send "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"read_text_file\",\"arguments\":{\"path\":\"$BASE/project/docs/plan.txt\"}}}"
	INSIDE=$(recv 2)
	send "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"read_text_file\",\"arguments\":{\"path\":\"$BASE/private/credentials.txt\"}}}"
	OUTSIDE=$(recv 3)
	exec {in}>&-
	wait "$pid" || true
}

check_inside() {
	case $INSIDE in
	*"Quarterly plan"*) say "  [allowed] read project/docs/plan.txt -> \"Quarterly plan: ship the fence.\"" ;;
	*) die "the read inside the scope failed: $INSIDE" ;;
	esac
}

say "mcpwarden demo"
hr
say "Workspace (the approved base): $BASE"
say "  project/docs/plan.txt     inside the scope (allowed_paths: [\"project/docs\"], read-only)"
say "  private/credentials.txt   outside the scope, but inside the directory the server was given"
say "Server: node $(basename "$(dirname "$(dirname "$FS_SERVER")")")/dist/index.js $BASE  (it believes it may read all of the base)"
hr

say "1) Default: mcpwarden run (Landlock fence + protocol proxy)"
session proxied
check_inside
case $OUTSIDE in
*SECRET*) die "ESCAPE: the secret was returned: $OUTSIDE" ;;
*'"error"'* | *'"isError":true'*) say "  [denied]  read private/credentials.txt -> refused before it reached the server:"
	say "            $(printf '%s' "$OUTSIDE" | grep -oE '"text":"([^"\\]|\\.)*"' | head -1)" ;;
*) die "unexpected answer for the read outside the scope: $OUTSIDE" ;;
esac
hr

say "2) Proxy off (--proxy=false): bytes relayed unchanged, only the kernel fence stands"
session relayed --proxy=false
check_inside
case $OUTSIDE in
*SECRET*) die "ESCAPE: the secret was returned: $OUTSIDE" ;;
*EACCES*) say "  [denied]  read private/credentials.txt -> the server tried, and the kernel said no:"
	say "            $(printf '%s' "$OUTSIDE" | grep -o '"text":"[^"]*"' | head -1)" ;;
*) die "unexpected answer for the read outside the scope: $OUTSIDE" ;;
esac
hr

say "Audit records ($AUDIT): launch records for both runs, and the proxy's"
say "decision records; paths appear only as keyed hashes, never in clear."
cat "$AUDIT"
hr
if grep -q "$BASE" "$AUDIT"; then die "an audit record contains a workspace path"; fi
say "Done: the allowed read worked, the escape was denied both by the proxy and by the kernel."
