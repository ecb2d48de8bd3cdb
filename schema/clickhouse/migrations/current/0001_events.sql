-- mcpwarden events table, schema_version 1 of the envelope: the layout for
-- current ClickHouse releases (tested on 26.7; ClickHouse 18.16 gets the
-- legacy layout in ../legacy).
--
-- Every envelope field and every body field has its own column (the body
-- columns of other kinds stay at their defaults). Timestamps are
-- DateTime64(9, 'UTC'): time (when it happened), call_start/call_end (a
-- decision's call), inserted_at (when the row arrived, server clock, ms).
-- time_ns, start_ns and end_ns are the same instants as Unix ns (ALIAS
-- columns, computed on read), which the canned queries and the collector
-- read. Strings with few distinct values are LowCardinality (host, scope,
-- tool, classes, verdicts, names); ids and hashes are not (every value is
-- new, where a dictionary only costs).
--
-- Duplicates, from JetStream redelivery or a spool replay older than the
-- stream's duplicate window, share the whole sorting key (it ends in
-- event_id, and every other key column is a property of the event), so
-- ReplacingMergeTree collapses them on merge; queries also collapse them
-- (FINAL, or GROUP BY event_id).
--
-- Retention: table TTL rules per kind, set by `mcpwarden collect --migrate`
-- from --retention (defaults: file operations 30 days, every other kind
-- 365 days; store.DefaultRetention). File operations have partitions of
-- their own (the second partition key), so their TTL never rewrites the
-- parts of the kinds kept longer.
CREATE TABLE IF NOT EXISTS events
(
    event_id        String,
    schema_version  UInt8,
    host            LowCardinality(String),
    boot_id         LowCardinality(String),
    run_id          String,
    scope_id        LowCardinality(String),
    scope_hash      LowCardinality(String),
    kind            Enum8('launch' = 1, 'decision' = 2, 'file_op' = 3, 'landlock_denial' = 4, 'finding' = 5, 'health' = 6),
    time            DateTime64(9, 'UTC'),
    time_ns         Int64 ALIAS toUnixTimestamp64Nano(time),
    inserted_at     DateTime64(3, 'UTC') DEFAULT now64(3),

    tool            LowCardinality(String),
    op_id           String,
    path_hash       String,
    path_class      LowCardinality(String),
    pid             UInt32,
    comm            LowCardinality(String),

    phase           LowCardinality(String),
    mode            LowCardinality(String),
    landlock_abi    UInt8,
    degraded        UInt8,
    degraded_reason LowCardinality(String),
    server_exe      LowCardinality(String),
    server_name     LowCardinality(String),
    server_version  LowCardinality(String),
    protocol_era    LowCardinality(String),
    root_pid        UInt32,
    exit_status     Int32,
    exit_reason     LowCardinality(String),
    duration_ms     Int64,
    layers          Array(LowCardinality(String)),
    server_uid      Int64 DEFAULT -1,
    file_owner      LowCardinality(String),

    method          LowCardinality(String),
    protocol_version LowCardinality(String),
    server_origin   LowCardinality(String),
    action_class    LowCardinality(String),
    decision        LowCardinality(String),
    approval        LowCardinality(String),
    error_code      LowCardinality(String),
    retry_count     UInt32,
    latency_ms      Float64,
    path_hashes     Array(String),
    correlation_id  String,
    call_start      DateTime64(9, 'UTC'),
    call_end        DateTime64(9, 'UTC'),
    start_ns        Int64 ALIAS toUnixTimestamp64Nano(call_start),
    end_ns          Int64 ALIAS toUnixTimestamp64Nano(call_end),

    syscall         LowCardinality(String),
    flags_class     LowCardinality(String),
    result          Int32,
    verdict         LowCardinality(String),

    domain          String,
    blockers        Array(LowCardinality(String)),

    finding_type    LowCardinality(String),
    severity        LowCardinality(String),
    evidence_ids    Array(String),
    reason          LowCardinality(String),

    component       LowCardinality(String),
    hooks           Array(LowCardinality(String)),
    audit_stream    LowCardinality(String),
    drops_bpf_reserve  UInt64,
    drops_queue_full   UInt64,
    drops_publish_fail UInt64,
    spool_depth        UInt64
)
ENGINE = ReplacingMergeTree(inserted_at)
PARTITION BY (toYYYYMM(time), kind = 'file_op')
ORDER BY (kind, host, run_id, time, event_id)
SETTINGS index_granularity = 8192;
