package schema

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Field limits of the event envelope. They keep every string field to an
// identifier-like alphabet, so no field can carry a prompt, file contents, a
// full path or a credential (none of which fit), and bound what a hostile
// publisher can make the collector store.
const (
	maxTokenLen   = 128
	maxCommLen    = 16 // TASK_COMM_LEN
	maxHostLen    = 253
	maxListItems  = 1024
	maxEvidenceID = 4096
	// MaxPID is the kernel's PID_MAX_LIMIT (2^22): no pid is larger.
	MaxPID = 1 << 22
	// MaxLandlockABI is what the landlock_abi columns (UInt8) hold.
	MaxLandlockABI = 255
)

// inRange checks a number against the range its ClickHouse column holds, so
// that nothing a publisher sends is stored wrapped to another value.
func inRange(field string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return invalid(field, "%d is out of range [%d, %d]", v, lo, hi)
	}
	return nil
}

// ErrInvalidEvent is wrapped by every Validate error.
var ErrInvalidEvent = errors.New("invalid event")

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidEvent, field, fmt.Sprintf(format, args...))
}

// isHex reports whether s is n lowercase hex digits (any length when n < 0).
func isHex(s string, n int) bool {
	if n >= 0 && len(s) != n {
		return false
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// IsEventID reports whether s has the form of an event id: 32 lowercase hex
// digits (NewID, or a finding's deterministic id).
func IsEventID(s string) bool { return isHex(s, 32) }

// IsToken reports whether s is 1-128 characters of letters, digits and
// ". _ : @ + = , -". Tokens hold names, versions, classes and ids: never a
// path (no '/'), never a sentence (no spaces).
func IsToken(s string) bool {
	if s == "" || len(s) > maxTokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			return false
		}
	}
	return true
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '@' || c == '+' || c == '=' || c == ',' || c == '-'
}

// IsLabel is IsToken plus '/' inside, for protocol method names
// ("tools/call"), namespaced tool names and probe names
// ("tracepoint/syscalls/sys_enter_openat"). A label cannot start with '/'
// nor contain an empty or ".." segment, so it cannot spell an absolute or
// relative path out of a directory.
func IsLabel(s string) bool {
	if s == "" || len(s) > maxTokenLen || s[0] == '/' {
		return false
	}
	for rest, more := s, true; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, "/")
		if seg == "" || seg == ".." || !IsToken(seg) {
			return false
		}
	}
	return true
}

// SanitizeLabel returns s when it is a valid label, otherwise "_invalid".
// Emitters use it on names that come from untrusted clients (a tool name in
// a denied call) so the record keeps its shape without carrying the input.
func SanitizeLabel(s string) string {
	if IsLabel(s) {
		return s
	}
	return "_invalid"
}

