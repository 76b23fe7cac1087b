#!/usr/bin/env bash
# libmemreplay inside PyTorch on a machine with an NVIDIA GPU: the same
# small Transformer trained with PyTorch's own allocator and with
# libmemreplay plugged in, compared (docs/libmemreplay.md, "GPU checks").
#
# Usage: bench/gpu-pytorch.sh [path/to/libmemreplay.so]
#   The library defaults to dist/libmemreplay.so, built here with
#   `make libmemreplay` when absent and Go is installed (otherwise build it
#   elsewhere with that command and carry dist/ over).
# Environment:
#   OUT            where results go (default: ./out)
#   PYTHON         the Python with torch and CUDA (default: python3)
#   MEMREPLAY_BIN  the memreplay CLI, for the replay checks of the recorded
#                  traces (default: dist/memreplay, else memreplay on PATH;
#                  `go build -o dist/memreplay ./cmd/memreplay` builds it);
#                  skipped when absent
#   STEPS, BATCH, SEQ, LAYERS, DMODEL  the model and run (defaults 30, 16, 512, 12, 768)
#
# What it does, each run a process of its own (PyTorch cannot swap its
# allocator once CUDA is initialised):
#   1. records the machine: nvidia-smi, torch and CUDA versions;
#   2. for each allocator setting ("" and expandable_segments:True):
#      a. PyTorch's allocator: train, read torch.cuda.memory_stats(), then
#         an OOM check (ask for twice the GPU's memory);
#      b. libmemreplay with the same setting: the same, with the stats from
#         memreplay_stats_json;
#   3. short recorded runs (5 steps): libmemreplay writes a native trace and
#      a snapshot pickle, PyTorch's allocator a snapshot pickle
#      (_record_memory_history + _dump_snapshot);
#   4. `memreplay replay --check --expect-stats` on the recordings:
#      libmemreplay's trace must match 100%, decisions and memory_stats();
#      PyTorch's snapshot, with PyTorch's own memory_stats(), shows how
#      closely memreplay's allocator follows PyTorch's on this workload;
#   5. a summary, $OUT/gpu-pytorch-summary.json, and a table: peak reserved
#      and allocated bytes, alloc retries, median step time of each pair, the
#      loss curves compared (deterministic training: they must agree), the
#      OOM checks (an exception, the process still works).
# The exit status is 1 when a check failed (losses differ, not finite, an
# OOM that was not catchable, a replay check that did not pass).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
lib=${1:-dist/libmemreplay.so}
case $lib in /*) ;; *) lib=$root/$lib ;; esac
# The details go into $top/gpu-pytorch/ and come back as one tarball, with
# the log and the summary beside it (the device tool returns at most 8 files
# from $OUT).
top=${OUT:-$PWD/out}
out=$top/gpu-pytorch
mkdir -p "$out"
py=${PYTHON:-python3}
steps=${STEPS:-30}
common=(--steps "$steps" --batch "${BATCH:-16}" --seq "${SEQ:-512}" --layers "${LAYERS:-12}" --d-model "${DMODEL:-768}")
log=$top/gpu-pytorch.log
: >"$log"
say() { echo "$*" | tee -a "$log"; }

if [ ! -f "$lib" ]; then
	if command -v go >/dev/null 2>&1; then
		say "== building $lib"
		go build -buildmode=c-shared -o "$lib" ./cmd/libmemreplay 2>&1 | tee -a "$log"
	else
		echo "gpu-pytorch.sh: $lib not found and no Go to build it (make libmemreplay)" >&2
		exit 2
	fi
fi

say "== $(date -u +%FT%TZ) $(uname -n)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$log" || true
"$py" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None); sys.exit(0 if torch.cuda.is_available() else 3)' 2>&1 | tee -a "$log"
say "library: $lib ($(stat -c %s "$lib") bytes)"

run() { # name, then gpu_train.py arguments
	local name=$1
	shift
	say "== $name"
	"$py" bench/gpu_train.py "$@" --out "$out/$name.json" 2>&1 | tee -a "$log"
}

for conf in "" "expandable_segments:True"; do
	tag=default
	[ -n "$conf" ] && tag=expandable
	run "train-native-$tag" --allocator native ${conf:+--alloc-conf "$conf"} "${common[@]}" --oom-check
	run "train-memreplay-$tag" --allocator memreplay --lib "$lib" ${conf:+--alloc-conf "$conf"} "${common[@]}" --oom-check
done

# Recorded runs: short, since recording costs time.
rec=(--steps 5 --warmup 1 --batch "${BATCH:-16}" --seq "${SEQ:-512}" --layers "${LAYERS:-12}" --d-model "${DMODEL:-768}")
run record-memreplay --allocator memreplay --lib "$lib" "${rec[@]}" \
	--trace "$out/record-memreplay.mrt" --snapshot "$out/record-memreplay.pickle" \
	--memory-stats "$out/record-memreplay.stats.json"
run record-native --allocator native "${rec[@]}" --snapshot "$out/record-native.pickle" \
	--memory-stats "$out/record-native.stats.json"

bin=${MEMREPLAY_BIN:-}
if [ -z "$bin" ]; then
	if [ -x dist/memreplay ]; then bin=$root/dist/memreplay; elif command -v memreplay >/dev/null 2>&1; then bin=memreplay; fi
fi
replay_status=skipped
if [ -n "$bin" ]; then
	replay_status=passed
	for f in record-memreplay.mrt record-native.pickle; do
		say "== memreplay replay --check $f"
		if ! "$bin" replay --check --expect-stats "$out/${f%.*}.stats.json" --format json "$out/$f" >"$out/replay-$f.json" 2>>"$log"; then
			[ "$f" = record-memreplay.mrt ] && replay_status=failed
			say "(check did not pass: $out/replay-$f.json)"
		fi
		"$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d.get("check") or {}; s=d.get("stats_check") or {}; print("decisions", c.get("decisions_matched"), "of", c.get("decisions_expected"), "first divergence", c.get("first_divergence"), "final match", c.get("final_segments_match"), "| memory_stats exact", s.get("exact_matched"), "of", s.get("exact_compared"), "inferred", s.get("inferred_matched"), "of", s.get("inferred_compared"), "differences", [(x["key"], x["recorded"], x["replayed"]) for x in s.get("differences", [])][:8])' "$out/replay-$f.json" 2>&1 | tee -a "$log" || true
	done
else
	say "== no memreplay CLI (MEMREPLAY_BIN, dist/memreplay): replay checks skipped"
fi

status=0
"$py" - "$out" "$replay_status" <<'EOF' 2>&1 | tee -a "$log" || status=$?
import json, math, os, sys
out, replay_status = sys.argv[1], sys.argv[2]
def load(name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)
summary, failed = {"replay_check": replay_status, "pairs": {}}, replay_status == "failed"
print("%-11s %-10s %14s %14s %8s %12s" % ("setting", "allocator", "peak reserved", "peak alloc", "retries", "step median"))
for tag in ("default", "expandable"):
    n, m = load("train-native-" + tag), load("train-memreplay-" + tag)
    for r in (n, m):
        print("%-11s %-10s %11.1f MiB %11.1f MiB %8s %10.1f ms" % (tag, r["allocator"], r["peak_reserved_bytes"] / 2**20,
              r["peak_allocated_bytes"] / 2**20, r["alloc_retries"], 1e3 * r["step_time_median_s"]))
    diff = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(n["losses"], m["losses"]))
    oom = m.get("oom_check", {})
    pair = {
        "peak_reserved_native": n["peak_reserved_bytes"], "peak_reserved_memreplay": m["peak_reserved_bytes"],
        "peak_allocated_native": n["peak_allocated_bytes"], "peak_allocated_memreplay": m["peak_allocated_bytes"],
        "retries_native": n["alloc_retries"], "retries_memreplay": m["alloc_retries"],
        "step_median_s_native": n["step_time_median_s"], "step_median_s_memreplay": m["step_time_median_s"],
        "step_time_ratio": m["step_time_median_s"] / n["step_time_median_s"],
        "loss_max_rel_diff": diff,
        "losses_ok": n["losses_finite"] and m["losses_finite"] and diff < 1e-2,
        "oom_native": n.get("oom_check"), "oom_memreplay": oom,
        "oom_ok": bool(oom.get("raised")) and oom.get("cuda_oom_text") and oom.get("after") == float(1 << 20),
    }
    summary["pairs"][tag] = pair
    print("%-11s loss max rel diff %.2e (%s), step time memreplay/native %.3f, OOM check %s" % (
        tag, diff, "ok" if pair["losses_ok"] else "MISMATCH", pair["step_time_ratio"], "ok" if pair["oom_ok"] else "FAILED"))
    failed = failed or not pair["losses_ok"] or not pair["oom_ok"]
summary["passed"] = not failed
with open(os.path.join(out, "gpu-pytorch-summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
print("summary:", os.path.join(out, "gpu-pytorch-summary.json"), "passed" if not failed else "FAILED")
sys.exit(1 if failed else 0)
EOF
cp "$out/gpu-pytorch-summary.json" "$top/" 2>/dev/null || true
tar czf "$top/gpu-pytorch.tar.gz" -C "$top" gpu-pytorch && rm -rf "$out"
echo "results: $top/gpu-pytorch.log, $top/gpu-pytorch-summary.json, $top/gpu-pytorch.tar.gz (every file)"
exit $status
