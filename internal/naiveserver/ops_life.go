package main

// lifeOps: lifetime and bounds: processes that outlive the run, process/memory/file-size limits, stderr, ...
var lifeOps = map[string]op{}
