#!/usr/bin/env bash
# docs/plan.md's table: `memreplay plan --from-trace` on every real trace
# (the blocks of the trace placed in one arena), beside the live-bytes
# lower bound and PyTorch's own peak reserved (`memreplay replay`, the
# trace's settings). Usage: bench/plan.sh [TRACE_DIR] [TIME_LIMIT]
# The time limit defaults to none, so that the solver's node budget alone
# bounds the search and the table does not depend on the machine's load.
# Prints a Markdown table; needs python3 for the JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-../shared/traces/pytorch}
limit=${2:-0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/memreplay
go build -o "$bin" ./cmd/memreplay
echo "| trace | blocks | live-bytes bound | plan peak | plan / bound | proven optimal | solve s | PyTorch peak reserved | plan / PyTorch |"
echo "|---|---:|---:|---:|---:|---|---:|---:|---:|"
for t in "$dir"/*.pickle; do
	"$bin" plan -q --format json --time-limit "$limit" --from-trace "$t" >"$tmp/plan.json"
	"$bin" replay --format json --progress=false "$t" >"$tmp/replay.json"
	python3 - "$(basename "$t" .pickle)" "$tmp/plan.json" "$tmp/replay.json" <<'PY'
import json, sys
name, plan, rep = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
mib = lambda b: f"{b / 2**20:,.1f} MiB"
p, lb, res = plan["peak_bytes"], plan["lower_bound_bytes"], rep["fragmentation"]["peak_reserved_bytes"]
print(f"| {name} | {plan['buffers']} | {mib(lb)} | {mib(p)} | {p / lb:.4f} | {'yes' if plan['optimal'] else 'no'} "
      f"| {plan['seconds']:.2f} | {mib(res)} | {p / res:.3f} |")
PY
done
