package schema

// EventSchemaVersion is bumped whenever a field is added, changes meaning or
// is removed: decoders refuse members they do not know (DecodeBatch), and
// collectors refuse versions they do not know, so collectors are upgraded
// before the publishers. Version 2 added launch.launcher_uid, version 3
// launch.launcher_uid_by and health.drops_kernel_audit.
const EventSchemaVersion = 3

// Kind names what an Event describes; it is also the last token of the NATS
// subject the event travels on (mcpwarden.v1.<host>.<kind>).
type Kind string

const (
	KindLaunch         Kind = "launch"
	KindDecision       Kind = "decision"
	KindFileOp         Kind = "file_op"
	KindLandlockDenial Kind = "landlock_denial"
	KindFinding        Kind = "finding"
	KindHealth         Kind = "health"
)

// Kinds lists every kind in a stable order.
var Kinds = []Kind{KindLaunch, KindDecision, KindFileOp, KindLandlockDenial, KindFinding, KindHealth}

// Event is the one envelope every component emits. Exactly one of the
// kind-specific pointers is set, the one matching Kind.
//
// Sanitisation is by construction: no field of any body can hold a prompt,
// file contents, a full path or a credential. Paths only ever appear as a
// PathHash (keyed HMAC) plus a PathClass; every other string must be a token
// or label (Validate, in validate.go), which no path or sentence fits.
// docs/events.md documents every field; event.schema.json is the JSON
// Schema, kept in step by TestEventJSONSchemaInStep.
type Event struct {
	EventID       string `json:"event_id"` // globally unique; the dedupe key end to end
	SchemaVersion int    `json:"schema_version"`
	Host          string `json:"host"`
	BootID        string `json:"boot_id"`
	RunID         string `json:"run_id,omitempty"`
	ScopeID       string `json:"scope_id,omitempty"`
	ScopeHash     string `json:"scope_hash,omitempty"`
	Kind          Kind   `json:"kind"`
	TimeNS        int64  `json:"time_ns"` // when it happened, Unix ns (wall clock of the emitting host)

	Launch         *Launch         `json:"launch,omitempty"`
	Decision       *Decision       `json:"decision,omitempty"`
	FileOp         *FileOp         `json:"file_op,omitempty"`
	LandlockDenial *LandlockDenial `json:"landlock_denial,omitempty"`
	Finding        *Finding        `json:"finding,omitempty"`
	Health         *Health         `json:"health,omitempty"`
}

// PathHash is the hex HMAC-SHA256 of a canonical absolute path under the
// deployment's key (see PathHasher). It is the only form in which a path may
// leave the process that saw it.
type PathHash string

// PathClass says where a path lies relative to a run's scope.
type PathClass string

const (
	PathWorkspace PathClass = "workspace" // inside the scope's allowed paths
	PathRuntime   PathClass = "runtime"   // inside the run's runtime profile
	PathSecret    PathClass = "secret"    // matches a secret pattern (even inside the scope)
	PathOutside   PathClass = "outside"   // none of the above
	PathUnknown   PathClass = "unknown"   // could not be resolved
)

// RunMode is how the launcher ran the server.
type RunMode string

const (
	ModeEnforce RunMode = "enforce"
	ModeAudit   RunMode = "audit"
)

// Launch is written when a run starts (Phase "start") and when it ends (Phase "exit").
type Launch struct {
	Phase          LaunchPhase `json:"phase"`
	Mode           RunMode     `json:"mode"`
	LandlockABI    int         `json:"landlock_abi"`
	Degraded       bool        `json:"degraded"`                  // true when --best-effort dropped a restriction
	DegradedReason string      `json:"degraded_reason,omitempty"` // which restriction classes were dropped, never paths
	ServerExe      string      `json:"server_exe,omitempty"`      // base name only, never the full path
	ServerName     string      `json:"server_name,omitempty"`     // serverInfo.name, when the proxy saw it
	ServerVersion  string      `json:"server_version,omitempty"`  // serverInfo.version
	ProtocolEra    string      `json:"protocol_era,omitempty"`    // "legacy" or "modern"
	RootPID        int         `json:"root_pid,omitempty"`
	ExitStatus     int         `json:"exit_status"`
	ExitReason     ExitReason  `json:"exit_reason,omitempty"`
	DurationMS     int64       `json:"duration_ms"`
	// Layers are the fence's layers and whether each was in force.
	Layers []Layer `json:"layers,omitempty"`
	// ServerUID is the host uid the server ran as (-1: not started).
	ServerUID int `json:"server_uid"`
	// FileOwner is "uid:gid", the owner of the files the server creates in
	// a write scope, when the identity layer chose one.
	FileOwner string `json:"file_owner,omitempty"`
	// LauncherUID is the uid of the process that launched the run, and
	// LauncherUIDBy says who asserts it. Through a daemon (LauncherUIDBy
	// "daemon") it is the uid of the process that sent the record to the
	// daemon's socket, set by the daemon from the socket's peer credentials
	// (SO_PEERCRED, the kernel's word), replacing whatever the launcher
	// wrote. A `run --nats` that publishes itself (LauncherUIDBy
	// "launcher") states its own real uid: its word, and publishing at all
	// took the host's publisher credentials (root-only on a single host).
	// Absent when no one said (records of schema_version 1). Since
	// schema_version 2; LauncherUIDBy since 3, and set with LauncherUID
	// there (a version 2 record's uid is the daemon's).
	LauncherUID   *int          `json:"launcher_uid,omitempty"`
	LauncherUIDBy LauncherUIDBy `json:"launcher_uid_by,omitempty"`
}

