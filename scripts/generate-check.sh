#!/usr/bin/env bash
# Regenerates committed generated code and fails if it differs from what is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! grep -rlq --include='*.go' '^//go:generate' .; then exit 0; fi
go generate ./...
if ! git diff --quiet --exit-code -- bpf/ schema/ 2>/dev/null; then
	echo "generated code is stale: run 'make generate' and commit the result" >&2
	git diff --stat -- bpf/ schema/ >&2
	exit 1
fi
