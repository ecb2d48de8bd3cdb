package main

// metaOps: metadata: times, extended attributes, ACLs, mode bits, set-id files, ...
var metaOps = map[string]op{}
