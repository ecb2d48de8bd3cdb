// Package bpf holds mcpwarden's eBPF programs (watch.bpf.c) and the Go
// bindings bpf2go generates from them. The objects are committed so that
// `go build` needs no clang; `make generate` rebuilds them and
// scripts/generate-check.sh proves the committed ones are current.
package bpf

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -strip llvm-strip -target amd64,arm64 -type event -type args -type dstate -go-package bpf Watch watch.bpf.c -- -O2 -g -Wall -Werror -mcpu=v3
