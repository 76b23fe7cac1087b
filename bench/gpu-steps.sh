#!/usr/bin/env bash
# Step time with PyTorch's allocator against libmemreplay, on a machine
# with an NVIDIA GPU and PyTorch: longer runs than bench/gpu-pytorch.sh's,
# each allocator and setting ROUNDS times, alternated (PyTorch's first in
# odd rounds, libmemreplay's first in even ones), a process per run,
# since one process's step times move by up to a fifth against the next's
# (docs/libmemreplay.md, "Second run").
#
# Usage: bench/gpu-steps.sh [path/to/libmemreplay.so]   (default dist/libmemreplay.so)
# Environment: OUT (default ./out), PYTHON (default python3), ROUNDS (2),
#              STEPS (110), WARMUP (10); the model is gpu_train.py's default.
# Leaves $OUT/steps.txt (one line per run, the ratios) and $OUT/steps.tar.gz
# (each run's JSON, with every step's time).
set -u
cd "$(dirname "$0")/.."
lib=${1:-dist/libmemreplay.so}
o=${OUT:-$PWD/out}
py=${PYTHON:-python3}
mkdir -p "$o"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/st"
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
common=(--steps "${STEPS:-110}" --warmup "${WARMUP:-10}")
for r in $(seq "${ROUNDS:-2}"); do
	for conf in "" "expandable_segments:True"; do
		tag=default
		[ -n "$conf" ] && tag=expandable
		order="native memreplay"
		[ $((r % 2)) = 0 ] && order="memreplay native"
		for a in $order; do
			extra=()
			[ "$a" = memreplay ] && extra=(--lib "$lib")
			timeout 120 "$py" bench/gpu_train.py --allocator "$a" "${extra[@]}" ${conf:+--alloc-conf "$conf"} "${common[@]}" \
				--out "$tmp/st/$r-$tag-$a.json" >"$tmp/st/$r-$tag-$a.log" 2>&1
			echo "$(date -u +%T) round $r $tag $a rc=$?"
		done
	done
done
"$py" - "$tmp/st" <<'PY' | tee "$o/steps.txt"
import glob, json, os, statistics as st, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    r, tag, a = os.path.basename(f)[:-5].split("-")
    d = json.load(open(f))
    t = sorted(d["step_times_s"])
    rows[(r, tag, a)] = t
    print("round %s %-10s %-9s steps %d median %.2f ms mean %.2f ms p10 %.2f p90 %.2f peak_reserved %d" % (
        r, tag, a, len(t), 1e3 * st.median(t), 1e3 * st.mean(t), 1e3 * t[len(t) // 10], 1e3 * t[9 * len(t) // 10],
        d["peak_reserved_bytes"]))
for (r, tag, a), m in sorted(rows.items()):
    n = rows.get((r, tag, "native"))
    if a == "memreplay" and n:
        print("ratio round %s %-10s median %.3f mean %.3f" % (r, tag, st.median(m) / st.median(n), st.mean(m) / st.mean(n)))
PY
tar czf "$o/steps.tar.gz" -C "$tmp" st
echo "end $(date -u +%T)"
