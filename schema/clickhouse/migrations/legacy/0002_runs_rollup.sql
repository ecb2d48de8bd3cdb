-- runs_rollup: one row per (minute, host, scope, run) holding aggregate
-- states, maintained at insert by a materialized view, so the `runs` query
-- does not rescan every decision of every run. Runs on ClickHouse 18.16 and
-- current releases (AggregatingMergeTree, MATERIALIZED VIEW ... TO,
-- -State/-Merge combinators).
--
-- Duplicates (JetStream redelivery, spool replays) must not inflate a
-- count, and a materialized view sees only the block being inserted, so
-- every aggregate is idempotent: counts are uniqExact states over
-- cityHash64(event_id), times min/max, names any. Inserting an event twice,
-- or backfilling rows the view already saw, changes no result.
--
-- minute = floor(time_ns / 60 s). The query reads the minutes wholly inside
-- [from, to) here and the events of the two partial minutes at the edges
-- from the events table (found by run through its primary key), so its
-- result is exact for any range.
CREATE TABLE IF NOT EXISTS runs_rollup
(
    minute          Int64,
    host            String,
    scope_id        String,
    run_id          String,
    first_ns        AggregateFunction(min, Int64),
    last_ns         AggregateFunction(max, Int64),
    mode            AggregateFunction(anyIf, String, UInt8),
    server          AggregateFunction(anyIf, String, UInt8),
    calls_allowed   AggregateFunction(uniqExactIf, UInt64, UInt8),
    calls_denied    AggregateFunction(uniqExactIf, UInt64, UInt8),
    kernel_denials  AggregateFunction(uniqExactIf, UInt64, UInt8),
    findings        AggregateFunction(uniqExactIf, UInt64, UInt8),
    escapes         AggregateFunction(uniqExactIf, UInt64, UInt8),
    serious         AggregateFunction(uniqExactIf, UInt64, UInt8)
)
ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(toDate(toDateTime(minute * 60)))
ORDER BY (minute, host, scope_id, run_id)
SETTINGS index_granularity = 1024;

CREATE MATERIALIZED VIEW IF NOT EXISTS runs_rollup_mv TO runs_rollup AS
SELECT
    intDiv(time_ns, toInt64(60000000000)) - (modulo(time_ns, toInt64(60000000000)) < 0) AS minute,
    host, scope_id, run_id,
    minState(time_ns) AS first_ns,
    maxState(time_ns) AS last_ns,
    anyIfState(mode, kind = 'launch') AS mode,
    anyIfState(server_name, server_name != '') AS server,
    uniqExactIfState(cityHash64(event_id), kind = 'decision' AND decision = 'allow') AS calls_allowed,
    uniqExactIfState(cityHash64(event_id), kind = 'decision' AND decision = 'deny') AS calls_denied,
    uniqExactIfState(cityHash64(event_id), kind = 'landlock_denial') AS kernel_denials,
    uniqExactIfState(cityHash64(event_id), kind = 'finding') AS findings,
    uniqExactIfState(cityHash64(event_id), kind = 'finding' AND finding_type = 'ESCAPE') AS escapes,
    uniqExactIfState(cityHash64(event_id), kind = 'finding' AND severity IN ('critical', 'high')) AS serious
FROM events
WHERE kind IN ('launch', 'decision', 'landlock_denial', 'finding') AND run_id != ''
GROUP BY minute, host, scope_id, run_id;

-- Backfill what the events table held before the view existed. Rows the
-- view also saw (inserted meanwhile) are harmless: every aggregate is
-- idempotent. (The columns are named: later migrations add more, which
-- this backfill leaves at their defaults.)
INSERT INTO runs_rollup (minute, host, scope_id, run_id, first_ns, last_ns, mode, server,
    calls_allowed, calls_denied, kernel_denials, findings, escapes, serious)
SELECT
    intDiv(time_ns, toInt64(60000000000)) - (modulo(time_ns, toInt64(60000000000)) < 0) AS minute,
    host, scope_id, run_id,
    minState(time_ns), maxState(time_ns),
    anyIfState(mode, kind = 'launch'),
    anyIfState(server_name, server_name != ''),
    uniqExactIfState(cityHash64(event_id), kind = 'decision' AND decision = 'allow'),
    uniqExactIfState(cityHash64(event_id), kind = 'decision' AND decision = 'deny'),
    uniqExactIfState(cityHash64(event_id), kind = 'landlock_denial'),
    uniqExactIfState(cityHash64(event_id), kind = 'finding'),
    uniqExactIfState(cityHash64(event_id), kind = 'finding' AND finding_type = 'ESCAPE'),
    uniqExactIfState(cityHash64(event_id), kind = 'finding' AND severity IN ('critical', 'high'))
FROM events
WHERE kind IN ('launch', 'decision', 'landlock_denial', 'finding') AND run_id != ''
GROUP BY minute, host, scope_id, run_id;
