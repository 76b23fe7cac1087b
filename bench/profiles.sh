#!/usr/bin/env bash
# Where the time goes now (issue 19, "profiles for replay and par in
# docs/"): CPU profiles of the replay loop without and with the profiler,
# and of the trial model that `memreplay par` and `memreplay trials` run,
# each on one core as the issue's goals are put, kept in docs/profiles/
# as pprof files with their `go tool pprof -top` readings beside them.
#
# Usage: bench/profiles.sh [outdir]   (default docs/profiles)
# Read one: go tool pprof -top -cum docs/profiles/replay1m.pprof
#           go tool pprof -http : docs/profiles/trialmodel.pprof
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/profiles}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/replay.test" ./sim/replay
go test -c -o "$tmp/workers.test" ./sim/workers

# name, test binary, benchmark, bench time
prof() {
	local name=$1 bin=$2 bench=$3 n=$4
	"$bin" -test.run '^$' -test.bench "^Benchmark$bench\$" -test.cpu 1 -test.benchtime "$n" \
		-test.cpuprofile "$out/$name.pprof" | tee "$tmp/$name.bench"
	{
		echo "# $name: Benchmark$bench, -test.cpu 1 -test.benchtime $n"
		echo "# $(git log -1 --format='commit %h, %cs'); $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); load average $(cut -d' ' -f1-3 /proc/loadavg)"
		grep "^Benchmark$bench" "$tmp/$name.bench" | sed 's/^/# /'
		echo
		echo "## flat (self time)"
		go tool pprof -top -nodecount 40 "$bin" "$out/$name.pprof" 2>/dev/null
		echo
		echo "## cumulative"
		go tool pprof -top -cum -nodecount 40 "$bin" "$out/$name.pprof" 2>/dev/null
	} >"$out/$name.txt"
}
prof replay1m "$tmp/replay.test" Replay1M 40x
prof replay1m-profiled "$tmp/replay.test" Replay1MProfiled 40x
prof trialmodel "$tmp/workers.test" FourWorkersTrialModel 60x
ls -la "$out"
