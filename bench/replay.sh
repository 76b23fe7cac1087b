#!/usr/bin/env bash
# Replay and trace-codec throughput. Usage: bench/replay.sh [count]
# Prints Go's benchmark lines; docs/replay.md records a run of it.
#  - BenchmarkReplay1M/10M: a native trace of 1 and 10 million events
#    streamed through the replay on the simulated device (events/s, heap).
#  - the native codec and the pickle importer (trace).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-3}
go test ./sim/replay -run '^$' -bench 'Replay' -benchtime 3x -count "$count"
go test ./trace -run '^$' -bench . -benchmem -count "$count"
