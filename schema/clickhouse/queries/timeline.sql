-- timeline: the per-call timeline of one run, oldest first: launch, every
-- tool-call decision (with its window), the kernel's file operations and
-- denials, and the findings, one row per distinct event.
-- Parameters: run (run id), limit.
SELECT
    time_ns,
    kind,
    op_id,
    tool,
    multiIf(kind = 'decision', concat(decision, if(error_code != '', concat(':', error_code), '')),
            kind = 'file_op', verdict,
            kind = 'finding', concat(finding_type, ':', severity),
            kind = 'launch', concat(phase, ':', mode),
            kind = 'landlock_denial', arrayStringConcat(blockers, ','),
            '') AS what,
    multiIf(kind = 'decision', action_class, kind = 'file_op', concat(syscall, ':', flags_class), '') AS detail,
    path_class,
    substring(path_hash, 1, 16) AS path,
    if(kind = 'decision', end_ns - start_ns, 0) AS call_ns,
    event_id
FROM events FINAL
WHERE run_id = {run:String}
ORDER BY time_ns, event_id
LIMIT {limit:UInt32}
