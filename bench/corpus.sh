#!/usr/bin/env bash
# The real-snapshot corpus, old against new: BenchmarkRealSnapshots
# (profiler) imports every real PyTorch snapshot (../shared/traces/pytorch
# and traces/pytorch), prepares it, replays it with the profiler and calls
# Profiler.Finish: what `memreplay report` does, without the rendering.
#
# Usage: bench/corpus.sh OLD [NEW] [rounds] [passes]
#   OLD, NEW: commits; NEW defaults to the working tree (uncommitted
#             changes included). Each commit is checked out in a temporary
#             git worktree with ../shared linked beside it, so that both
#             find the same snapshots.
#   rounds:   old and new runs, alternating (default 7)
#   passes:   passes over the corpus per run (default 10)
#
# Prints each round's time per pass over the corpus on both sides and the
# ratio OLD/NEW (above 1: NEW is faster), then the median ratio, by wall
# time and by CPU time (user + system of the test process, which moves
# less with the machine's load), with the machine and its load average at
# the start and the end. Running the two sides in turn is what keeps the
# ratio meaningful on a shared machine: both see the same load.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/corpus.sh OLD [NEW] [rounds] [passes]}
new=${2:-}
rounds=${3:-7}
passes=${4:-10}
bench='^BenchmarkRealSnapshots$'

tmp=$(mktemp -d)
trees=()
cleanup() {
	for t in "${trees[@]}"; do git worktree remove --force "$t" >/dev/null 2>&1 || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
[ -d ../shared ] || { echo "bench/corpus.sh: ../shared (the real snapshots) is missing" >&2; exit 2; }
ln -s "$(cd ../shared && pwd)" "$tmp/shared"

# checkout REV DIR: a worktree of REV at DIR, with the corpus benchmark
# carried in when REV predates it.
checkout() {
	git worktree add --quiet --detach "$2" "$1"
	trees+=("$2")
	for f in profiler/realbench_test.go; do
		[ -e "$2/$f" ] || { cp "$f" "$2/$f"; echo "carried into $1: $f"; }
	done
}
oldrev=$(git rev-parse --verify "$old^{commit}")
checkout "$oldrev" "$tmp/old"
if [ -n "$new" ]; then
	newrev=$(git rev-parse --verify "$new^{commit}")
	checkout "$newrev" "$tmp/new"
	newroot=$tmp/new
	newname=$(git log -1 --format='%h %s' "$newrev" | cut -c1-90)
else
	newroot=$PWD
	newname="the working tree at $(git log -1 --format='%h' HEAD)$(git diff --quiet HEAD || echo ' + uncommitted changes')"
fi
(cd "$tmp/old" && go test -c -o "$tmp/old.test" ./profiler)
(cd "$newroot" && go test -c -o "$tmp/new.test" ./profiler)

machine() { echo "$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), load average $(cut -d' ' -f1-3 /proc/loadavg)"; }
echo "old: $(git log -1 --format='%h %s' "$oldrev" | cut -c1-90)"
echo "new: $newname"
echo "corpus: $(ls ../shared/traces/pytorch/*.pickle traces/pytorch/*.pickle 2>/dev/null | wc -l) snapshots; $passes passes per run, $rounds rounds"
echo "start: $(machine)"

# run SIDE ROOT: one run; prints "wall-ns-per-pass cpu-ns-per-pass".
run() {
	local out t0 t1 me=$BASHPID
	t0=$(cut -d' ' -f14-17 "/proc/$me/stat")
	out=$(cd "$2/profiler" && "$tmp/$1.test" -test.run '^$' -test.bench "$bench" -test.benchtime "${passes}x" -test.count 1)
	t1=$(cut -d' ' -f14-17 "/proc/$me/stat")
	# Fields 16 and 17 of /proc/PID/stat are the waited-for children's
	# user and system time, in clock ticks.
	local ticks
	ticks=$(awk -v a="$t0" -v b="$t1" 'BEGIN { split(a, x, " "); split(b, y, " "); print (y[3] + y[4]) - (x[3] + x[4]) }')
	local ns
	ns=$(awk '/^BenchmarkRealSnapshots/ { for (i = 1; i < NF; i++) if ($(i+1) == "ns/op") print $i }' <<<"$out")
	[ -n "$ns" ] || { echo "bench/corpus.sh: no result from the $1 side:" >&2; echo "$out" >&2; exit 1; }
	echo "$ns $(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v p="$passes" 'BEGIN { printf "%.0f", t / hz * 1e9 / p }')"
}

printf '%-6s %14s %14s %8s %14s %14s %8s %6s\n' round "old ms/pass" "new ms/pass" ratio "old cpu ms" "new cpu ms" ratio load
ratios=()
cratios=()
for i in $(seq "$rounds"); do
	read -r ow oc < <(run old "$tmp/old")
	read -r nw nc < <(run new "$newroot")
	r=$(awk -v a="$ow" -v b="$nw" 'BEGIN { printf "%.2f", a / b }')
	cr=$(awk -v a="$oc" -v b="$nc" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
	ratios+=("$r")
	cratios+=("$cr")
	printf '%-6s %14.1f %14.1f %7sx %14.1f %14.1f %7sx %6s\n' "$i" "$(awk -v x="$ow" 'BEGIN { print x / 1e6 }')" \
		"$(awk -v x="$nw" 'BEGIN { print x / 1e6 }')" "$r" "$(awk -v x="$oc" 'BEGIN { print x / 1e6 }')" \
		"$(awk -v x="$nc" 'BEGIN { print x / 1e6 }')" "$cr" "$(cut -d' ' -f1 /proc/loadavg)"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
echo "end: $(machine)"
echo "median ratio OLD/NEW: $(median "${ratios[@]}")x by wall time, $(median "${cratios[@]}")x by CPU time (above 1: NEW is faster)"
