#!/usr/bin/env bash
# The real-snapshot corpus, old against new, two ways:
#
#   report:    what a user runs, `memreplay report -o X.html FILE`, each
#              commit's own binary on every real PyTorch snapshot
#              (../shared/traces/pytorch and traces/pytorch): import,
#              replay, the profile and the HTML page, process start and
#              output file included.
#   benchmark: BenchmarkRealSnapshots (profiler): import with the old API
#              (ReadPyTorchFile + Prepare, which every commit has), replay
#              with the profiler, Profiler.Finish; no rendering, no
#              process start.
#
# Usage: bench/corpus.sh OLD [NEW] [rounds] [passes] [which]
#   OLD, NEW: commits; NEW defaults to the working tree (uncommitted
#             changes included). Each commit is checked out in a temporary
#             git worktree with ../shared linked beside it, so that both
#             find the same snapshots.
#   rounds:   old and new runs, alternating (default 7)
#   passes:   passes over the corpus per run (default 10)
#   which:    report, benchmark or both (default both)
#
# Prints each round's time per pass over the corpus on both sides and the
# ratio OLD/NEW (above 1: NEW is faster), then the median ratio, by wall
# time and by CPU time (user + system of the processes, which moves less
# with the machine's load), with the machine and its load average at the
# start and the end. Running the two sides in turn is what keeps the ratio
# meaningful on a shared machine: both see the same load. Both sides do
# the same work: the same files, flags and environment (GOGC and
# GOMEMLIMIT as the caller's).
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/corpus.sh OLD [NEW] [rounds] [passes] [report|benchmark|both]}
new=${2:-}
rounds=${3:-7}
passes=${4:-10}
which=${5:-both}
case $which in report | benchmark | both) ;; *)
	echo "bench/corpus.sh: which is report, benchmark or both, not $which" >&2
	exit 2
	;;
esac
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
files=()
for f in ../shared/traces/pytorch/*.pickle traces/pytorch/*.pickle; do
	[ -e "$f" ] && files+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
done
[ ${#files[@]} -gt 0 ] || { echo "bench/corpus.sh: no snapshots" >&2; exit 2; }

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
for side in old new; do
	root=$tmp/old
	[ $side = new ] && root=$newroot
	if [ "$which" != report ]; then (cd "$root" && go test -c -o "$tmp/$side.test" ./profiler); fi
	if [ "$which" != benchmark ]; then (cd "$root" && go build -o "$tmp/$side.memreplay" ./cmd/memreplay); fi
done

machine() { echo "$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), load average $(cut -d' ' -f1-3 /proc/loadavg)"; }
echo "old: $(git log -1 --format='%h %s' "$oldrev" | cut -c1-90)"
echo "new: $newname"
echo "corpus: ${#files[@]} snapshots; $passes passes per run, $rounds rounds"
echo "start: $(machine)"

# ticks PID: the user and system time of the shell PID's waited-for
# children (fields 16 and 17 of /proc/PID/stat), in clock ticks.
ticks() { cut -d' ' -f16-17 "/proc/$1/stat" | awk '{ print $1 + $2 }'; }
hz=$(getconf CLK_TCK)

# run_report SIDE: one run of `memreplay report` over the corpus, passes
# times; prints "wall-ns-per-pass cpu-ns-per-pass".
run_report() {
	local t0 t1 w0 w1 i f me=$BASHPID
	t0=$(ticks $me)
	w0=$(date +%s%N)
	for ((i = 0; i < passes; i++)); do
		for f in "${files[@]}"; do
			"$tmp/$1.memreplay" report -o "$tmp/$1.html" "$f" >/dev/null ||
				{ echo "bench/corpus.sh: the $1 side's report of $f failed" >&2; exit 1; }
		done
	done
	w1=$(date +%s%N)
	t1=$(ticks $me)
	echo "$(((w1 - w0) / passes)) $(awk -v t=$((t1 - t0)) -v hz="$hz" -v p="$passes" 'BEGIN { printf "%.0f", t / hz * 1e9 / p }')"
}

# run_benchmark SIDE: one run of the benchmark; prints "wall-ns-per-pass
# cpu-ns-per-pass" (the wall time as the benchmark reports it).
run_benchmark() {
	local out t0 t1 root=$tmp/old me=$BASHPID
	[ "$1" = new ] && root=$newroot
	t0=$(ticks $me)
	out=$(cd "$root/profiler" && "$tmp/$1.test" -test.run '^$' -test.bench "$bench" -test.benchtime "${passes}x" -test.count 1)
	t1=$(ticks $me)
	local ns
	ns=$(awk '/^BenchmarkRealSnapshots/ { for (i = 1; i < NF; i++) if ($(i+1) == "ns/op") print $i }' <<<"$out")
	[ -n "$ns" ] || { echo "bench/corpus.sh: no result from the $1 side:" >&2; echo "$out" >&2; exit 1; }
	echo "$ns $(awk -v t=$((t1 - t0)) -v hz="$hz" -v p="$passes" 'BEGIN { printf "%.0f", t / hz * 1e9 / p }')"
}

median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# compare KIND: rounds of old and new in turn; prints the table and the
# medians.
compare() {
	local ratios=() cratios=() i ow oc nw nc r cr
	echo
	case $1 in
	report) echo "memreplay report -o X.html FILE, every snapshot (import + replay + report):" ;;
	benchmark) echo "BenchmarkRealSnapshots (import + replay + Profiler.Finish, in one process):" ;;
	esac
	printf '%-6s %14s %14s %8s %14s %14s %8s %6s\n' round "old ms/pass" "new ms/pass" ratio "old cpu ms" "new cpu ms" ratio load
	for i in $(seq "$rounds"); do
		read -r ow oc < <("run_$1" old)
		read -r nw nc < <("run_$1" new)
		[ -n "${ow:-}" ] && [ -n "${nw:-}" ] || { echo "bench/corpus.sh: a run gave no figure" >&2; exit 1; }
		r=$(awk -v a="$ow" -v b="$nw" 'BEGIN { printf "%.2f", a / b }')
		cr=$(awk -v a="$oc" -v b="$nc" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
		ratios+=("$r")
		cratios+=("$cr")
		printf '%-6s %14.1f %14.1f %7sx %14.1f %14.1f %7sx %6s\n' "$i" "$(awk -v x="$ow" 'BEGIN { print x / 1e6 }')" \
			"$(awk -v x="$nw" 'BEGIN { print x / 1e6 }')" "$r" "$(awk -v x="$oc" 'BEGIN { print x / 1e6 }')" \
			"$(awk -v x="$nc" 'BEGIN { print x / 1e6 }')" "$cr" "$(cut -d' ' -f1 /proc/loadavg)"
	done
	echo "$1: median ratio OLD/NEW: $(median "${ratios[@]}")x by wall time, $(median "${cratios[@]}")x by CPU time (above 1: NEW is faster)"
}

[ "$which" = benchmark ] || compare report
[ "$which" = report ] || compare benchmark
echo
echo "end: $(machine)"
