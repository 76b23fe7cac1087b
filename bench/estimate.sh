#!/usr/bin/env bash
# The pre-trial prediction's speed (target: under 50 ms for a BERT-large
# trial, since a gate calls it before every trial).
# Usage: bench/estimate.sh [runs]
#  - BenchmarkBERTLarge (sim/estimate): the prediction in process;
#  - the CLI end to end (`memreplay estimate --format json`, what the Python
#    gate runs), process start included: the mean of [runs] calls.
# docs/optuna.md records a run of it.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
go test ./sim/estimate -run '^$' -bench . -benchmem -count 3
bin=$(mktemp -d)/memreplay
go build -o "$bin" ./cmd/memreplay
spec='{"model": "bert-large", "batch": 16, "seq_len": 128, "precision": "fp16"}'
"$bin" estimate --spec "$spec" --format json >/dev/null
start=$(date +%s%N)
for _ in $(seq "$runs"); do "$bin" estimate --spec "$spec" --format json >/dev/null; done
end=$(date +%s%N)
echo "memreplay estimate (bert-large b16 s128 fp16), CLI end to end: $(( (end - start) / runs / 1000000 )) ms per call over $runs calls"
rm -rf "$(dirname "$bin")"
