package main

// nsOps: namespaces: what a run can see of the host (mounts, /proc, /tmp, hostname, network), planting, ...
var nsOps = map[string]op{}
