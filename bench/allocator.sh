#!/usr/bin/env bash
# Allocator hot-path benchmarks. Usage: bench/allocator.sh [count]
# Prints Go's benchmark lines; docs/allocator.md records a run of it.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-5}
go test ./allocator -run '^$' -bench . -benchmem -count "$count"
