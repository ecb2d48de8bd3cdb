-- timeline: the per-call timeline of one run, oldest first: launch, every
-- tool-call decision (with its duration), the kernel's file operations and
-- denials, and the findings; one row per distinct event (GROUP BY event_id
-- collapses redelivered duplicates before merges do).
-- The host lets the primary key (kind, host, run_id, ...) find the run's
-- ranges instead of scanning every granule; `mcpwarden query timeline`
-- looks it up first (SELECT DISTINCT host FROM events WHERE run_id = ...).
-- Parameters: run (run id), host (the run's host), limit.
SELECT
    any(time_ns) AS time_ns,
    any(kind) AS kind,
    any(op_id) AS op_id,
    any(tool) AS tool,
    multiIf(kind = 'decision', concat(any(decision), if(any(error_code) != '', concat(':', any(error_code)), '')),
            kind = 'file_op', any(verdict),
            kind = 'finding', concat(any(finding_type), ':', any(severity)),
            kind = 'launch', concat(any(phase), ':', any(mode)),
            kind = 'landlock_denial', arrayStringConcat(any(blockers), ','),
            '') AS what,
    multiIf(kind = 'decision', any(action_class), kind = 'file_op', concat(any(syscall), ':', any(flags_class)), '') AS detail,
    any(path_class) AS path_class,
    substring(any(path_hash), 1, 16) AS path,
    if(kind = 'decision', any(end_ns) - any(start_ns), 0) AS call_ns,
    event_id
FROM
(
    SELECT time_ns, kind, op_id, tool, decision, error_code, verdict, finding_type, severity, phase, mode,
           blockers, action_class, syscall, flags_class, path_class, path_hash, start_ns, end_ns, event_id
    FROM events
    WHERE run_id = {run:String}
      AND kind IN ('launch', 'decision', 'file_op', 'landlock_denial', 'finding', 'health')
      AND host = {host:String}
)
GROUP BY event_id
ORDER BY time_ns, event_id
LIMIT {limit:UInt32}
