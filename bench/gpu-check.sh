#!/usr/bin/env bash
# The cuda backend's checks on a machine with a GPU (issue 5 item 4, first
# part): allocator/cuda's test binary against the real libcuda.so.1, and the
# replay of the project's traces on the GPU with the memreplay CLI.
#
# Usage: bench/gpu-check.sh [test-binary]
#   test-binary  defaults to dist/cuda.test; built here with
#                `go test -c -o dist/cuda.test ./allocator/cuda` when absent
#                (so a machine without Go can run a binary built elsewhere).
# Environment:
#   MEMREPLAY_LIBCUDA  the driver's path, when the loader cannot find
#                      libcuda.so.1 by itself
#   MEMREPLAY_BIN      the CLI (default dist/memreplay; built here with
#                      `go build -o dist/memreplay ./cmd/memreplay` when
#                      absent)
#   OUT                where the logs go (default: the current directory)
#
# It runs, from allocator/cuda (the tests read testdata/ beside them):
#   1. the real-driver tests (MEMREPLAY_REAL_GPU=1): device info, malloc,
#      free, cuMemGetInfo, out-of-memory naming, events, the VMM calls, the
#      allocator's random sequences with invariant checks on the device;
#   2. the real-driver benchmark (cuMemAlloc_v2 + cuMemFree_v2, cuMemGetInfo);
#   3. the whole suite on the fake driver, as CI runs it (it needs a C
#      compiler; without one those tests skip and say so);
# and from the repository's root:
#   4. `memreplay replay --device cuda --format json` of every trace in
#      traces/pytorch and traces/trial (and shared/traces/pytorch or
#      ../shared/traces/pytorch when present), with --check for the traces
#      that carry the recording's decisions ('memreplay inspect' says
#      "checkable"). One line per trace in the log; the JSON reports, and
#      the stderr of each, in $OUT/gpu-check-replay.tar.gz.
# docs/cuda.md ("On a real GPU") says what to look for in the logs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/dist/cuda.test}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
if [ ! -x "$bin" ]; then
	(cd "$root" && go test -c -o "$bin" ./allocator/cuda)
fi
cli=${MEMREPLAY_BIN:-$root/dist/memreplay}
case $cli in /*) ;; *) cli=$PWD/$cli ;; esac
if [ ! -x "$cli" ]; then
	(cd "$root" && go build -o "$cli" ./cmd/memreplay)
fi
out=${OUT:-$PWD}
mkdir -p "$out"
log=$out/gpu-check-cuda.log
(
	cd "$root/allocator/cuda"
	{
		echo "== $(date -u +%FT%TZ) $(uname -n)"
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
		echo "== real-driver tests"
		MEMREPLAY_REAL_GPU=1 "$bin" -test.run 'RealGPU' -test.v -test.count=1
		echo "== real-driver benchmark"
		MEMREPLAY_REAL_GPU=1 "$bin" -test.run '^$' -test.bench 'RealMallocFree' -test.benchmem -test.count=3
		echo "== the suite on the fake driver"
		"$bin" -test.count=1
	} 2>&1 | tee "$log"
)
echo "log: $log"

# Step 4: the traces, replayed on GPU 0.
rlog=$out/gpu-check-replay.log
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/gpu-check-replay"
failed=0
{
	echo "== $(date -u +%FT%TZ) replay on the GPU: $cli"
	traces=()
	for dir in "$root/traces/pytorch" "$root/traces/trial" "$root/shared/traces/pytorch" "$root/../shared/traces/pytorch"; do
		[ -d "$dir" ] || continue
		for t in "$dir"/*.pickle "$dir"/*.mrt; do
			[ -f "$t" ] || continue
			name=$(basename "$t")
			case " ${traces[*]-} " in *" $name "*) continue ;; esac # the same trace twice
			traces+=("$name")
			check=""
			if "$cli" inspect --format json "$t" | grep -q '"checkable": true'; then
				check="--check"
			fi
			base=$work/gpu-check-replay/${name%.*}
			start=$(date +%s.%N)
			rc=0
			"$cli" replay --device cuda $check --progress=false --format json "$t" >"$base.json" 2>"$base.stderr" || rc=$?
			secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
			# One line: the trace, the exit code, the check's counts, the
			# device calls and their measured time.
			field() { grep -m1 "\"$1\":" "$base.json" 2>/dev/null | sed 's/.*": *//; s/,$//' || true; }
			printf '%-52s rc=%d %-7s matched=%s/%s final=%s cudaMalloc=%s cuMemMap=%s measured_ns=%s wall_s=%s\n' \
				"$name" "$rc" "${check:-nocheck}" "$(field decisions_matched)" "$(field decisions_expected)" \
				"$(field final_segments_match)" "$(field cuda_malloc)" "$(field cu_mem_map)" "$(field measured_time_ns)" "$secs"
			if [ "$rc" -ne 0 ]; then
				failed=1
				sed 's/^/    /' "$base.stderr"
			fi
		done
	done
	if [ ${#traces[@]} -eq 0 ]; then
		echo "no traces found"
		failed=1
	fi
	echo "== replay on the GPU: $([ $failed -eq 0 ] && echo "all passed" || echo "FAILURES above")"
} 2>&1 | tee "$rlog"
tar -czf "$out/gpu-check-replay.tar.gz" -C "$work" gpu-check-replay
echo "log: $rlog; reports: $out/gpu-check-replay.tar.gz"
grep -q "all passed" "$rlog"
