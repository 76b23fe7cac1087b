#!/usr/bin/env bash
# Snapshot import against Python's own pickle.load, side by side in one run.
# Usage: bench/import.sh [rounds]   (PYTHON=... picks the interpreter)
#
# Builds a PyTorch snapshot of about a million entries the way the docs
# make one (memreplay synth, then replay --record big.pickle), then, in
# each round, one after the other on the same file:
#  - python: pickle.load(open(f, "rb")) timed inside Python (perf_counter,
#    3 loads, the interpreter's start not counted), and
#  - go: BenchmarkImportFile (trace.ReadPyTorchPacked, as trace.Open
#    imports: streamed, each entry converted as it completes, the events
#    packed; 3 imports).
# and prints both times per load and their ratio. Interleaving the two
# keeps the ratio meaningful on a shared, loaded machine, where absolute
# times move with the load; the median round is the figure. Then the
# whole commands as a user runs them, process start included:
# `memreplay inspect big.pickle` against `python3 -c 'pickle.load(...)'`.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/memreplay" ./cmd/memreplay
go test -c -o "$tmp/trace.test" ./trace
"$tmp/memreplay" synth --model bert-base --batch 8 --seq-len 128 --steps 280 -o "$tmp/s.mrt" >/dev/null
"$tmp/memreplay" replay --record "$tmp/big.pickle" "$tmp/s.mrt" >/dev/null
f=$tmp/big.pickle
entries=$("$py" -c 'import pickle,sys; d=pickle.load(open(sys.argv[1],"rb")); print(sum(len(t) for t in d["device_traces"]))' "$f")
echo "snapshot: $(stat -c %s "$f") bytes, $entries entries; $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "python: $("$py" --version 2>&1)"

ratios=()
for r in $(seq "$rounds"); do
	pyms=$("$py" - "$f" <<'PY'
import gc, pickle, sys, time
best = []
for _ in range(3):
    t = time.perf_counter()
    with open(sys.argv[1], "rb") as fh:
        d = pickle.load(fh)
    best.append(time.perf_counter() - t)
    del d
    gc.collect()
print("%.1f" % (1000 * sum(best) / len(best)))
PY
)
	gons=$(MEMREPLAY_BENCH_PICKLE=$f "$tmp/trace.test" -test.run '^$' -test.bench '^BenchmarkImportFile$' -test.benchtime 3x |
		awk '/^BenchmarkImportFile/ {print $3}')
	goms=$(awk -v n="$gons" 'BEGIN {printf "%.1f", n / 1e6}')
	ratio=$(awk -v p="$pyms" -v g="$goms" 'BEGIN {printf "%.2f", p / g}')
	ratios+=("$ratio")
	echo "round $r: python pickle.load ${pyms} ms, memreplay import ${goms} ms: ${ratio}x (load $(cut -d' ' -f1 /proc/loadavg))"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "import: memreplay is ${median}x as fast as pickle.load (median of $rounds rounds; baseline: pickle.load in the same rounds)"

# The commands as a user runs them, process start included.
t() { local s e; s=$(date +%s%N); "$@" >/dev/null; e=$(date +%s%N); echo $(((e - s) / 1000000)); }
pyc=$(t "$py" -c 'import pickle,sys; pickle.load(open(sys.argv[1],"rb"))' "$f")
ins=$(t "$tmp/memreplay" inspect "$f")
echo "commands: python3 -c 'pickle.load(...)' ${pyc} ms, memreplay inspect ${ins} ms: $(awk -v p="$pyc" -v g="$ins" 'BEGIN {printf "%.2f", p / g}')x (inspect also checks the trace for replay)"
