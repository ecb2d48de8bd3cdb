-- runs_rollup gets a projection sorted by scope first, so `query runs
-- --scope` reads its scope's rows, not every row of the time range: the
-- main sorting key starts with the minute, and a scope's rows are spread
-- over every granule of it (over 100 M events the candidate runs' rows
-- were 1,372 rows in 28 granules, and deserializing those granules'
-- uniqExact states was most of the query's time). Queries do not change:
-- ClickHouse reads the projection when a query filters by scope_id.
--
-- An AggregatingMergeTree needs deduplicate_merge_projection_mode before
-- it takes a projection (ClickHouse 24.8 and later; older releases have
-- no such setting): 'rebuild' rebuilds the projection when parts merge,
-- so it always holds the merged rows. The statements marked `since 24.8`
-- are skipped on older servers, which keep the table without the
-- projection (the same results, read from the main table). The legacy
-- layout (18.16) has no projections.
--
-- MATERIALIZE PROJECTION builds it for the parts stored before (a
-- background mutation: 2.3 s for the 316,022 rows of runs_rollup over
-- 100 M events); parts inserted afterwards carry it from the start.
/* since 24.8 */ ALTER TABLE runs_rollup MODIFY SETTING deduplicate_merge_projection_mode = 'rebuild';
/* since 24.8 */ ALTER TABLE runs_rollup ADD PROJECTION IF NOT EXISTS by_scope (SELECT * ORDER BY scope_id, minute, host, run_id);
/* since 24.8 */ ALTER TABLE runs_rollup MATERIALIZE PROJECTION by_scope;
