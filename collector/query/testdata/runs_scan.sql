-- The runs query as a plain scan of the events table (no rollup): the
-- reference the rollup-backed schema/clickhouse/queries/runs.sql must
-- match exactly (TestRunsRollupMatchesScan).
--   ESCAPE     an operation succeeded outside the scope and runtime profile
--   ATTENTION  a critical or high finding (PROXY_GAP, UNDECLARED_WRITE, ...)
--   REVIEW     only medium or low findings
--   CLEAN      no findings
-- Duplicates collapse: every count is over distinct event ids (as 64-bit
-- CityHash values: a collision needs ~4 billion events in one group).
-- Parameters: from, to (Unix ns), host ('' = all), scope ('' = all), limit.
SELECT
    run_id,
    any(host) AS host,
    anyIf(scope_id, scope_id != '') AS scope_id,
    anyIf(mode, kind = 'launch') AS mode,
    anyIf(server_name, server_name != '') AS server,
    anyIf(server_version, kind = 'launch' AND server_name != '') AS server_version,
    anyIf(protocol_era, kind = 'launch' AND protocol_era != '') AS protocol_era,
    anyIf(server_exe, kind = 'launch' AND server_exe != '') AS server_exe,
    protocol_era != '' AS identified,
    min(time_ns) AS first_ns,
    max(time_ns) AS last_ns,
    uniqExactIf(cityHash64(event_id), kind = 'decision' AND decision = 'allow') AS calls_allowed,
    uniqExactIf(cityHash64(event_id), kind = 'decision' AND decision = 'deny') AS calls_denied,
    uniqExactIf(cityHash64(event_id), kind = 'landlock_denial') AS kernel_denials,
    uniqExactIf(cityHash64(event_id), kind = 'finding') AS findings,
    multiIf(
        uniqExactIf(cityHash64(event_id), kind = 'finding' AND finding_type = 'ESCAPE') > 0, 'ESCAPE',
        uniqExactIf(cityHash64(event_id), kind = 'finding' AND severity IN ('critical', 'high')) > 0, 'ATTENTION',
        findings > 0, 'REVIEW',
        'CLEAN') AS verdict
FROM
(
    SELECT run_id, host, scope_id, kind, mode, server_name, server_version, protocol_era, server_exe, time_ns, event_id, decision, finding_type, severity
    FROM events
    WHERE kind IN ('launch', 'decision', 'landlock_denial', 'finding')
      AND run_id != ''
      AND time_ns >= {from:Int64} AND time_ns < {to:Int64}
      AND ({host:String} = '' OR host = {host:String})
      AND ({scope:String} = '' OR scope_id = {scope:String})
)
GROUP BY run_id
ORDER BY last_ns DESC, run_id
LIMIT {limit:UInt32}
