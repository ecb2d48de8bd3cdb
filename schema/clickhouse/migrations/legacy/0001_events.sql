-- mcpwarden events table, schema_version 1 of the envelope.
-- Runs on ClickHouse 18.16 and current releases: no DateTime64, TTL, Map,
-- JSON or LowCardinality; timestamps are Int64 nanoseconds.
--
-- Every envelope field and every body field has its own column (the body
-- columns of other kinds stay at their defaults). Duplicates, from JetStream
-- redelivery or a spool replay older than the stream's duplicate window,
-- share the whole sorting key (it ends in event_id, and every other key
-- column is a property of the event), so ReplacingMergeTree collapses them
-- on merge; queries also collapse them (FINAL, or GROUP BY event_id).
CREATE TABLE IF NOT EXISTS events
(
    event_id        String,
    schema_version  UInt8,
    host            String,
    boot_id         String,
    run_id          String,
    scope_id        String,
    scope_hash      String,
    kind            Enum8('launch' = 1, 'decision' = 2, 'file_op' = 3, 'landlock_denial' = 4, 'finding' = 5, 'health' = 6),
    time_ns         Int64,
    event_date      Date MATERIALIZED toDate(toDateTime(intDiv(time_ns, 1000000000))),
    inserted_at     DateTime DEFAULT now(),

    tool            String,
    op_id           String,
    path_hash       String,
    path_class      String,
    pid             UInt32,
    comm            String,

    phase           String,
    mode            String,
    landlock_abi    UInt8,
    degraded        UInt8,
    degraded_reason String,
    server_exe      String,
    server_name     String,
    server_version  String,
    protocol_era    String,
    root_pid        UInt32,
    exit_status     Int32,
    exit_reason     String,
    duration_ms     Int64,

    method          String,
    protocol_version String,
    server_origin   String,
    action_class    String,
    decision        String,
    approval        String,
    error_code      String,
    retry_count     UInt32,
    latency_ms      Float64,
    path_hashes     Array(String),
    correlation_id  String,
    start_ns        Int64,
    end_ns          Int64,

    syscall         String,
    flags_class     String,
    result          Int32,
    verdict         String,

    domain          String,
    blockers        Array(String),

    finding_type    String,
    severity        String,
    evidence_ids    Array(String),
    reason          String,

    component       String,
    hooks           Array(String),
    audit_stream    String,
    drops_bpf_reserve  UInt64,
    drops_queue_full   UInt64,
    drops_publish_fail UInt64,
    spool_depth        UInt64
)
ENGINE = ReplacingMergeTree(inserted_at)
PARTITION BY toYYYYMM(event_date)
ORDER BY (kind, host, run_id, time_ns, event_id)
SETTINGS index_granularity = 8192;
