package main

// execOps: exec of code that is not in the runtime: memfd, the ELF loader, new user namespaces, ...
var execOps = map[string]op{}
