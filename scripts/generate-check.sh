#!/usr/bin/env bash
# Regenerates committed generated code and fails if it differs from what is committed.
# The eBPF objects (bpf/, via bpf2go) need clang and llvm-strip; the output is
# byte-identical for the same clang (Debian's clang 14 on the project's machines).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! grep -rlq --include='*.go' '^//go:generate' .; then exit 0; fi
for tool in clang llvm-strip; do
	if ! command -v "$tool" >/dev/null; then
		echo "generate-check: $tool is not installed: run 'scripts/test-env.sh install' (Debian: apt-get install clang llvm)" >&2
		exit 1
	fi
done
go generate ./...
if ! git diff --quiet --exit-code -- bpf/ schema/ launcher/sandbox/seccomp/ 2>/dev/null; then
	echo "generated code is stale: run 'make generate' and commit the result" >&2
	git diff --stat -- bpf/ schema/ launcher/sandbox/seccomp/ >&2
	exit 1
fi
if [ -n "$(git ls-files --others --exclude-standard -- bpf/ launcher/sandbox/seccomp/)" ]; then
	echo "generate produced files that are not committed: commit them with the sources" >&2
	git ls-files --others --exclude-standard -- bpf/ launcher/sandbox/seccomp/ >&2
	exit 1
fi
