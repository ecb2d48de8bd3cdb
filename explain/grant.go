package explain

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mcpwarden/mcpwarden/crosscheck"
	"github.com/mcpwarden/mcpwarden/launcher/runtimeprofile"
	"github.com/mcpwarden/mcpwarden/schema"
)

// grant says what would allow the item's path (or why nothing should).
func (r *run) grant(it *Item, candidates int) string {
	if it.Path == "" {
		return fmt.Sprintf("the path is none of the %d candidates hashed (the scope's trees%s, the runtime profile%s, system paths, the run's /proc entries): name more with --path PATH or --candidates FILE",
			candidates, ifNot(r.cfg.Scope == nil, ": pass --scope FILE --base DIR"), ifNot(r.cfg.Profile == nil, ": pass the server's command after --"))
	}
	if strings.HasPrefix(it.What, "proxy denial ") {
		return denialGrant(schema.ErrorCode(strings.TrimPrefix(it.What, "proxy denial ")), it.Tool, it.Path, r.cfg.Scope) + pathNote(it.Path, it.Access, r)
	}
	g := pathGrant(it.Path, it.Access, r)
	switch {
	case strings.HasPrefix(it.What, string(schema.FindingUndeclaredWrite)):
		return fmt.Sprintf("the proxy classifies %s as a read, yet the server wrote %s during it: if writing is the tool's job, say so in the scope's tool_classes ({%q: \"write\"}) and grant the write; otherwise the server did more than the call asked. %s", toolName(it.Tool), it.Path, it.Tool, g)
	case strings.HasPrefix(it.What, string(schema.FindingUnattributedAccess)):
		return fmt.Sprintf("the server touched %s while no call was in flight (not at start-up): the scope grants it, but no request of the client asked for it", it.Path)
	case strings.HasPrefix(it.What, string(schema.FindingProxyGap)):
		return fmt.Sprintf("the proxy let %s through, and during it the kernel refused %s: the fence held where the proxy's checks did not see the path. %s", toolName(it.Tool), it.Path, g)
	}
	return g
}

func toolName(t string) string {
	if t == "" {
		return "the call"
	}
	return "call " + t
}

func ifNot(cond bool, s string) string {
	if cond {
		return s
	}
	return ""
}

// pathNote adds the path's own grant to a proxy denial that names one.
func pathNote(path, access string, r *run) string {
	if path == "" {
		return ""
	}
	return " " + pathGrant(path, access, r)
}

// pathGrant says which scope field or flag would grant access to path.
func pathGrant(path, access string, r *run) string {
	scope, prof := r.cfg.Scope, r.cfg.Profile
	write := access == string(schema.OpWrite) || access == string(schema.OpCreate)
	if schema.DefaultSecrets.Match(path) {
		return fmt.Sprintf("%s looks like a credential (a secret path pattern): the proxy refuses it even inside the scope and the daemon reports every access; only replacing the pattern list (--secret-patterns FILE) would change that, which is not what a credential needs", path)
	}
	if pid, rest, ok := procEntry(path); ok {
		switch {
		case r.pids[pid]:
			return fmt.Sprintf("the run's own process %d's /proc entry (%s): the runtime profile grants the server's first process its own /proc/self, not a process it spawned (its /proc/PID is another directory); a server that spawns workers needs its own pid namespace for their /proc/self", pid, rest)
		default:
			return fmt.Sprintf("another process's /proc entry (pid %d): nothing grants it, and no server should read it", pid)
		}
	}
	if e, ok := inProfile(prof, path); ok {
		if write {
			return fmt.Sprintf("the runtime profile grants it read-only (%s); writes to a runtime's files are never granted: a server that writes needs a path in the scope with access_mode \"write\"", e.Reason)
		}
		return fmt.Sprintf("the runtime profile grants it (%s): the run's fence had it unless the server ran another command than the one given here", e.Reason)
	}
	if scope == nil {
		return fmt.Sprintf("outside the runtime profile; whether the scope grants it is known with --scope FILE --base DIR. Read-only: --allow-runtime %s", path)
	}
	for _, a := range scope.AllowedPaths {
		if a.Path == path || a.Kind == schema.KindDir && schema.IsWithin(a.Path, path) {
			if write && scope.AccessMode != schema.AccessWrite {
				return fmt.Sprintf("inside allowed_paths (%s), but the scope's access_mode is %q: \"access_mode\": \"write\" grants writes there", rel(scope.Base, a.Path), scope.AccessMode)
			}
			return fmt.Sprintf("the scope grants it (allowed_paths %s, access_mode %q); a refusal there came from a narrower fence (the client's roots) or a secret pattern", rel(scope.Base, a.Path), scope.AccessMode)
		}
	}
	if schema.IsWithin(scope.Base, path) {
		g := fmt.Sprintf("in the approved base %s but not in allowed_paths: add %q (or its directory) to allowed_paths", scope.Base, rel(scope.Base, path))
		if write && scope.AccessMode != schema.AccessWrite {
			g += ` with "access_mode": "write"`
		}
		return g
	}
	if write {
		return fmt.Sprintf("outside the approved base %s: nothing grants writes there (allowed_paths lie inside --base; --allow-runtime is read-only); move the file into the base, or run with another --base", scope.Base)
	}
	if access == "execute" {
		return fmt.Sprintf("outside the approved base %s: the server runs it; grant it with --allow-exec %s (or --allow-runtime %s)", scope.Base, filepath.Base(path), path)
	}
	return fmt.Sprintf("outside the approved base %s: grant it read-only with --allow-runtime %s (allowed_paths lie inside --base)", scope.Base, path)
}

