-- inventory: wrapped MCP servers by host, protocol era and version, from
-- launch records: which legacy (Roots-only era) servers still run where.
-- Parameters: from, to (Unix ns), host ('' = all), limit.
SELECT
    host,
    if(server_name != '', server_name, server_exe) AS server,
    server_version,
    protocol_era,
    protocol_era = 'legacy' AS legacy,
    uniqExact(run_id) AS runs,
    countIf(mode = 'audit') > 0 AS audit_mode_seen,
    countIf(degraded = 1) > 0 AS degraded_seen,
    max(time_ns) AS last_seen_ns
FROM events
WHERE kind = 'launch'
  AND time_ns >= {from:Int64} AND time_ns < {to:Int64}
  AND ({host:String} = '' OR host = {host:String})
GROUP BY host, server, server_version, protocol_era
ORDER BY host, legacy DESC, server, server_version
LIMIT {limit:UInt32}
