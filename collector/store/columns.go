package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/mcpwarden/mcpwarden/schema"
)

// columns is the events table's column list in the order Insert fills them
// and ReadRun scans them.
var columns = []string{
	"event_id", "schema_version", "host", "boot_id", "run_id", "scope_id", "scope_hash", "kind", "time_ns",
	"tool", "op_id", "path_hash", "path_class", "pid", "comm",
	"phase", "mode", "landlock_abi", "degraded", "degraded_reason", "server_exe", "server_name", "server_version",
	"protocol_era", "root_pid", "exit_status", "exit_reason", "duration_ms",
	"method", "protocol_version", "server_origin", "action_class", "decision", "approval", "error_code",
	"retry_count", "latency_ms", "path_hashes", "correlation_id", "start_ns", "end_ns",
	"syscall", "flags_class", "result", "verdict",
	"domain", "blockers",
	"finding_type", "severity", "evidence_ids", "reason",
	"component", "hooks", "audit_stream", "drops_bpf_reserve", "drops_queue_full", "drops_publish_fail", "spool_depth",
	"layers", "server_uid", "file_owner", "launcher_uid", "drops_kernel_audit", "launcher_uid_by",
}

// lateColumns are the columns migrations added after the table was made,
// in order, at the end of columns: a database not migrated that far is
// read and written without them (columnCount).
var lateColumns = []string{"launcher_uid", "drops_kernel_audit", "launcher_uid_by"}

// timeColumns are the columns holding instants: Int64 ns in the legacy
// layout; DateTime64(9) in the current one, under other names (the legacy
// names are ALIAS columns there, which is what reads use).
var timeColumns = map[string]string{"time_ns": "time", "start_ns": "call_start", "end_ns": "call_end"}

// insertColumns is the column list of the layout's INSERT: it names every
// column.
func insertColumns(l Layout) []string {
	if l != LayoutCurrent {
		return columns
	}
	out := make([]string, len(columns))
	for i, c := range columns {
		out[i] = c
		if n, ok := timeColumns[c]; ok {
			out[i] = n
		}
	}
	return out
}

// InsertSQL is the INSERT the collector prepares in layout l.
func InsertSQL(l Layout) string {
	return "INSERT INTO events (" + strings.Join(insertColumns(l), ", ") + ")"
}

