-- inventory: wrapped MCP servers by host, name, version and protocol era,
-- from launch records: which legacy (Roots-only era) servers still run
-- where. A run has several launch records (start: the executable; then,
-- once the proxy knows it, identified: serverInfo name, version and era;
-- exit repeats them), so each run is reduced to one row first: its server
-- is the serverInfo name when the proxy learned it, else the executable's
-- base name. Duplicates collapse (a run is counted once).
-- Parameters: from, to (Unix ns), host ('' = all), limit.
SELECT
    host,
    server,
    server_version,
    protocol_era,
    protocol_era = 'legacy' AS legacy,
    uniqExact(run_id) AS runs,
    max(audit) AS audit_mode_seen,
    max(degraded) AS degraded_seen,
    max(last_ns) AS last_seen_ns
FROM
(
    SELECT
        host,
        run_id,
        if(anyIf(server_name, server_name != '') != '', anyIf(server_name, server_name != ''), anyIf(server_exe, server_exe != '')) AS server,
        anyIf(server_version, server_name != '') AS server_version,
        anyIf(protocol_era, protocol_era != '') AS protocol_era,
        max(mode = 'audit') AS audit,
        max(degraded) AS degraded,
        max(time_ns) AS last_ns
    FROM events
    WHERE kind = 'launch'
      AND time_ns >= {from:Int64} AND time_ns < {to:Int64}
      AND ({host:String} = '' OR host = {host:String})
    GROUP BY host, run_id
)
GROUP BY host, server, server_version, protocol_era
ORDER BY host, legacy DESC, server, server_version
LIMIT {limit:UInt32}
