#!/usr/bin/env bash
# The allocator policies on every real trace (docs/allocator.md, "Policies"):
# for each trace in ../shared/traces/pytorch (when present) and traces/,
# `memreplay compare` under PyTorch's recorded settings, expandable segments,
# and the stitch, lifetime, lifetime-with-expandable-segments and plan policies,
# printed as one Markdown table: peak live, peak reserved and waste
# (1 - peak live / peak reserved) per row, plus stitches, requests served
# from a plan (and plans made) and device calls.
#
# Usage: bench/policies.sh [trace...]   (default: all of them)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEMREPLAY_BIN:-$(mktemp -d)/memreplay}
[ -x "$bin" ] || go build -o "$bin" ./cmd/memreplay
traces=("$@")
if [ ${#traces[@]} -eq 0 ]; then
	for d in ../shared/traces/pytorch traces/pytorch traces/trial; do
		[ -d "$d" ] || continue
		for f in "$d"/*.pickle "$d"/*.mrt; do
			[ -e "$f" ] || continue
			# traces/pytorch holds copies of some shared traces: once each.
			case " ${seen:-} " in *" $(basename "$f") "*) continue ;; esac
			seen="${seen:-} $(basename "$f")"
			traces+=("$f")
		done
	done
fi
echo "| trace | row | peak live | peak reserved | waste | stranded at peak | OOMs | device calls | stitches | planned | malloc |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for f in "${traces[@]}"; do
	"$bin" compare --progress=false --format json "$f" \
		--alloc-conf expandable_segments:True \
		--policy stitch --policy lifetime --policy lifetime:expandable_segments:True --policy plan |
		python3 -c '
import json, sys
name = sys.argv[1].split("/")[-1]
mib = lambda b: "%.0f MiB" % (b / 2**20)
for r in json.load(sys.stdin):
    f, c, s = r["fragmentation"], r["device_calls"], r["stats"]
    calls = c["cuda_malloc"] + c["cuda_free"] + c["cu_mem_map"] + c["cu_mem_unmap"]
    ns = "%.0f ns" % r["malloc_ns"] if r["malloc_ns"] is not None else "-"
    planned = "-" if "num_plans" not in s else "%d (%d plans)" % (s["num_planned_allocs"], s["num_plans"])
    print("| %s | %s | %s | %s | %.1f%% | %s | %d | %d | %s | %s | %s |" % (name, r["label"], mib(f["peak_live_bytes"]),
        mib(f["peak_reserved_bytes"]), 100 * f["waste_ratio"], mib(f["stranded_bytes_at_peak"]), c["ooms"], calls,
        s.get("num_stitches", "-"), planned, ns))
' "$f"
done
