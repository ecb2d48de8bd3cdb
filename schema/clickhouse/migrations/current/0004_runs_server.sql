-- runs_rollup carries which server ran: besides serverInfo's name (the
-- server state of 0002), its version and protocol era, and the
-- executable's base name (what a server that never identified itself is
-- known by), so `query runs` can show all of them without a scan of the
-- launch records. The current releases' layout (../legacy has 18.16's).
--
-- They come from launch records only: the start record names the
-- executable; the identified record (once the proxy completed the
-- handshake) and the exit record carry serverInfo's name and version and
-- the era, which is never empty once the server identified itself
-- ("unknown" when the proxy could not tell). A run without an era never
-- identified itself.
--
-- The view of 0002 (runs_rollup_mv) cannot fill the new columns (18.16
-- refuses a view that lacks a column of its target), so runs_rollup_mv2
-- replaces it: the same states plus the three new ones. It is created
-- before the old view is dropped, so every insert passes through at least
-- one of them (through both for a moment: every aggregate is idempotent).
-- On 18.16 an insert made between the ALTERs and the DROP fails on the old
-- view and is retried by the collector (its messages are not acked), so
-- nothing is lost. Only launch records are backfilled (few: three per
-- run): the new columns come from them alone, and everything else was
-- rolled up already.
ALTER TABLE runs_rollup ADD COLUMN IF NOT EXISTS server_version AggregateFunction(anyIf, String, UInt8);
ALTER TABLE runs_rollup ADD COLUMN IF NOT EXISTS protocol_era AggregateFunction(anyIf, String, UInt8);
ALTER TABLE runs_rollup ADD COLUMN IF NOT EXISTS server_exe AggregateFunction(anyIf, String, UInt8);

CREATE MATERIALIZED VIEW IF NOT EXISTS runs_rollup_mv2 TO runs_rollup AS
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
    uniqExactIfState(cityHash64(event_id), kind = 'finding' AND severity IN ('critical', 'high')) AS serious,
    anyIfState(server_version, kind = 'launch' AND server_name != '') AS server_version,
    anyIfState(protocol_era, kind = 'launch' AND protocol_era != '') AS protocol_era,
    anyIfState(server_exe, kind = 'launch' AND server_exe != '') AS server_exe
FROM events
WHERE kind IN ('launch', 'decision', 'landlock_denial', 'finding') AND run_id != ''
GROUP BY minute, host, scope_id, run_id;

DROP TABLE IF EXISTS runs_rollup_mv;

-- Backfill the new columns from the launch records the events table held
-- before runs_rollup_mv2 existed.
INSERT INTO runs_rollup (minute, host, scope_id, run_id, first_ns, last_ns, server_version, protocol_era, server_exe)
SELECT
    intDiv(time_ns, toInt64(60000000000)) - (modulo(time_ns, toInt64(60000000000)) < 0) AS minute,
    host, scope_id, run_id,
    minState(time_ns), maxState(time_ns),
    anyIfState(server_version, server_name != ''),
    anyIfState(protocol_era, protocol_era != ''),
    anyIfState(server_exe, server_exe != '')
FROM events
WHERE kind = 'launch' AND run_id != ''
GROUP BY minute, host, scope_id, run_id;