// row is one event flattened to the table's columns.
type row struct {
	eventID        string
	schemaVersion  uint8
	host, bootID   string
	runID, scopeID string
	scopeHash      string
	kind           string
	timeNS         int64

	tool, opID, pathHash, pathClass string
	pid                             uint32
	comm                            string

	phase, mode                         string
	landlockABI, degraded               uint8
	degradedReason, serverExe           string
	serverName, serverVersion, protoEra string
	rootPID                             uint32
	exitStatus                          int32
	exitReason                          string
	durationMS                          int64

	method, protocolVersion, serverOrigin, actionClass string
	decision, approval, errorCode                      string
	retryCount                                         uint32
	latencyMS                                          float64
	pathHashes                                         []string
	correlationID                                      string
	startNS, endNS                                     int64

	syscall, flagsClass string
	result              int32
	verdict             string

	domain   string
	blockers []string

	findingType, severity string
	evidenceIDs           []string
	reason                string

	component, auditStream                    string
	hooks                                     []string
	dropsBPF, dropsQueue, dropsPublish, spool uint64

	layers      []string // "name=state" or "name=state:reason"
	serverUID   int64
	fileOwner   string
	launcherUID int64 // -1: not known (the record did not come through a daemon)

	dropsKernelAudit uint64
	launcherUIDBy    string // "" in records of schema_version 2 (the daemon's word) and where launcherUID is -1
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func flatten(e *schema.Event) row {
	r := row{
		eventID: e.EventID, schemaVersion: uint8(e.SchemaVersion), host: e.Host, bootID: e.BootID,
		runID: e.RunID, scopeID: e.ScopeID, scopeHash: e.ScopeHash, kind: string(e.Kind), timeNS: e.TimeNS,
		pathHashes: []string{}, blockers: []string{}, evidenceIDs: []string{}, hooks: []string{},
		layers: []string{}, serverUID: -1, launcherUID: -1,
	}
	switch {
	case e.Launch != nil:
		l := e.Launch
		r.phase, r.mode, r.landlockABI, r.degraded = string(l.Phase), string(l.Mode), uint8(l.LandlockABI), b2u(l.Degraded)
		r.degradedReason, r.serverExe, r.serverName, r.serverVersion = l.DegradedReason, l.ServerExe, l.ServerName, l.ServerVersion
		r.protoEra, r.rootPID, r.exitStatus, r.exitReason, r.durationMS = l.ProtocolEra, uint32(l.RootPID), int32(l.ExitStatus), string(l.ExitReason), l.DurationMS
		r.serverUID, r.fileOwner = int64(l.ServerUID), l.FileOwner
		if l.LauncherUID != nil {
			r.launcherUID = int64(*l.LauncherUID)
		}
		r.launcherUIDBy = string(l.LauncherUIDBy)
		for _, ly := range l.Layers {
			r.layers = append(r.layers, encodeLayer(ly))
		}
	case e.Decision != nil:
		d := e.Decision
		r.opID, r.method, r.protoEra, r.protocolVersion, r.serverOrigin = d.OpID, d.Method, d.ProtocolEra, d.ProtocolVersion, d.ServerOrigin
		r.tool, r.actionClass, r.decision, r.approval, r.errorCode = d.Tool, string(d.ActionClass), string(d.Decision), string(d.Approval), d.ErrorCode
		r.retryCount, r.latencyMS, r.correlationID, r.startNS, r.endNS = uint32(d.RetryCount), d.LatencyMS, d.CorrelationID, d.StartNS, d.EndNS
		for _, h := range d.PathHashes {
			r.pathHashes = append(r.pathHashes, string(h))
		}
	case e.FileOp != nil:
		f := e.FileOp
		r.syscall, r.flagsClass, r.result, r.pathHash, r.pathClass = f.Syscall, string(f.FlagsClass), int32(f.Result), string(f.PathHash), string(f.PathClass)
		r.verdict, r.pid, r.comm = string(f.Verdict), uint32(f.PID), f.Comm
	case e.LandlockDenial != nil:
		l := e.LandlockDenial
		r.domain, r.pathHash, r.pathClass, r.pid, r.comm = l.Domain, string(l.PathHash), string(l.PathClass), uint32(l.PID), l.Comm
		r.blockers = append(r.blockers, l.Blockers...)
	case e.Finding != nil:
		f := e.Finding
		r.findingType, r.severity, r.tool, r.opID, r.reason = string(f.Type), string(f.Severity), f.Tool, f.OpID, f.Reason
		r.pathHash, r.pathClass = string(f.PathHash), string(f.PathClass)
		r.evidenceIDs = append(r.evidenceIDs, f.EvidenceIDs...)
	case e.Health != nil:
		h := e.Health
		r.component, r.landlockABI, r.auditStream = h.Component, uint8(h.LandlockABI), h.AuditStream
		r.hooks = append(r.hooks, h.Hooks...)
		r.dropsBPF, r.dropsQueue, r.dropsPublish, r.spool = h.DropsBPFReserve, h.DropsQueueFull, h.DropsPublishFail, h.SpoolDepth
		r.dropsKernelAudit = h.DropsKernelAudit
	}
	return r
}

func (r *row) pointers() []any {
	return []any{
		&r.eventID, &r.schemaVersion, &r.host, &r.bootID, &r.runID, &r.scopeID, &r.scopeHash, &r.kind, &r.timeNS,
		&r.tool, &r.opID, &r.pathHash, &r.pathClass, &r.pid, &r.comm,
		&r.phase, &r.mode, &r.landlockABI, &r.degraded, &r.degradedReason, &r.serverExe, &r.serverName, &r.serverVersion,
		&r.protoEra, &r.rootPID, &r.exitStatus, &r.exitReason, &r.durationMS,
		&r.method, &r.protocolVersion, &r.serverOrigin, &r.actionClass, &r.decision, &r.approval, &r.errorCode,
		&r.retryCount, &r.latencyMS, &r.pathHashes, &r.correlationID, &r.startNS, &r.endNS,
		&r.syscall, &r.flagsClass, &r.result, &r.verdict,
		&r.domain, &r.blockers,
		&r.findingType, &r.severity, &r.evidenceIDs, &r.reason,
		&r.component, &r.hooks, &r.auditStream, &r.dropsBPF, &r.dropsQueue, &r.dropsPublish, &r.spool,
		&r.layers, &r.serverUID, &r.fileOwner, &r.launcherUID, &r.dropsKernelAudit, &r.launcherUIDBy,
	}
}

// encodeLayer is a layer as the layers column stores it.
func encodeLayer(l schema.Layer) string {
	s := string(l.Name) + "=" + string(l.State)
	if l.Reason != "" {
		s += ":" + l.Reason
	}
	return s
}

func decodeLayers(in []string) []schema.Layer {
	var out []schema.Layer
	for _, s := range in {
		name, rest, _ := strings.Cut(s, "=")
		state, reason, _ := strings.Cut(rest, ":")
		out = append(out, schema.Layer{Name: schema.LayerName(name), State: schema.LayerState(state), Reason: reason})
	}
	return out
}

func hashes(in []string) []schema.PathHash {
	if len(in) == 0 {
		return nil
	}
	out := make([]schema.PathHash, len(in))
	for i, h := range in {
		out[i] = schema.PathHash(h)
	}
	return out
}

func nonEmpty(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	return in
}

// event rebuilds the event a row was flattened from.
func (r *row) event() schema.Event {
	e := schema.Event{
		EventID: r.eventID, SchemaVersion: int(r.schemaVersion), Host: r.host, BootID: r.bootID,
		RunID: r.runID, ScopeID: r.scopeID, ScopeHash: r.scopeHash, Kind: schema.Kind(r.kind), TimeNS: r.timeNS,
	}
	switch e.Kind {
	case schema.KindLaunch:
		e.Launch = &schema.Launch{Phase: schema.LaunchPhase(r.phase), Mode: schema.RunMode(r.mode), LandlockABI: int(r.landlockABI), Degraded: r.degraded != 0,
			DegradedReason: r.degradedReason, ServerExe: r.serverExe, ServerName: r.serverName, ServerVersion: r.serverVersion,
			ProtocolEra: r.protoEra, RootPID: int(r.rootPID), ExitStatus: int(r.exitStatus), ExitReason: schema.ExitReason(r.exitReason), DurationMS: r.durationMS,
			Layers: decodeLayers(r.layers), ServerUID: int(r.serverUID), FileOwner: r.fileOwner}
		if r.launcherUID >= 0 {
			uid := int(r.launcherUID)
			e.Launch.LauncherUID = &uid
			e.Launch.LauncherUIDBy = schema.LauncherUIDBy(r.launcherUIDBy)
		}
	case schema.KindDecision:
		e.Decision = &schema.Decision{OpID: r.opID, Method: r.method, ProtocolEra: r.protoEra, ProtocolVersion: r.protocolVersion,
			ServerOrigin: r.serverOrigin, Tool: r.tool, ActionClass: schema.ActionClass(r.actionClass), Decision: schema.Outcome(r.decision), Approval: schema.ApprovalState(r.approval),
			ErrorCode: r.errorCode, RetryCount: int(r.retryCount), LatencyMS: r.latencyMS, PathHashes: hashes(r.pathHashes),
			CorrelationID: r.correlationID, StartNS: r.startNS, EndNS: r.endNS}
	case schema.KindFileOp:
		e.FileOp = &schema.FileOp{Syscall: r.syscall, FlagsClass: schema.OpAccess(r.flagsClass), Result: int(r.result), PathHash: schema.PathHash(r.pathHash),
			PathClass: schema.PathClass(r.pathClass), Verdict: schema.FileVerdict(r.verdict), PID: int(r.pid), Comm: r.comm}
	case schema.KindLandlockDenial:
		e.LandlockDenial = &schema.LandlockDenial{Domain: r.domain, Blockers: nonEmpty(r.blockers), PathHash: schema.PathHash(r.pathHash),
			PathClass: schema.PathClass(r.pathClass), PID: int(r.pid), Comm: r.comm}
	case schema.KindFinding:
		e.Finding = &schema.Finding{Type: schema.FindingType(r.findingType), Severity: schema.Severity(r.severity), EvidenceIDs: nonEmpty(r.evidenceIDs), Tool: r.tool,
			OpID: r.opID, Reason: r.reason, PathHash: schema.PathHash(r.pathHash), PathClass: schema.PathClass(r.pathClass)}
	case schema.KindHealth:
		e.Health = &schema.Health{Component: r.component, Hooks: nonEmpty(r.hooks), LandlockABI: int(r.landlockABI), AuditStream: r.auditStream,
			DropsBPFReserve: r.dropsBPF, DropsQueueFull: r.dropsQueue, DropsPublishFail: r.dropsPublish, SpoolDepth: r.spool,
			DropsKernelAudit: r.dropsKernelAudit}
	}
	return e
}

// Insert writes events in one ClickHouse block. It is all or nothing from
// the caller's view: on error nothing may be assumed stored, and a retry
// of the same events is safe (duplicates collapse on event_id).
func (s *Store) Insert(ctx context.Context, events []schema.Event) error {
	if len(events) == 0 {
		return nil
	}
	if s.distributed {
		// Return only once every shard holds its rows (one replica each;
		// replication copies them on): the messages are acked after this.
		// The Distributed table computes the legacy layout's MATERIALIZED
		// event_date and sends it on, which each shard must then take.
		ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1, "insert_allow_materialized_columns": 1}))
	}
	n := s.columnCount()
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO events ("+strings.Join(insertColumns(s.layout)[:n], ", ")+")")
	if err != nil {
		return fmt.Errorf("prepare ClickHouse insert: %w", err)
	}
	defer b.Abort() //nolint:errcheck // no-op after Send
	// Column by column: one typed slice per column appended in bulk, instead
	// of boxing 58 values per row.
	var r row
	cols := make([]columnBuffer, n)
	for c, p := range r.pointers()[:n] { // pointers into r, reused for every event
		if _, instant := timeColumns[columns[c]]; instant && s.layout == LayoutCurrent {
			cols[c] = &instantColumn{field: p.(*int64), vals: make([]time.Time, 0, len(events))}
			continue
		}
		if cols[c] = newColumnBuffer(p, len(events)); cols[c] == nil {
			return fmt.Errorf("insert: column %s has an unhandled Go type %T", columns[c], p)
		}
	}
	for i := range events {
		r = flatten(&events[i])
		for _, col := range cols {
			col.add()
		}
	}
	for c, col := range cols {
		if err := b.Column(c).Append(col.values()); err != nil {
			return fmt.Errorf("append column %s to ClickHouse batch: %w", columns[c], err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert %d events into ClickHouse: %w", len(events), err)
	}
	return nil
}

// columnBuffer collects one column of an insert from the row field it
// points at.
type columnBuffer interface {
	add()        // appends the field's current value
	values() any // the typed slice clickhouse-go appends in bulk
}

type typedColumn[T any] struct {
	field *T
	vals  []T
}

func (c *typedColumn[T]) add()        { c.vals = append(c.vals, *c.field) }
func (c *typedColumn[T]) values() any { return c.vals }

// instantColumn turns Unix ns into the times a DateTime64 column takes
// (clickhouse-go reads a bare int64 there as milliseconds).
type instantColumn struct {
	field *int64
	vals  []time.Time
}

func (c *instantColumn) add()        { c.vals = append(c.vals, time.Unix(0, *c.field).UTC()) }
func (c *instantColumn) values() any { return c.vals }

func newTypedColumn[T any](field *T, n int) columnBuffer {
	return &typedColumn[T]{field: field, vals: make([]T, 0, n)}
}

// newColumnBuffer returns nil for a field type the table does not use.
func newColumnBuffer(field any, n int) columnBuffer {
	switch f := field.(type) {
	case *string:
		return newTypedColumn(f, n)
	case *uint8:
		return newTypedColumn(f, n)
	case *uint32:
		return newTypedColumn(f, n)
	case *int32:
		return newTypedColumn(f, n)
	case *int64:
		return newTypedColumn(f, n)
	case *uint64:
		return newTypedColumn(f, n)
	case *float64:
		return newTypedColumn(f, n)
	case *[]string:
		return newTypedColumn(f, n)
	}
	return nil
}

// selectSQL reads rows back. No FINAL (on 18.16 it merges far more than
// the filtered rows): read drops duplicate event ids itself.
func (s *Store) selectSQL() string {
	return "SELECT " + strings.Join(columns[:s.columnCount()], ", ") + " FROM events"
}

// columnCount is how many of columns the events table has: all but the
// lateColumns from the first one its migrations have not added yet (0006
// launcher_uid, 0007 drops_kernel_audit, 0008 launcher_uid_by).
func (s *Store) columnCount() int {
	if s.ncols == 0 {
		return len(columns)
	}
	return s.ncols
}

// ReadHealthSince returns health events that happened at or after sinceNS.
func (s *Store) ReadHealthSince(ctx context.Context, sinceNS int64) ([]schema.Event, error) {
	return s.read(ctx, s.selectSQL()+" WHERE kind = 'health' AND time_ns >= {since:Int64} ORDER BY time_ns, event_id LIMIT 100000",
		Params{"since": strconv.FormatInt(sinceNS, 10)})
}

// read runs a SELECT of selectSQL's columns and returns one event per
// event id (redelivered duplicates not merged yet are dropped here).
func (s *Store) read(ctx context.Context, query string, p Params) ([]schema.Event, error) {
	rows, err := s.Query(ctx, query, p)
	if err != nil {
		return nil, fmt.Errorf("read events from ClickHouse: %w", err)
	}
	defer rows.Close()
	var out []schema.Event
	seen := map[string]bool{}
	for rows.Next() {
		var r row
		if err := rows.Scan(r.pointers()[:s.columnCount()]...); err != nil {
			return nil, fmt.Errorf("read events from ClickHouse: %w", err)
		}
		if seen[r.eventID] {
			continue
		}
		seen[r.eventID] = true
		out = append(out, r.event())
	}
	return out, rows.Err()
}

// RunRef names a run: run ids are unique, and the host lets the primary key
// (kind, host, run_id, ...) find a run's rows without a full scan.
type RunRef struct{ Host, RunID string }

func (r RunRef) params(limit int) Params {
	return Params{"host": r.Host, "run": r.RunID, "limit": strconv.Itoa(max(limit, 0))}
}

// ReadRun returns every event of run, duplicates dropped, oldest first.
func (s *Store) ReadRun(ctx context.Context, run RunRef, limit int) ([]schema.Event, error) {
	return s.read(ctx, s.selectSQL()+" WHERE host = {host:String} AND run_id = {run:String} ORDER BY time_ns, event_id LIMIT {limit:UInt64}", run.params(limit))
}

// RunHosts lists the hosts a run's events came from (one, unless a run id
// was reused). It reads runs_rollup first (launches, decisions, denials
// and findings, one small row per run and minute) together with the other
// small kinds (health) of the events table, found through its primary key
// (kind first), instead of scanning run_id over every stored event; the
// file operations are looked at only when a run has nothing else (or its
// rollup rows expired before its events).
func (s *Store) RunHosts(ctx context.Context, runID string) ([]string, error) {
	for _, sql := range runHostsSQL {
		rows, err := s.Query(ctx, sql, Params{"run": runID})
		if err != nil {
			return nil, fmt.Errorf("find the run's host in ClickHouse: %w", err)
		}
		var hosts []string
		for rows.Next() {
			var h string
			if err := rows.Scan(&h); err != nil {
				rows.Close()
				return nil, err
			}
			hosts = append(hosts, h)
		}
		err = rows.Err()
		rows.Close()
		if err != nil || len(hosts) > 0 {
			return hosts, err
		}
	}
	return nil, nil
}

// AmbiguousRunError is RunHost's error for a run id that events of more
// than one host carry.
type AmbiguousRunError struct {
	Run   string
	Hosts []string
}

func (e *AmbiguousRunError) Error() string {
	hosts := make([]string, len(e.Hosts))
	for i, h := range e.Hosts {
		hosts[i] = strconv.Quote(h)
	}
	return fmt.Sprintf("run %q has events of %d hosts (%s): a run has one host, so another host reused its id or forged events under it; pass --host to read one host's events",
		e.Run, len(e.Hosts), strings.Join(hosts, ", "))
}

// RunHost is the host of a run's events ("" when none are stored). A run
// has one host: another host's events under its id are a forgery (a host
// may publish any run id in its own name) or a reuse, and merged with the
// run's they would read as its own; so a run id that events of several
// hosts carry is an *AmbiguousRunError, and the caller must name the host.
func (s *Store) RunHost(ctx context.Context, runID string) (string, error) {
	hosts, err := s.RunHosts(ctx, runID)
	switch {
	case err != nil:
		return "", err
	case len(hosts) > 1:
		return "", &AmbiguousRunError{Run: runID, Hosts: hosts}
	case len(hosts) == 1:
		return hosts[0], nil
	}
	return "", nil
}

// runHostsSQL are RunHosts' look-ups, cheapest first. The first one's
// kinds outside the rollup are named as != conditions, each of which the
// primary key (kind, host, run_id, ...) turns into ranges.
var runHostsSQL = []string{
	`SELECT DISTINCT host FROM (
    SELECT host FROM runs_rollup WHERE run_id = {run:String}
    UNION ALL
    SELECT host FROM events
    WHERE kind != 'file_op' AND kind != 'launch' AND kind != 'decision' AND kind != 'landlock_denial' AND kind != 'finding'
      AND run_id = {run:String}
) ORDER BY host`,
	"SELECT DISTINCT host FROM events WHERE run_id = {run:String} ORDER BY host",
}

// ReadRunArrived is ReadRun plus when each event arrived: the first time
// it was inserted (inserted_at, server clock, rounded up to its resolution:
// the next second in the legacy layout, millisecond in the current), as
// Unix ns by event id.
func (s *Store) ReadRunArrived(ctx context.Context, run RunRef, limit int) ([]schema.Event, map[string]int64, error) {
	rows, err := s.Query(ctx, "SELECT "+strings.Join(columns[:s.columnCount()], ", ")+", inserted_at FROM events WHERE host = {host:String} AND run_id = {run:String} ORDER BY time_ns, event_id LIMIT {limit:UInt64}", run.params(limit))
	resolution := time.Second
	if s.layout == LayoutCurrent {
		resolution = time.Millisecond
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read events from ClickHouse: %w", err)
	}
	defer rows.Close()
	var out []schema.Event
	arrived := map[string]int64{}
	for rows.Next() {
		var r row
		var at time.Time
		if err := rows.Scan(append(r.pointers()[:s.columnCount()], &at)...); err != nil {
			return nil, nil, fmt.Errorf("read events from ClickHouse: %w", err)
		}
		ns := at.Add(resolution).UnixNano()
		if prev, ok := arrived[r.eventID]; ok {
			arrived[r.eventID] = min(prev, ns)
			continue // a redelivered duplicate not merged yet
		}
		arrived[r.eventID] = ns
		out = append(out, r.event())
	}
	return out, arrived, rows.Err()
}

// RunsInsertedSince lists runs with an event inserted at or after since
// (server clock, second resolution), at most limit.
func (s *Store) RunsInsertedSince(ctx context.Context, sinceUnix int64, limit int) ([]RunRef, error) {
	rows, err := s.Query(ctx, "SELECT DISTINCT host, run_id FROM events WHERE inserted_at >= toDateTime({since:Int64}) AND run_id != '' LIMIT {limit:UInt64}",
		Params{"since": strconv.FormatInt(sinceUnix, 10), "limit": strconv.Itoa(max(limit, 0))})
	if err != nil {
		return nil, fmt.Errorf("list recent runs in ClickHouse: %w", err)
	}
	return scanRunRefs(rows)
}

// ReadDaemonHealth returns the health reports of host's daemon that
// happened at or after sinceNS, oldest first, at most limit.
func (s *Store) ReadDaemonHealth(ctx context.Context, host string, sinceNS int64, limit int) ([]schema.Event, error) {
	return s.read(ctx, s.selectSQL()+" WHERE kind = 'health' AND host = {host:String} AND component = 'daemon' AND time_ns >= {since:Int64} ORDER BY time_ns, event_id LIMIT {limit:UInt64}",
		Params{"host": host, "since": strconv.FormatInt(sinceNS, 10), "limit": strconv.Itoa(max(limit, 0))})
}

// RunsOnHostSince lists the runs of host with an event that happened at or
// after sinceNS, at most limit.
func (s *Store) RunsOnHostSince(ctx context.Context, host string, sinceNS int64, limit int) ([]RunRef, error) {
	rows, err := s.Query(ctx, "SELECT DISTINCT host, run_id FROM events WHERE host = {host:String} AND time_ns >= {since:Int64} AND run_id != '' LIMIT {limit:UInt64}",
		Params{"host": host, "since": strconv.FormatInt(sinceNS, 10), "limit": strconv.Itoa(max(limit, 0))})
	if err != nil {
		return nil, fmt.Errorf("list a host's runs in ClickHouse: %w", err)
	}
	return scanRunRefs(rows)
}

// scanRunRefs reads rows of (host, run_id) and closes them.
func scanRunRefs(rows driver.Rows) ([]RunRef, error) {
	defer rows.Close()
	var out []RunRef
	for rows.Next() {
		var r RunRef
		if err := rows.Scan(&r.Host, &r.RunID); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
