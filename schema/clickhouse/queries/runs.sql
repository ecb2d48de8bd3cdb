-- runs: every run in the time range with its verdict and the server it
-- ran: serverInfo's name and version and the protocol era from the launch
-- records (server, server_version, protocol_era; identified = 0 when the
-- server never identified itself: the proxy never completed a handshake,
-- or the run had no proxy), and the executable's base name (server_exe).
-- Name and version are the server's own, untrusted strings (tokens of at
-- most 128 bytes in valid records): never build SQL from them, and escape
-- them for a terminal (mcpwarden query does).
--   ESCAPE     an operation succeeded outside the scope and runtime profile
--   ATTENTION  a critical or high finding (PROXY_GAP, UNDECLARED_WRITE, ...)
--   REVIEW     only medium or low findings
--   CLEAN      no findings
-- Duplicates collapse: every count is over distinct event ids (as 64-bit
-- CityHash values: a collision needs ~4 billion events in one group).
-- Reads runs_rollup (migrations 0002 and runs_server: aggregate states per
-- minute and run, kept by materialized views) for the minutes wholly inside
-- [from, to), and the events of the two partial minutes at the edges from
-- the events table, found by run through its primary key: the result is exact for any
-- range, and an event read from both sides is still counted once. Only the
-- candidate runs' states are merged: the `limit` latest by their whole
-- minutes plus every run with events in an edge minute (together a
-- superset of the `limit` latest). Ties are broken by run_id. The
-- subqueries are GLOBAL IN: on a cluster (Distributed tables) they run once
-- and every shard gets their result; on one server it is a plain IN.
-- With --scope, ClickHouse reads runs_rollup's projection by_scope (migration
-- 0005 of the current layout: sorted by scope first) instead of every
-- granule of the range; the result is the same.
-- The same query as a plain scan: collector/query/testdata/runs_scan.sql.
-- Parameters: from, to (Unix ns), host ('' = all), scope ('' = all), limit.
SELECT
    run_id,
    any(host) AS host,
    anyIf(scope_id, scope_id != '') AS scope_id,
    anyIfMerge(mode) AS mode,
    anyIfMerge(server) AS server,
    anyIfMerge(server_version) AS server_version,
    anyIfMerge(protocol_era) AS protocol_era,
    anyIfMerge(server_exe) AS server_exe,
    protocol_era != '' AS identified,
    minMerge(first_ns) AS first_ns,
    maxMerge(last_ns) AS last_ns,
    uniqExactIfMerge(calls_allowed) AS calls_allowed,
    uniqExactIfMerge(calls_denied) AS calls_denied,
    uniqExactIfMerge(kernel_denials) AS kernel_denials,
    uniqExactIfMerge(findings) AS findings,
    multiIf(
        uniqExactIfMerge(escapes) > 0, 'ESCAPE',
        uniqExactIfMerge(serious) > 0, 'ATTENTION',
        findings > 0, 'REVIEW',
        'CLEAN') AS verdict
FROM
(
    -- Whole minutes inside [from, to), for the candidates only: the runs
    -- latest by their whole minutes, plus every run with events in the
    -- two partial minutes (together a superset of the latest runs).
    SELECT host, scope_id, run_id, first_ns, last_ns, mode, server,
        server_version, protocol_era, server_exe, calls_allowed, calls_denied, kernel_denials, findings, escapes, serious
    FROM runs_rollup
    PREWHERE run_id GLOBAL IN
    (
        SELECT run_id
        FROM runs_rollup
        WHERE minute >= intDiv({from:Int64}, toInt64(60000000000)) + (modulo({from:Int64}, toInt64(60000000000)) > 0)
          AND minute < intDiv({to:Int64}, toInt64(60000000000)) - (modulo({to:Int64}, toInt64(60000000000)) < 0)
          AND ({host:String} = '' OR host = {host:String})
          AND ({scope:String} = '' OR scope_id = {scope:String})
        GROUP BY run_id
        ORDER BY maxMerge(last_ns) DESC, run_id
        LIMIT {limit:UInt32}
    )
    OR run_id GLOBAL IN
    (
        SELECT run_id
        FROM runs_rollup
        WHERE (minute = intDiv({from:Int64}, toInt64(60000000000)) - (modulo({from:Int64}, toInt64(60000000000)) < 0) OR minute = intDiv({to:Int64}, toInt64(60000000000)) - (modulo({to:Int64}, toInt64(60000000000)) < 0))
          AND ({host:String} = '' OR host = {host:String})
          AND ({scope:String} = '' OR scope_id = {scope:String})
    )
    WHERE minute >= intDiv({from:Int64}, toInt64(60000000000)) + (modulo({from:Int64}, toInt64(60000000000)) > 0)
      AND minute < intDiv({to:Int64}, toInt64(60000000000)) - (modulo({to:Int64}, toInt64(60000000000)) < 0)
      AND ({host:String} = '' OR host = {host:String})
      AND ({scope:String} = '' OR scope_id = {scope:String})
    UNION ALL
    -- The partial minutes at the edges, from the events table, found by
    -- run through its primary key.
    SELECT host, scope_id, run_id,
        minState(time_ns), maxState(time_ns),
        anyIfState(mode, kind = 'launch'),
        anyIfState(server_name, server_name != ''),
        anyIfState(server_version, kind = 'launch' AND server_name != ''),
        anyIfState(protocol_era, kind = 'launch' AND protocol_era != ''),
        anyIfState(server_exe, kind = 'launch' AND server_exe != ''),
        uniqExactIfState(cityHash64(event_id), kind = 'decision' AND decision = 'allow'),
        uniqExactIfState(cityHash64(event_id), kind = 'decision' AND decision = 'deny'),
        uniqExactIfState(cityHash64(event_id), kind = 'landlock_denial'),
        uniqExactIfState(cityHash64(event_id), kind = 'finding'),
        uniqExactIfState(cityHash64(event_id), kind = 'finding' AND finding_type = 'ESCAPE'),
        uniqExactIfState(cityHash64(event_id), kind = 'finding' AND severity IN ('critical', 'high'))
    FROM events
    WHERE kind IN ('launch', 'decision', 'landlock_denial', 'finding')
      AND (host, run_id) GLOBAL IN
      (
        SELECT host, run_id
        FROM runs_rollup
        WHERE (minute = intDiv({from:Int64}, toInt64(60000000000)) - (modulo({from:Int64}, toInt64(60000000000)) < 0) OR minute = intDiv({to:Int64}, toInt64(60000000000)) - (modulo({to:Int64}, toInt64(60000000000)) < 0))
          AND ({host:String} = '' OR host = {host:String})
          AND ({scope:String} = '' OR scope_id = {scope:String})
      )
      AND time_ns >= {from:Int64} AND time_ns < {to:Int64}
      AND (time_ns < (intDiv({from:Int64}, toInt64(60000000000)) + (modulo({from:Int64}, toInt64(60000000000)) > 0)) * toInt64(60000000000)
        OR time_ns >= (intDiv({to:Int64}, toInt64(60000000000)) - (modulo({to:Int64}, toInt64(60000000000)) < 0)) * toInt64(60000000000)
        OR intDiv({from:Int64}, toInt64(60000000000)) >= 153722867 OR intDiv({to:Int64}, toInt64(60000000000)) <= -153722867)
      AND ({host:String} = '' OR host = {host:String})
      AND ({scope:String} = '' OR scope_id = {scope:String})
    GROUP BY host, scope_id, run_id
)
GROUP BY run_id
ORDER BY last_ns DESC, run_id
LIMIT {limit:UInt32}
