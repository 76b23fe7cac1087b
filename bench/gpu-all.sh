#!/usr/bin/env bash
# docs/cuda.md's whole checklist for a GPU machine in one command, each step
# under a time limit of its own so that a slow or hung step cannot take the
# others' time (a lent GPU machine is held for minutes, not hours).
#
# Usage (on the GPU machine, after `make gpu-dist` here and dist/ carried):
#   OUT=$OUT bench/gpu-all.sh
# Environment:
#   OUT      where the results go (at most 8 files, as the device tool returns)
#   LIMITS   the four steps' limits in seconds (default "170 170 110 90")
#   PYTHON   the Python with torch and CUDA (default python3)
#
# The steps, and what each leaves in $OUT:
#   1. bench/gpu-check.sh: the CUDA backend on the real driver, its benchmark,
#      the suite on the fake driver, every trace replayed on the GPU
#      (gpu-check-cuda.log, gpu-check-replay.log, gpu-check-replay.tar.gz);
#   2. bench/gpu-pytorch.sh: PyTorch trained with its own allocator and with
#      libmemreplay, compared (gpu-pytorch.log, gpu-pytorch-summary.json,
#      gpu-pytorch.tar.gz);
#   3. bench/gpu_record_trials.py: real snapshots of BERT-base fine-tuning
#      trials, each replayed with `memreplay replay --check --expect-stats`
#      against PyTorch's own memory_stats() (trials.tar.gz);
#   4. the same under a 24 GiB limit, the BERT-family study's card, where the
#      large batches run out of memory (t24.tar.gz).
# The exit status is the number of steps that failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$PWD/out}
mkdir -p "$out"
read -r l1 l2 l3 l4 <<<"${LIMITS:-170 170 110 90}"
py=${PYTHON:-python3}
cli=$root/dist/memreplay
failed=0

step() { # name, limit, command...
	local name=$1 limit=$2 start rc
	shift 2
	start=$(date +%s)
	echo "=== $name (limit ${limit} s) $(date -u +%T)"
	timeout -k 5 "$limit" "$@"
	rc=$?
	echo "=== $name: rc=$rc in $(($(date +%s) - start)) s$([ $rc -eq 124 ] || [ $rc -eq 137 ] && echo " (TIMED OUT)")"
	[ $rc -eq 0 ] || failed=$((failed + 1))
}

# record NAME ARGS...: trials into /tmp/NAME, each replayed against its
# memory_stats(), one tarball back (pickles dropped if it would not fit).
record() {
	local name=$1 dir=/tmp/$1
	shift
	rm -rf "$dir"
	"$py" bench/gpu_record_trials.py --out-dir "$dir" "$@"
	local rc=$?
	for f in "$dir"/*.pickle; do
		[ -f "$f" ] || continue
		"$cli" replay --check --expect-stats "${f%.pickle}.stats.json" --format json "$f" >"${f%.pickle}.replay.json" 2>"${f%.pickle}.replay.stderr"
		local r=$?
		echo "$r $(basename "$f") $("$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d.get("check") or {}; s=d.get("stats_check") or {}; print("decisions", c.get("decisions_matched"), "/", c.get("decisions_expected"), "final", c.get("final_segments_match"), "stats exact", s.get("exact_matched"), "/", s.get("exact_compared"), "differences", [(x["key"], x["recorded"], x["replayed"]) for x in s.get("differences", [])][:6])' "${f%.pickle}.replay.json" 2>&1)"
		[ $r -eq 0 ] || rc=1
	done | tee "$dir/replay-check.log"
	grep -q '^[^0]' "$dir/replay-check.log" && rc=1
	tar czf "$out/$name.tar.gz" -C /tmp "$name"
	if [ "$(stat -c %s "$out/$name.tar.gz")" -gt $((15 << 20)) ]; then
		echo "$name.tar.gz over 15 MiB: the pickles stay behind"
		tar czf "$out/$name.tar.gz" -C /tmp --exclude='*.pickle' "$name"
	fi
	return $rc
}

echo "=== $(date -u +%FT%TZ) $(uname -n), $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader || true
step gpu-check "$l1" env OUT="$out" bash bench/gpu-check.sh dist/cuda.test
step gpu-pytorch "$l2" env OUT="$out" MEMREPLAY_BIN="$cli" PYTHON="$py" bash bench/gpu-pytorch.sh dist/libmemreplay.so
export -f record
export out cli py
step trials "$l3" bash -c 'record trials --batches 8,32 --seqs 128,512'
step t24 "$l4" bash -c 'record t24 --gpu-memory 24GiB --batches 32,64,128 --seqs 512'
echo "=== $(date -u +%T) done: $failed step(s) failed; files in $out:"
ls -la "$out"
exit $failed
