#!/usr/bin/env bash
# The multi-worker engine's throughput and the BERT-family study's PAR run.
# Usage: bench/par.sh [count]
#  - BenchmarkFourWorkers (sim/workers): four workers on one simulated GPU,
#    events applied per second; BenchmarkFourWorkersTrialModel: the same with
#    sim/trial's readers generating the events (what `memreplay par` runs).
#  - the BERT-family run of docs/par.md, timed (built with `par` registered).
# docs/par.md records a run of it.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-3}
go test ./sim/workers -run '^$' -bench . -benchmem -count "$count"
go build -o /tmp/memreplay-par ./cmd/memreplay
time /tmp/memreplay-par par --format markdown
