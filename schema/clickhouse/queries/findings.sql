-- findings: findings by severity, type, host, scope and tool over a time range.
-- Duplicates collapse on event_id (a finding computed twice has the same id).
-- Parameters: from, to (Unix ns), host, scope, severity, tool ('' = all), limit.
SELECT
    severity,
    finding_type,
    host,
    scope_id,
    tool,
    uniqExact(cityHash64(event_id)) AS findings,
    uniqExact(run_id) AS runs,
    max(time_ns) AS last_ns
FROM events
WHERE kind = 'finding'
  AND time_ns >= {from:Int64} AND time_ns < {to:Int64}
  AND ({host:String} = '' OR host = {host:String})
  AND ({scope:String} = '' OR scope_id = {scope:String})
  AND ({severity:String} = '' OR severity = {severity:String})
  AND ({tool:String} = '' OR tool = {tool:String})
GROUP BY severity, finding_type, host, scope_id, tool
ORDER BY multiIf(severity = 'critical', 0, severity = 'high', 1, severity = 'medium', 2, 3), findings DESC
LIMIT {limit:UInt32}
