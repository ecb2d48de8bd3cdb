-- The denials query as a plain scan of the events table (no rollup): the
-- reference the rollup-backed schema/clickhouse/queries/denials.sql must
-- match exactly (TestDenialsRollupMatchesScan).
-- What was refused, by scope: the proxy's denials (by error code)
-- and the kernel's Landlock denial records (by path class), per tool.
-- Duplicates collapse on event_id (counted as 64-bit CityHash values).
-- Only denials of runs (a denial outside any run has no scope).
-- Parameters: from, to (Unix ns), host, scope ('' = all), limit.
SELECT
    scope_id,
    if(kind = 'decision', 'proxy', 'kernel') AS layer,
    if(kind = 'decision', error_code, path_class) AS reason,
    tool,
    uniqExact(cityHash64(event_id)) AS denials,
    uniqExact(cityHash64(run_id)) AS runs,
    uniqExact(cityHash64(host)) AS hosts,
    max(time_ns) AS last_ns
FROM events
WHERE kind IN ('decision', 'landlock_denial')
  AND (kind = 'landlock_denial' OR decision = 'deny')
  AND time_ns >= {from:Int64} AND time_ns < {to:Int64}
  AND run_id != ''
  AND ({host:String} = '' OR host = {host:String})
  AND ({scope:String} = '' OR scope_id = {scope:String})
GROUP BY scope_id, layer, reason, tool
ORDER BY denials DESC, scope_id, layer, reason, tool
LIMIT {limit:UInt32}
