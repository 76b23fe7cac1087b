#!/usr/bin/env bash
# Old against new: the benchmarks behind docs/performance.md's figures, run
# on commit OLD (checked out in a temporary git worktree) and on the working
# tree, alternately in the same run, then compared by benchstat.
# Usage: bench/compare.sh OLD [count] [package-regexp]
#   count: runs of each benchmark on each side (default 6; benchstat wants
#          at least 6 for its confidence intervals)
#   package-regexp: only the set's packages that match (e.g. 'libmemreplay')
# `make bench-compare OLD=<commit>` calls it.
#
# Alternating old and new, benchmark by benchmark, is what keeps the ratio
# meaningful on a shared machine whose load moves during the run: both
# sides see the same load. The machine, the CPU and the load average at the
# start and the end are printed with the table.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/compare.sh OLD [count] [package-regexp]}
count=${2:-6}
only=${3:-.}
# golang.org/x/perf's benchstat, pinned (docs/performance.md).
benchstat=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

# package, benchmarks, -benchtime, -cpu ("-": GOMAXPROCS as it is). The
# replay's and the trial model's goals are put per core, so they run on
# one, as bench/replay.sh runs them.
set_=(
	"allocator ^BenchmarkMallocFreeCacheHit\$ 1s -"
	"sim/replay ^BenchmarkReplay1M(Profiled)?\$ 3x 1"
	"sim/workers ^Benchmark(FourWorkersTrialModel|TrialModelSteadyAllocs)\$ 3x 1"
	"trace ^Benchmark(NativeRead|ReadPyTorch|Unpickle)\$ 3x -"
	"profiler ^BenchmarkRealSnapshots\$ 10x -"
	"cmd/libmemreplay ^Benchmark(AllocatorPair|LibraryPair|LibraryPairParallel|ExportedPair|ExportedCall|ExportedPairThreads|GlibcPair)\$ 1s -"
)

rev=$(git rev-parse --verify "$old^{commit}")
tmp=$(mktemp -d)
cleanup() {
	git worktree remove --force "$tmp/old" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
git worktree add --quiet --detach "$tmp/old" "$rev"
# A benchmark file OLD lacks (one added since) is carried into it, so that
# a new benchmark has its baseline too.
for f in $(git ls-files --cached --others --exclude-standard '*bench_test.go'); do
	if [ ! -e "$tmp/old/$f" ] && [ -d "$tmp/old/$(dirname "$f")" ]; then
		cp "$f" "$tmp/old/$f"
		echo "carried into OLD: $f"
	fi
done
# The real snapshots live beside the repository (../shared/traces/pytorch).
[ -d ../shared ] && ln -s "$(cd ../shared && pwd)" "$tmp/shared"

machine() { echo "$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), load average $(cut -d' ' -f1-3 /proc/loadavg)"; }
echo "old: $(git log -1 --format='%h %s' "$rev" | cut -c1-100)"
echo "new: the working tree at $(git log -1 --format='%h' HEAD)$(git diff --quiet HEAD || echo ' + uncommitted changes')"
echo "start: $(machine)"

# Test binaries first, so the runs alternate without builds between them.
for side in old new; do
	root=$PWD
	[ "$side" = old ] && root=$tmp/old
	for e in "${set_[@]}"; do
		pkg=${e%% *}
		[[ $pkg =~ $only ]] || continue
		(cd "$root" && go test -c -o "$tmp/bin/$side/${pkg//\//_}.test" "./$pkg")
	done
done

: >"$tmp/old.txt"
: >"$tmp/new.txt"
for i in $(seq "$count"); do
	for e in "${set_[@]}"; do
		read -r pkg re bt cpu <<<"$e"
		[[ $pkg =~ $only ]] || continue
		cpuflag=()
		[ "$cpu" = - ] || cpuflag=(-test.cpu "$cpu")
		for side in old new; do
			root=$PWD
			[ "$side" = old ] && root=$tmp/old
			(cd "$root/$pkg" && "$tmp/bin/$side/${pkg//\//_}.test" -test.run '^$' -test.bench "$re" \
				-test.benchtime "$bt" "${cpuflag[@]}" -test.benchmem -test.count 1) >>"$tmp/$side.txt"
		done
	done
	echo "round $i of $count done: load average $(cut -d' ' -f1 /proc/loadavg)" >&2
done

echo "end: $(machine)"
cd "$tmp" && go run "$benchstat" old.txt new.txt
