-- denials_rollup: aggregate states of denials (the proxy's denied calls and
-- the kernel's Landlock denial records) per time bucket, scope, layer,
-- reason and tool, kept by a materialized view, so the `denials` query does
-- not rescan every decision. The current releases' layout (../legacy has
-- 18.16's): the same states, LowCardinality names, and a TTL set by
-- `mcpwarden collect --migrate` (--retention).
--
-- Every denial is stored at three levels: 1 = day, 2 = hour, 3 = minute
-- (bucket = floor(time_ns / level width)). A query over [from, to) reads
-- whole days, then whole hours and whole minutes in the partial days and
-- hours, and the partial minutes at its edges from the events table: few
-- rows for any range, and exact.
--
-- Minute rows also keep the host in edge_host ('' at the other levels): the query finds
-- the hosts of run-less denials in its edge minutes through them.
--
-- As in runs_rollup, every aggregate is idempotent (uniqExact states over
-- hashes of event_id, run_id and host; max of time_ns), so redelivered
-- duplicates and a repeated backfill change no result.
CREATE TABLE IF NOT EXISTS denials_rollup
(
    level           UInt8,
    bucket          Int64,
    scope_id        LowCardinality(String),
    layer           LowCardinality(String),
    reason          LowCardinality(String),
    tool            LowCardinality(String),
    edge_host       LowCardinality(String),
    denials         AggregateFunction(uniqExact, UInt64),
    runs            AggregateFunction(uniqExact, UInt64),
    hosts           AggregateFunction(uniqExact, UInt64),
    last_ns         AggregateFunction(max, Int64)
)
ENGINE = AggregatingMergeTree()
PARTITION BY (level, toYYYYMM(toDate(toDateTime(bucket * [86400, 3600, 60][level]))))
ORDER BY (level, bucket, scope_id, layer, reason, tool, edge_host)
SETTINGS index_granularity = 1024;

CREATE MATERIALIZED VIEW IF NOT EXISTS denials_rollup_mv TO denials_rollup AS
SELECT
    arrayJoin([toUInt8(1), toUInt8(2), toUInt8(3)]) AS level,
    intDiv(time_ns, [toInt64(86400000000000), toInt64(3600000000000), toInt64(60000000000)][level])
        - (modulo(time_ns, [toInt64(86400000000000), toInt64(3600000000000), toInt64(60000000000)][level]) < 0) AS bucket,
    scope_id,
    if(kind = 'decision', 'proxy', 'kernel') AS layer,
    if(kind = 'decision', error_code, path_class) AS reason,
    tool,
    if(level = 3, host, '') AS edge_host,
    uniqExactState(cityHash64(event_id)) AS denials,
    uniqExactState(cityHash64(run_id)) AS runs,
    uniqExactState(cityHash64(host)) AS hosts,
    maxState(time_ns) AS last_ns
FROM events
WHERE kind IN ('decision', 'landlock_denial') AND (kind = 'landlock_denial' OR decision = 'deny')
GROUP BY level, bucket, scope_id, layer, reason, tool, edge_host;

-- Backfill (idempotent, see above).
INSERT INTO denials_rollup
SELECT
    arrayJoin([toUInt8(1), toUInt8(2), toUInt8(3)]) AS level,
    intDiv(time_ns, [toInt64(86400000000000), toInt64(3600000000000), toInt64(60000000000)][level])
        - (modulo(time_ns, [toInt64(86400000000000), toInt64(3600000000000), toInt64(60000000000)][level]) < 0) AS bucket,
    scope_id,
    if(kind = 'decision', 'proxy', 'kernel') AS layer,
    if(kind = 'decision', error_code, path_class) AS reason,
    tool,
    if(level = 3, host, '') AS edge_host,
    uniqExactState(cityHash64(event_id)),
    uniqExactState(cityHash64(run_id)),
    uniqExactState(cityHash64(host)),
    maxState(time_ns)
FROM events
WHERE kind IN ('decision', 'landlock_denial') AND (kind = 'landlock_denial' OR decision = 'deny')
GROUP BY level, bucket, scope_id, layer, reason, tool, edge_host;