// denialGrant says what would let a call the proxy denied through.
func denialGrant(code schema.ErrorCode, tool, path string, scope *schema.CanonicalScope) string {
	switch code {
	case schema.ErrToolNotAllowed:
		return fmt.Sprintf("the scope's tool_allowlist does not name %q: add it", tool)
	case schema.ErrPathOutsideScope:
		if path == "" {
			return "a path argument lies outside the scope: allowed_paths grants paths inside --base"
		}
		return "a path argument lies outside the scope:"
	case schema.ErrSecretPath:
		return "a path argument looks like a credential: refused even inside the scope (secret path patterns)"
	case schema.ErrScopeExpired:
		return "the scope had expired (expires_after_minutes, expires_at): issue a new one"
	case schema.ErrScopeRevoked:
		return "the operator revoked the scope (mcpwarden approve --revoke)"
	case schema.ErrApprovalRequired, schema.ErrApprovalDenied:
		a := "approval"
		if scope != nil {
			a = fmt.Sprintf("approval is %q", scope.Approval)
		}
		return fmt.Sprintf("the scope's %s: the call waited for 'mcpwarden approve RUN_ID OP_ID' (or the client's elicitation) and was not approved", a)
	case schema.ErrUnattributed:
		return "the scope's attribution.required: the client sent no correlation id (traceparent) with the call"
	case schema.ErrResponseTooLarge:
		return "the server's answer was larger than --max-response-bytes"
	case schema.ErrRootsPending:
		return "the client did not answer the roots refresh within --roots-timeout"
	case schema.ErrPromptNotAllowed:
		return "the scope's prompt_allowlist does not name the prompt"
	case schema.ErrMethodNotAllowed:
		return "the proxy passes no such method in this protocol era and direction"
	case schema.ErrUnsupportedVersion, schema.ErrMalformedRequest:
		return "the client's request was malformed or of a protocol version the proxy does not speak"
	case schema.ErrCancelled:
		return "the client cancelled the request while it waited in the proxy (for the server to be ready or a roots refresh); it was never sent to the server"
	case schema.ErrAuditSinkFull:
		return "the audit records could not be written (the spool was full or the log failed): every call is denied until they can"
	}
	return "denied by the proxy (" + string(code) + ")"
}

// gapGrant explains a finding without a path.
func gapGrant(f *schema.Finding) string {
	switch f.Reason {
	case crosscheck.ReasonLandlockDegraded:
		return "the run was fenced degraded (--best-effort on a kernel without a Landlock feature it needs): run on a kernel with Landlock ABI 7, or drop --best-effort to refuse such runs"
	case crosscheck.ReasonNoKernelEvents:
		return "no daemon watched the run: start 'mcpwarden daemon' and run with --daemon-socket"
	case crosscheck.ReasonEventsDropped:
		return "the daemon lost events (ring buffer, queue or sink): see 'mcpwarden query health' for which counter grew"
	case crosscheck.ReasonAuditStream:
		return "kernel auditing was off, so Landlock's own records were missing: start the daemon with --enable-audit"
	case "io_uring_setup", "io_uring_setup_refused":
		return "the server set up io_uring, whose operations the probes cannot see: the scope's allow_io_uring permits it; without it the fence refuses it"
	case crosscheck.ReasonOverflow:
		return "the run had more events than the daemon's cross-check keeps: the collector still checks it from ClickHouse"
	}
	return string(f.Type) + " " + f.Reason
}

// procEntry splits /proc/PID/REST.
func procEntry(path string) (int, string, bool) {
	rest, ok := strings.CutPrefix(path, "/proc/")
	if !ok {
		return 0, "", false
	}
	num, tail, _ := strings.Cut(rest, "/")
	pid, err := strconv.Atoi(num)
	if err != nil || pid <= 0 {
		return 0, "", false
	}
	return pid, tail, true
}

// inProfile finds the profile entry that grants path.
func inProfile(p *runtimeprofile.Profile, path string) (runtimeprofile.Entry, bool) {
	if p == nil {
		return runtimeprofile.Entry{}, false
	}
	for _, e := range p.Entries {
		tree := e.Class == runtimeprofile.ClassReadTree || e.Class == runtimeprofile.ClassExecTree
		if e.Path == path || tree && schema.IsWithin(e.Path, path) {
			return e, true
		}
	}
	return runtimeprofile.Entry{}, false
}

// rel is path relative to base, for a scope's allowed_paths.
func rel(base, path string) string {
	if r, err := filepath.Rel(base, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}