// SanitizeToken maps a name from an untrusted peer (a server's
// serverInfo name or version) to a token: at most 128 bytes, every byte
// that may not appear in a token replaced by '_'. Empty stays empty.
func SanitizeToken(s string) string {
	if len(s) > maxTokenLen {
		s = s[:maxTokenLen]
	}
	b := []byte(s)
	for i, c := range b {
		if !tokenByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

// SanitizeComm maps a process comm to at most 16 printable ASCII bytes
// without '/' or spaces; anything else becomes '_'.
func SanitizeComm(s string) string {
	if len(s) > maxCommLen {
		s = s[:maxCommLen]
	}
	b := []byte(s)
	for i, c := range b {
		if !tokenByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}

// CheckHost says whether s can name a host in events: 1-253 letters,
// digits, '.' and '-' (a host name of RFC 1123's alphabet). '_' is refused:
// a host's NATS subject token is its name with '.' turned into '_'
// (stream.HostToken), so "web.1" and "web_1" would share one token, and
// with it the subjects and rights that keep one host from writing as
// another. On these names the token is one-to-one.
func CheckHost(s string) error {
	if s == "" || len(s) > maxHostLen {
		return fmt.Errorf("host name %q: must be 1-%d characters", s, maxHostLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return fmt.Errorf("host name %q: only letters, digits, '.' and '-' (no '_': its NATS subject token would be another host's, e.g. web_1 is web.1's); rename the host (hostnamectl set-hostname)", s)
		}
	}
	return nil
}

func isHost(s string) bool { return CheckHost(s) == nil }

func optToken(field, s string) error {
	if s != "" && !IsToken(s) {
		return invalid(field, "must be empty or 1-%d of letters, digits and . _ : @ + = , -", maxTokenLen)
	}
	return nil
}

func reqToken(field, s string) error {
	if !IsToken(s) {
		return invalid(field, "must be 1-%d of letters, digits and . _ : @ + = , -", maxTokenLen)
	}
	return nil
}

func optLabel(field, s string) error {
	if s != "" && !IsLabel(s) {
		return invalid(field, "must be empty or a label (token segments separated by '/', not starting with '/')")
	}
	return nil
}

func pathHash(field string, h PathHash, required bool) error {
	if h == "" && !required {
		return nil
	}
	if !isHex(string(h), 64) {
		return invalid(field, "must be a 64-hex-digit keyed hash (PathHasher.Hash), never a path")
	}
	return nil
}

func oneOf[T ~string](field string, v T, allowEmpty bool, set ...T) error {
	if v == "" && allowEmpty {
		return nil
	}
	for _, s := range set {
		if v == s {
			return nil
		}
	}
	return invalid(field, "%q is not one of %v", string(v), set)
}

// Validate checks that e is a well-formed, sanitized event: a known kind
// with exactly its own body, identifier-shaped strings, hashes where paths
// would be. The collector refuses anything that fails it.
func (e *Event) Validate() error {
	if !IsEventID(e.EventID) {
		return invalid("event_id", "must be 32 lowercase hex digits (schema.NewID)")
	}
	if e.SchemaVersion < 1 || e.SchemaVersion > EventSchemaVersion {
		return invalid("schema_version", "%d is not supported (this build knows 1..%d): upgrade the collector", e.SchemaVersion, EventSchemaVersion)
	}
	if !isHost(e.Host) {
		return invalid("host", "must be 1-%d of letters, digits, '.', '-' (no '_', which would share a subject token with '.')", maxHostLen)
	}
	if e.BootID != "" && (len(e.BootID) > 64 || strings.Trim(e.BootID, "0123456789abcdef-") != "") {
		return invalid("boot_id", "must be the kernel's boot id (hex and '-')")
	}
	if err := optToken("run_id", e.RunID); err != nil {
		return err
	}
	if err := optToken("scope_id", e.ScopeID); err != nil {
		return err
	}
	if h, ok := strings.CutPrefix(e.ScopeHash, "sha256:"); e.ScopeHash != "" && (!ok || !isHex(h, 64)) {
		return invalid("scope_hash", "must be \"sha256:\" and 64 hex digits (CanonicalScope.Hash)")
	}
	if e.TimeNS <= 0 {
		return invalid("time_ns", "must be a positive Unix time in ns")
	}
	bodies := 0
	for _, set := range []bool{e.Launch != nil, e.Decision != nil, e.FileOp != nil, e.LandlockDenial != nil, e.Finding != nil, e.Health != nil} {
		if set {
			bodies++
		}
	}
	if bodies != 1 {
		return invalid("kind", "exactly one body must be set, found %d", bodies)
	}
	switch e.Kind {
	case KindLaunch:
		if e.Launch == nil {
			return invalid("launch", "missing for kind launch")
		}
		if e.Launch.LauncherUID != nil && e.SchemaVersion < 2 {
			return invalid("launch.launcher_uid", "needs schema_version 2")
		}
		if e.Launch.LauncherUIDBy != "" && e.SchemaVersion < 3 {
			return invalid("launch.launcher_uid_by", "needs schema_version 3")
		}
		if e.SchemaVersion >= 3 && (e.Launch.LauncherUID != nil) != (e.Launch.LauncherUIDBy != "") {
			return invalid("launch.launcher_uid_by", "launcher_uid and launcher_uid_by come together (schema_version 3)")
		}
		return e.Launch.validate()
	case KindDecision:
		if e.Decision == nil {
			return invalid("decision", "missing for kind decision")
		}
		return e.Decision.validate()
	case KindFileOp:
		if e.FileOp == nil {
			return invalid("file_op", "missing for kind file_op")
		}
		return e.FileOp.validate()
	case KindLandlockDenial:
		if e.LandlockDenial == nil {
			return invalid("landlock_denial", "missing for kind landlock_denial")
		}
		return e.LandlockDenial.validate()
	case KindFinding:
		if e.Finding == nil {
			return invalid("finding", "missing for kind finding")
		}
		return e.Finding.validate()
	case KindHealth:
		if e.Health == nil {
			return invalid("health", "missing for kind health")
		}
		return e.Health.validate(e.SchemaVersion)
	default:
		return invalid("kind", "unknown kind %q", string(e.Kind))
	}
}

func (l *Launch) validate() error {
	if err := oneOf("launch.phase", l.Phase, false, LaunchPhases...); err != nil {
		return err
	}
	if err := oneOf("launch.mode", l.Mode, false, ModeEnforce, ModeAudit); err != nil {
		return err
	}
	if err := oneOf("launch.exit_reason", l.ExitReason, true, ExitReasons...); err != nil {
		return err
	}
	for f, v := range map[string]string{
		"launch.degraded_reason": l.DegradedReason, "launch.server_exe": l.ServerExe,
		"launch.server_name": l.ServerName, "launch.server_version": l.ServerVersion,
		"launch.protocol_era": l.ProtocolEra, "launch.file_owner": l.FileOwner,
	} {
		if err := optToken(f, v); err != nil {
			return err
		}
	}
	if l.ServerUID < -1 || l.ServerUID >= math.MaxUint32 {
		return invalid("launch.server_uid", "must be -1 or a uid")
	}
	if l.LauncherUID != nil && (*l.LauncherUID < 0 || *l.LauncherUID >= math.MaxUint32) {
		return invalid("launch.launcher_uid", "must be a uid")
	}
	if err := oneOf("launch.launcher_uid_by", l.LauncherUIDBy, true, LauncherUIDByDaemon, LauncherUIDByLauncher); err != nil {
		return err
	}
	for _, c := range []struct {
		field     string
		v, lo, hi int64
	}{
		{"launch.landlock_abi", int64(l.LandlockABI), 0, MaxLandlockABI},
		{"launch.root_pid", int64(l.RootPID), 0, MaxPID},
		{"launch.exit_status", int64(l.ExitStatus), math.MinInt32, math.MaxInt32},
		{"launch.duration_ms", l.DurationMS, 0, math.MaxInt64},
	} {
		if err := inRange(c.field, c.v, c.lo, c.hi); err != nil {
			return err
		}
	}
	if len(l.Layers) > len(LayerNames) {
		return invalid("launch.layers", "more than %d layers", len(LayerNames))
	}
	seen := map[LayerName]bool{}
	for _, ly := range l.Layers {
		if err := oneOf("launch.layers.name", ly.Name, false, LayerNames...); err != nil {
			return err
		}
		if seen[ly.Name] {
			return invalid("launch.layers", "layer %s listed twice", ly.Name)
		}
		seen[ly.Name] = true
		if err := oneOf("launch.layers.state", ly.State, false, LayerStates...); err != nil {
			return err
		}
		if err := optToken("launch.layers.reason", ly.Reason); err != nil {
			return err
		}
	}
	return nil
}

func (d *Decision) validate() error {
	if err := reqToken("decision.op_id", d.OpID); err != nil {
		return err
	}
	if !IsLabel(d.Method) {
		return invalid("decision.method", "must be a label such as tools/call")
	}
	if err := optLabel("decision.tool", d.Tool); err != nil {
		return err
	}
	if err := oneOf("decision.decision", d.Decision, false, OutcomeAllow, OutcomeDeny); err != nil {
		return err
	}
	if err := oneOf("decision.action_class", d.ActionClass, true, ActionClasses...); err != nil {
		return err
	}
	if err := oneOf("decision.approval", d.Approval, true, ApprovalStates...); err != nil {
		return err
	}
	for f, v := range map[string]string{
		"decision.protocol_era": d.ProtocolEra, "decision.protocol_version": d.ProtocolVersion,
		"decision.server_origin": d.ServerOrigin, "decision.error_code": d.ErrorCode,
		"decision.correlation_id": d.CorrelationID,
	} {
		if err := optToken(f, v); err != nil {
			return err
		}
	}
	if len(d.PathHashes) > maxListItems {
		return invalid("decision.path_hashes", "more than %d entries", maxListItems)
	}
	for _, h := range d.PathHashes {
		if err := pathHash("decision.path_hashes", h, true); err != nil {
			return err
		}
	}
	if err := inRange("decision.retry_count", int64(d.RetryCount), 0, math.MaxUint32); err != nil {
		return err
	}
	if !(d.LatencyMS >= 0) { // also NaN
		return invalid("decision.latency_ms", "must not be negative")
	}
	if d.StartNS < 0 || d.EndNS < 0 || (d.EndNS != 0 && d.EndNS < d.StartNS) {
		return invalid("decision.end_ns", "must not be before start_ns")
	}
	return nil
}

var pathClasses = []PathClass{PathWorkspace, PathRuntime, PathSecret, PathOutside, PathUnknown}

func (f *FileOp) validate() error {
	if err := reqToken("file_op.syscall", f.Syscall); err != nil {
		return err
	}
	if err := oneOf("file_op.flags_class", f.FlagsClass, false, OpRead, OpWrite, OpCreate); err != nil {
		return err
	}
	if err := pathHash("file_op.path_hash", f.PathHash, false); err != nil {
		return err
	}
	if err := oneOf("file_op.path_class", f.PathClass, false, pathClasses...); err != nil {
		return err
	}
	if err := oneOf("file_op.verdict", f.Verdict, false, VerdictAllowed, VerdictBlockedByKernel, VerdictEscape, VerdictFailed); err != nil {
		return err
	}
	if len(f.Comm) > maxCommLen || (f.Comm != "" && SanitizeComm(f.Comm) != f.Comm) {
		return invalid("file_op.comm", "must be at most 16 token characters (SanitizeComm)")
	}
	if err := inRange("file_op.pid", int64(f.PID), 0, MaxPID); err != nil {
		return err
	}
	return inRange("file_op.result", int64(f.Result), math.MinInt32, math.MaxInt32)
}

func (l *LandlockDenial) validate() error {
	if err := optToken("landlock_denial.domain", l.Domain); err != nil {
		return err
	}
	if len(l.Blockers) > 64 {
		return invalid("landlock_denial.blockers", "more than 64 entries")
	}
	for _, b := range l.Blockers {
		if err := reqToken("landlock_denial.blockers", b); err != nil {
			return err
		}
	}
	if err := pathHash("landlock_denial.path_hash", l.PathHash, false); err != nil {
		return err
	}
	if err := oneOf("landlock_denial.path_class", l.PathClass, true, pathClasses...); err != nil {
		return err
	}
	if len(l.Comm) > maxCommLen || (l.Comm != "" && SanitizeComm(l.Comm) != l.Comm) {
		return invalid("landlock_denial.comm", "must be at most 16 token characters (SanitizeComm)")
	}
	return inRange("landlock_denial.pid", int64(l.PID), 0, MaxPID)
}

func (f *Finding) validate() error {
	if err := oneOf("finding.type", f.Type, false, FindingTypes...); err != nil {
		return err
	}
	if err := oneOf("finding.severity", f.Severity, false, Severities...); err != nil {
		return err
	}
	if len(f.EvidenceIDs) > maxEvidenceID {
		return invalid("finding.evidence_ids", "more than %d entries", maxEvidenceID)
	}
	for _, id := range f.EvidenceIDs {
		if !IsEventID(id) {
			return invalid("finding.evidence_ids", "every entry must be an event id")
		}
	}
	if err := optLabel("finding.tool", f.Tool); err != nil {
		return err
	}
	if err := pathHash("finding.path_hash", f.PathHash, false); err != nil {
		return err
	}
	if err := oneOf("finding.path_class", f.PathClass, true, pathClasses...); err != nil {
		return err
	}
	if err := optToken("finding.op_id", f.OpID); err != nil {
		return err
	}
	if err := oneOf("finding.status", f.Status, true, StatusProvisional, StatusWithdrawn); err != nil {
		return err
	}
	return optToken("finding.reason", f.Reason)
}

func (h *Health) validate(version int) error {
	if h.DropsKernelAudit != 0 && version < 3 {
		return invalid("health.drops_kernel_audit", "needs schema_version 3")
	}
	if err := reqToken("health.component", h.Component); err != nil {
		return err
	}
	if err := inRange("health.landlock_abi", int64(h.LandlockABI), 0, MaxLandlockABI); err != nil {
		return err
	}
	if len(h.Hooks) > 64 {
		return invalid("health.hooks", "more than 64 entries")
	}
	for _, k := range h.Hooks {
		if !IsLabel(k) {
			return invalid("health.hooks", "every entry must be a label")
		}
	}
	return optToken("health.audit_stream", h.AuditStream)
}
