-- health: observation health by host: what its observers run on (from the
-- latest health report), what they lost (highest drop counters; the
-- daemon's drops_kernel_audit counts the audit records the kernel itself
-- lost while it watched, whose runs carry kernel_audit_lost gaps), the
-- OBSERVATION_GAP findings (degraded Landlock, runs without kernel events,
-- drops), and the Landlock denials the daemon could not tie to any run
-- (another program's domain, or a domain older than the daemon): these are
-- in no run's query. A host with gap findings and no health report has no
-- daemon.
-- Parameters: from, to (Unix ns), host ('' = all), limit.
SELECT
    host,
    arrayStringConcat(groupUniqArrayIf(component, kind = 'health'), ',') AS components,
    argMaxIf(arrayStringConcat(hooks, ','), time_ns, kind = 'health') AS hooks,
    argMaxIf(landlock_abi, time_ns, kind = 'health') AS landlock_abi,
    argMaxIf(audit_stream, time_ns, kind = 'health') AS audit_stream,
    maxIf(drops_bpf_reserve, kind = 'health') AS drops_bpf,
    maxIf(drops_queue_full, kind = 'health') AS drops_queue,
    maxIf(drops_publish_fail, kind = 'health') AS drops_publish,
    maxIf(drops_kernel_audit, kind = 'health') AS drops_kernel_audit,
    argMaxIf(spool_depth, time_ns, kind = 'health') AS spool_depth,
    maxIf(time_ns, kind = 'health') AS last_report_ns,
    uniqExactIf(cityHash64(event_id), kind = 'finding') AS gap_findings,
    uniqExactIf(cityHash64(event_id), kind = 'landlock_denial') AS unattributed_denials
FROM events
WHERE (kind = 'health' OR (kind = 'finding' AND finding_type = 'OBSERVATION_GAP') OR (kind = 'landlock_denial' AND run_id = ''))
  AND time_ns >= {from:Int64} AND time_ns < {to:Int64}
  AND ({host:String} = '' OR host = {host:String})
GROUP BY host
ORDER BY gap_findings DESC, host
LIMIT {limit:UInt32}