// LauncherUIDBy names who asserts a launch record's launcher_uid.
type LauncherUIDBy string

const (
	// LauncherUIDByDaemon: the daemon read it from its socket's peer
	// credentials (SO_PEERCRED).
	LauncherUIDByDaemon LauncherUIDBy = "daemon"
	// LauncherUIDByLauncher: the launcher stated its own uid, publishing
	// its records itself with the host's publisher credentials.
	LauncherUIDByLauncher LauncherUIDBy = "launcher"
)

// Decision is the sanitized record of one proxied request.
type Decision struct {
	OpID            string        `json:"op_id"` // proxy-assigned id of the call; approvals name it
	Method          string        `json:"method"`
	ProtocolEra     string        `json:"protocol_era"`
	ProtocolVersion string        `json:"protocol_version"`
	ServerOrigin    string        `json:"server_origin"`
	Tool            string        `json:"tool,omitempty"`
	ActionClass     ActionClass   `json:"action_class"`
	Decision        Outcome       `json:"decision"`
	Approval        ApprovalState `json:"approval"`
	ErrorCode       string        `json:"error_code,omitempty"`
	RetryCount      int           `json:"retry_count"`
	LatencyMS       float64       `json:"latency_ms"`
	PathHashes      []PathHash    `json:"path_hashes,omitempty"`
	CorrelationID   string        `json:"correlation_id,omitempty"`
	StartNS         int64         `json:"start_ns"` // when the call was forwarded (or denied)
	EndNS           int64         `json:"end_ns"`   // when its response went back to the client
}

// FileOp is one file operation seen by the kernel probes.
type FileOp struct {
	Syscall    string      `json:"syscall"`
	FlagsClass OpAccess    `json:"flags_class"`
	Result     int         `json:"result"` // 0 on success, else -errno
	PathHash   PathHash    `json:"path_hash"`
	PathClass  PathClass   `json:"path_class"`
	Verdict    FileVerdict `json:"verdict"`
	PID        int         `json:"pid"`
	Comm       string      `json:"comm"`
}

// LandlockDenial is one kernel audit record of type 1423 (AUDIT_LANDLOCK_ACCESS).
type LandlockDenial struct {
	Domain    string    `json:"domain"`
	Blockers  []string  `json:"blockers"`
	PathHash  PathHash  `json:"path_hash,omitempty"`
	PathClass PathClass `json:"path_class,omitempty"`
	PID       int       `json:"pid"`
	Comm      string    `json:"comm,omitempty"`
}

// Finding is a conclusion drawn by the cross-check from other events.
type Finding struct {
	Type        FindingType `json:"type"`
	Severity    Severity    `json:"severity"`
	EvidenceIDs []string    `json:"evidence_ids"`
	Tool        string      `json:"tool,omitempty"`
	OpID        string      `json:"op_id,omitempty"`
	Reason      string      `json:"reason,omitempty"` // a stable class, never free text from the run
	// PathHash and PathClass repeat the evidence's path, when there is one,
	// so fleet queries can group findings by path without a join.
	PathHash  PathHash  `json:"path_hash,omitempty"`
	PathClass PathClass `json:"path_class,omitempty"`
	// Status is empty for a final finding; "provisional" or "withdrawn"
	// for the on-host cross-check's early reports (FindingStatus).
	Status FindingStatus `json:"status,omitempty"`
}

// Health reports what an observer runs on and what it lost.
type Health struct {
	Component        string   `json:"component"` // daemon, launcher, collector
	Hooks            []string `json:"hooks,omitempty"`
	LandlockABI      int      `json:"landlock_abi,omitempty"`
	AuditStream      string   `json:"audit_stream,omitempty"` // on, off, unavailable
	DropsBPFReserve  uint64   `json:"drops_bpf_reserve"`
	DropsQueueFull   uint64   `json:"drops_queue_full"`
	DropsPublishFail uint64   `json:"drops_publish_fail"`
	SpoolDepth       uint64   `json:"spool_depth"`
	// DropsKernelAudit counts the audit records the kernel lost (its
	// audit status's `lost` counter grew, or was reset) while this daemon
	// watched, cumulative like the other drop counters; each loss also
	// put an OBSERVATION_GAP kernel_audit_lost on the runs live then. The
	// counter is the host's: whichever program's records were lost. Since
	// schema_version 3 (absent: 0, or a daemon of an older release).
	DropsKernelAudit uint64 `json:"drops_kernel_audit,omitempty"`
}
