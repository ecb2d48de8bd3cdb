-- denials: what was refused, by scope: the proxy's denials (by error code)
-- and the kernel's Landlock denial records (by path class), per tool.
-- Duplicates collapse on event_id (counted as 64-bit CityHash values, as
-- are runs and hosts).
-- Without --host (with or without --scope: scope_id is in the rollup's
-- sorting key) it reads denials_rollup (migration 0003): the whole days
-- inside [from, to), the whole hours and minutes of the partial days and
-- hours, and the events of the two partial minutes at the edges from the
-- events table (found through the primary key by run, from runs_rollup);
-- the result is exact, and an event read twice is still counted once.
-- Only denials of runs are listed: a Landlock denial the daemon could not
-- tie to a run (another program's domain, or one older than the daemon)
-- has no scope, and `query health` counts those per host
-- (unattributed_denials). With --host it
-- scans the events table instead (a filtered scan is fast: the primary key
-- starts with kind, host); the rollup keeps no host.
-- The edge runs' subquery is GLOBAL IN, so on a cluster it runs once and
-- every shard gets its result.
-- The same query as a plain scan: collector/query/testdata/denials_scan.sql.
-- Parameters: from, to (Unix ns), host, scope ('' = all), limit.
SELECT
    scope_id, layer, reason, tool,
    uniqExactMerge(denials) AS denials,
    uniqExactMerge(runs) AS runs,
    uniqExactMerge(hosts) AS hosts,
    maxMerge(last_ns) AS last_ns
FROM
(
    -- whole days
    SELECT scope_id, layer, reason, tool, denials, runs, hosts, last_ns
    FROM denials_rollup
    WHERE level = 1 AND {host:String} = '' AND ({scope:String} = '' OR scope_id = {scope:String}) AND scope_id != ''
      AND bucket >= (intDiv({from:Int64}, toInt64(86400000000000)) + (modulo({from:Int64}, toInt64(86400000000000)) > 0)) AND bucket < (intDiv({to:Int64}, toInt64(86400000000000)) - (modulo({to:Int64}, toInt64(86400000000000)) < 0))

    UNION ALL
    -- whole hours of the partial days
    SELECT scope_id, layer, reason, tool, denials, runs, hosts, last_ns
    FROM denials_rollup
    WHERE level = 2 AND {host:String} = '' AND ({scope:String} = '' OR scope_id = {scope:String}) AND scope_id != ''
      AND bucket >= (intDiv({from:Int64}, toInt64(3600000000000)) + (modulo({from:Int64}, toInt64(3600000000000)) > 0)) AND bucket < (intDiv({to:Int64}, toInt64(3600000000000)) - (modulo({to:Int64}, toInt64(3600000000000)) < 0))
      AND (bucket < (intDiv({from:Int64}, toInt64(86400000000000)) + (modulo({from:Int64}, toInt64(86400000000000)) > 0)) * 24 OR bucket >= (intDiv({to:Int64}, toInt64(86400000000000)) - (modulo({to:Int64}, toInt64(86400000000000)) < 0)) * 24)

    UNION ALL
    -- whole minutes of the partial hours
    SELECT scope_id, layer, reason, tool, denials, runs, hosts, last_ns
    FROM denials_rollup
    WHERE level = 3 AND {host:String} = '' AND ({scope:String} = '' OR scope_id = {scope:String}) AND scope_id != ''
      AND bucket >= (intDiv({from:Int64}, toInt64(60000000000)) + (modulo({from:Int64}, toInt64(60000000000)) > 0)) AND bucket < (intDiv({to:Int64}, toInt64(60000000000)) - (modulo({to:Int64}, toInt64(60000000000)) < 0))
      AND (bucket < (intDiv({from:Int64}, toInt64(3600000000000)) + (modulo({from:Int64}, toInt64(3600000000000)) > 0)) * 60 OR bucket >= (intDiv({to:Int64}, toInt64(3600000000000)) - (modulo({to:Int64}, toInt64(3600000000000)) < 0)) * 60)

    UNION ALL
    -- the partial minutes, by run
    SELECT
        scope_id,
        if(kind = 'decision', 'proxy', 'kernel') AS layer,
        if(kind = 'decision', error_code, path_class) AS reason,
        tool,
        uniqExactState(cityHash64(event_id)),
        uniqExactState(cityHash64(run_id)),
        uniqExactState(cityHash64(host)),
        maxState(time_ns)
    FROM events
    WHERE kind IN ('decision', 'landlock_denial')
      AND (kind = 'landlock_denial' OR decision = 'deny')
      AND time_ns >= {from:Int64} AND time_ns < {to:Int64}
      AND {host:String} = '' AND ({scope:String} = '' OR scope_id = {scope:String})
      AND (time_ns < (intDiv({from:Int64}, toInt64(60000000000)) + (modulo({from:Int64}, toInt64(60000000000)) > 0)) * toInt64(60000000000)
        OR time_ns >= (intDiv({to:Int64}, toInt64(60000000000)) - (modulo({to:Int64}, toInt64(60000000000)) < 0)) * toInt64(60000000000)
        OR intDiv({from:Int64}, toInt64(60000000000)) >= 153722867 OR intDiv({to:Int64}, toInt64(60000000000)) <= -153722867)
      AND (host, run_id) GLOBAL IN
      (
          SELECT host, run_id
          FROM runs_rollup
          WHERE {host:String} = '' AND ({scope:String} = '' OR scope_id = {scope:String})
            AND (minute = (intDiv({from:Int64}, toInt64(60000000000)) - (modulo({from:Int64}, toInt64(60000000000)) < 0)) OR minute = (intDiv({to:Int64}, toInt64(60000000000)) - (modulo({to:Int64}, toInt64(60000000000)) < 0)))
      )
    GROUP BY scope_id, layer, reason, tool
    UNION ALL
    -- --host: a scan of the events table
    SELECT
        scope_id,
        if(kind = 'decision', 'proxy', 'kernel') AS layer,
        if(kind = 'decision', error_code, path_class) AS reason,
        tool,
        uniqExactState(cityHash64(event_id)),
        uniqExactState(cityHash64(run_id)),
        uniqExactState(cityHash64(host)),
        maxState(time_ns)
    FROM events
    WHERE kind IN ('decision', 'landlock_denial')
      AND (kind = 'landlock_denial' OR decision = 'deny')
      AND time_ns >= {from:Int64} AND time_ns < {to:Int64}
      AND {host:String} != ''
      AND run_id != ''
      AND ({host:String} = '' OR host = {host:String})
      AND ({scope:String} = '' OR scope_id = {scope:String})
    GROUP BY scope_id, layer, reason, tool
)
GROUP BY scope_id, layer, reason, tool
ORDER BY denials DESC, scope_id, layer, reason, tool
LIMIT {limit:UInt32}
