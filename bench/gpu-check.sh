#!/usr/bin/env bash
# The cuda backend's checks on a machine with a GPU (issue 5 item 4, first
# part): allocator/cuda's test binary against the real libcuda.so.1.
#
# Usage: bench/gpu-check.sh [test-binary]
#   test-binary  defaults to dist/cuda.test; built here with
#                `go test -c -o dist/cuda.test ./allocator/cuda` when absent
#                (so a machine without Go can run a binary built elsewhere).
# Environment:
#   MEMREPLAY_LIBCUDA  the driver's path, when the loader cannot find
#                      libcuda.so.1 by itself
#   OUT                where the log goes (default: the current directory)
#
# It runs, from allocator/cuda (the tests read testdata/ beside them):
#   1. the real-driver tests (MEMREPLAY_REAL_GPU=1): device info, malloc,
#      free, cuMemGetInfo, out-of-memory naming, events, the VMM calls, the
#      allocator's random sequences with invariant checks on the device;
#   2. the real-driver benchmark (cuMemAlloc_v2 + cuMemFree_v2, cuMemGetInfo);
#   3. the whole suite on the fake driver, as CI runs it (it needs a C
#      compiler; without one those tests skip and say so).
# docs/cuda.md says what to look for in the log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/dist/cuda.test}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
if [ ! -x "$bin" ]; then
	(cd "$root" && go test -c -o "$bin" ./allocator/cuda)
fi
out=${OUT:-$PWD}
mkdir -p "$out"
log=$out/gpu-check-cuda.log
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
echo "log: $log"
