-- findings: the findings of the time range by run: severity, type, host,
-- scope, run and tool (findings of the host itself, such as drop counters
-- that grew, have no run). --run keeps one run's.
-- Duplicates collapse on event_id (a finding computed twice has the same id).
-- Parameters: from, to (Unix ns), host, scope, severity, tool, run ('' = all), limit.
SELECT
    severity,
    finding_type,
    host,
    scope_id,
    run_id,
    tool,
    uniqExact(cityHash64(event_id)) AS findings,
    max(time_ns) AS last_ns
FROM events
WHERE kind = 'finding'
  AND time_ns >= {from:Int64} AND time_ns < {to:Int64}
  AND ({host:String} = '' OR host = {host:String})
  AND ({scope:String} = '' OR scope_id = {scope:String})
  AND ({severity:String} = '' OR severity = {severity:String})
  AND ({tool:String} = '' OR tool = {tool:String})
  AND ({run:String} = '' OR run_id = {run:String})
GROUP BY severity, finding_type, host, scope_id, run_id, tool
ORDER BY multiIf(severity = 'critical', 0, severity = 'high', 1, severity = 'medium', 2, 3), findings DESC, last_ns DESC, run_id
LIMIT {limit:UInt32}
