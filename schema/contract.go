package schema

// The closed vocabularies of the event contract. Each is a type, so that a
// producer and a consumer in different packages cannot drift apart by
// comparing string literals; Validate accepts exactly the values listed.

// LaunchPhase says which of a run's two launch records this is.
type LaunchPhase string

const (
	PhaseStart LaunchPhase = "start"
	// PhaseIdentified: the proxy learned which server runs (its serverInfo,
	// from initialize or server/discover), after the start record.
	PhaseIdentified LaunchPhase = "identified"
	PhaseExit       LaunchPhase = "exit"
)

// LaunchPhases lists every launch phase.
var LaunchPhases = []LaunchPhase{PhaseStart, PhaseIdentified, PhaseExit}

// ExitReason is the stable class of why a run ended.
type ExitReason string

const (
	ExitExited        ExitReason = "exited"         // the server exited on its own
	ExitSignaled      ExitReason = "signaled"       // the server was killed by a signal
	ExitStartFailed   ExitReason = "start_failed"   // it could not be started under the fence
	ExitScopeExpired  ExitReason = "scope_expired"  // the scope expired during the run
	ExitScopeRevoked  ExitReason = "scope_revoked"  // the operator revoked the scope
	ExitRefusedKernel ExitReason = "refused_kernel" // the kernel lacks what the fence needs
	ExitAuditFailed   ExitReason = "audit_failed"   // the records could not be written
	ExitUnknown       ExitReason = "unknown"
)

// ExitReasons lists every exit reason.
var ExitReasons = []ExitReason{ExitExited, ExitSignaled, ExitStartFailed, ExitScopeExpired, ExitScopeRevoked, ExitRefusedKernel, ExitAuditFailed, ExitUnknown}

// ActionClass is what a call does to the scope's files.
type ActionClass string

const (
	ActionRead        ActionClass = "read"
	ActionWrite       ActionClass = "write"
	ActionDestructive ActionClass = "destructive"
	ActionNone        ActionClass = "none" // not a tool call (lists, reads of resources, ...)
)

// ActionClasses lists every action class.
var ActionClasses = []ActionClass{ActionRead, ActionWrite, ActionDestructive, ActionNone}

// Outcome is the proxy's decision on one call.
type Outcome string

const (
	OutcomeAllow Outcome = "allow"
	OutcomeDeny  Outcome = "deny"
)

// ApprovalState is where a call stands with respect to approval.
type ApprovalState string

const (
	ApprovalNotRequired ApprovalState = "not_required"
	ApprovalApproved    ApprovalState = "approved"
	ApprovalDenied      ApprovalState = "denied"
	ApprovalTimedOut    ApprovalState = "timed_out"
)

// ApprovalStates lists every approval state.
var ApprovalStates = []ApprovalState{ApprovalNotRequired, ApprovalApproved, ApprovalDenied, ApprovalTimedOut}

// OpAccess is what a file operation does to its path.
type OpAccess string

const (
	OpRead   OpAccess = "read"
	OpWrite  OpAccess = "write"
	OpCreate OpAccess = "create"
)

// FileVerdict is the outcome of one observed file operation against the scope.
type FileVerdict string

const (
	// VerdictAllowed: it succeeded inside the scope or the runtime profile.
	VerdictAllowed FileVerdict = "allowed"
	// VerdictBlockedByKernel: the kernel refused it (EACCES/EPERM: Landlock, or DAC).
	VerdictBlockedByKernel FileVerdict = "blocked_by_kernel"
	// VerdictEscape: it succeeded outside the scope and the runtime profile,
	// or wrote where the scope only grants reads.
	VerdictEscape FileVerdict = "escape"
	// VerdictFailed: it failed for another reason (ENOENT, EEXIST, ...); nothing happened.
	VerdictFailed FileVerdict = "failed"
)

// FindingType names a conclusion of the cross-check.
type FindingType string

const (
	FindingEscape             FindingType = "ESCAPE"
	FindingBlockedAttempt     FindingType = "BLOCKED_ATTEMPT"
	FindingProxyGap           FindingType = "PROXY_GAP"
	FindingUnattributedAccess FindingType = "UNATTRIBUTED_ACCESS"
	FindingUndeclaredWrite    FindingType = "UNDECLARED_WRITE"
	FindingObservationGap     FindingType = "OBSERVATION_GAP"
)

// FindingTypes lists every finding type.
var FindingTypes = []FindingType{FindingEscape, FindingBlockedAttempt, FindingProxyGap, FindingUnattributedAccess, FindingUndeclaredWrite, FindingObservationGap}

// FindingStatus says whether a finding may still change. Only final
// findings are stored (ClickHouse) and counted; provisional and withdrawn
// ones live in the stream, for `mcpwarden events`.
type FindingStatus string

const (
	// StatusFinal (the empty value, so a final finding's JSON carries no
	// status): its evidence is older than the late-event window.
	StatusFinal FindingStatus = ""
	// StatusProvisional: reported as soon as its evidence settled; the final
	// check may confirm it (a final finding with the same type and kernel
	// evidence follows) or withdraw it.
	StatusProvisional FindingStatus = "provisional"
	// StatusWithdrawn: a provisional finding that the final check did not
	// confirm (late evidence explained it). Its evidence names the
	// provisional finding.
	StatusWithdrawn FindingStatus = "withdrawn"
)

// Severity grades a finding.
type Severity string

const (
	SeverityLow      Severity = "low"
	SeverityMedium   Severity = "medium"
	SeverityHigh     Severity = "high"
	SeverityCritical Severity = "critical"
)

// Severities lists every severity, lowest first.
var Severities = []Severity{SeverityLow, SeverityMedium, SeverityHigh, SeverityCritical}

// LayerName names one layer of the fence (docs/launcher.md).
type LayerName string

const (
	LayerLandlock LayerName = "landlock" // file and TCP access by path and port
	LayerSeccomp  LayerName = "seccomp"  // the syscall allowlist
	LayerUserNS   LayerName = "userns"   // a user namespace (unprivileged launchers)
	LayerMountNS  LayerName = "mountns"  // the minimal root: runtime and scope only
	LayerPIDNS    LayerName = "pidns"    // its own pid namespace and /proc
	LayerIPCNS    LayerName = "ipcns"    // its own SysV IPC and POSIX queues
	LayerUTSNS    LayerName = "utsns"    // its own host name
	LayerNetNS    LayerName = "netns"    // loopback only (no network granted)
	LayerIdentity LayerName = "identity" // not host root; who owns the files it creates
	LayerCgroup   LayerName = "cgroup"   // per-run process and memory limits
	LayerSecrets  LayerName = "secrets"  // the scope's secret files masked in the minimal root
)

// LayerNames lists every layer, in the order records carry them.
var LayerNames = []LayerName{LayerLandlock, LayerSeccomp, LayerUserNS, LayerMountNS, LayerPIDNS, LayerIPCNS, LayerUTSNS, LayerNetNS, LayerIdentity, LayerCgroup, LayerSecrets}

// LayerState says whether a layer was in force.
type LayerState string

const (
	LayerOn       LayerState = "on"       // in force as designed
	LayerDegraded LayerState = "degraded" // in force, weaker than designed (the reason says how)
	LayerOff      LayerState = "off"      // not in force (the reason says why)
)

// LayerStates lists every layer state.
var LayerStates = []LayerState{LayerOn, LayerDegraded, LayerOff}

// Layer is one layer's state in a launch record, with a reason token
// (never a path).
type Layer struct {
	Name   LayerName  `json:"name"`
	State  LayerState `json:"state"`
	Reason string     `json:"reason,omitempty"`
}
