package main

// procOps: other processes: resource limits, scheduling, IPC objects, inotify on directories outside the scope, ...
var procOps = map[string]op{}
