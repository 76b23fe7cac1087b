#!/usr/bin/env bash
# The C ABI's malloc+free pair, from the allocator alone to a C caller,
# with glibc's malloc+free in the same run as the baseline.
# Usage: bench/libmemreplay.sh [count]
#  - AllocatorPair: allocator.Malloc + Free (the allocator's cache hit)
#  - LibraryPair(Parallel): + the pointer table and the device lookup
#  - ExportedPair: memreplay_malloc + memreplay_free called from C
#  - ExportedCall: one bare C -> Go -> C call
#  - ExportedPairThreads: 2 C threads at once, wall time per pair
#  - GlibcPair: glibc's malloc + free of the same 1000 bytes, same harness
# Needs cgo and a C compiler (skipped otherwise, and said so).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-5}
go test ./cmd/libmemreplay -run '^$' \
	-bench '^Benchmark(AllocatorPair|LibraryPair|LibraryPairParallel|ExportedPair|ExportedCall|ExportedPairThreads|GlibcPair)$' \
	-count "$count"
