#!/usr/bin/env bash
# Replay and trace-codec throughput. Usage: bench/replay.sh [count]
# Prints Go's benchmark lines; docs/replay.md and docs/performance.md
# record runs of it.
#  - BenchmarkReplay1M/10M: a native trace of 1 and 10 million events
#    streamed through the replay on the simulated device, on one core
#    (-cpu 1, as issue 19's goal is put): events/s by wall time, and
#    cpu-events/s by the process's CPU time, which moves less with the
#    load of a shared machine; heap.
#  - the native codec alone and the pickle importer (trace).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-3}
go test ./sim/replay -run '^$' -bench 'Replay' -cpu 1 -benchtime 3x -count "$count"
go test ./trace -run '^$' -bench . -benchmem -count "$count"
