#!/usr/bin/env bash
# Scaling across cores (issue 19 item 2): the trial model's engine and the
# PAR sweep at GOMAXPROCS 1, 2, 4, ... up to `nproc`, as speedup over one
# core and efficiency per core (speedup / cores).
#
# Usage: bench/scaling.sh [rounds]   (default 3)
# Environment: SCALING_MIXES  mixes per PAR and setting of the par run (default 8)
#
#  - BenchmarkFourWorkersTrialModel (sim/workers), events/s: one simulated
#    GPU with four workers is a discrete-event simulation of one clock, run
#    on one goroutine, so more cores help it only through the garbage
#    collector's background work;
#  - `memreplay par --mixes M --steps 2 --parallel 0` (the BERT-family
#    study on a 24 GiB card, PAR 1 to 5, two allocator settings), wall
#    time: the mixes are independent and run one per core (GOMAXPROCS).
# Each round runs every GOMAXPROCS once, in turn, so that they all see the
# same load; the median round counts. The machine is shared: the load
# average is printed with each measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
mixes=${SCALING_MIXES:-8}
ncpu=$(nproc)
cpus=()
for ((k = 1; k < ncpu; k *= 2)); do cpus+=("$k"); done
cpus+=("$ncpu")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/workers.test" ./sim/workers
go build -o "$tmp/memreplay" ./cmd/memreplay

echo "machine: $ncpu CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); load average $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$tmp/runs"
for r in $(seq "$rounds"); do
	for k in "${cpus[@]}"; do
		eps=$("$tmp/workers.test" -test.run '^$' -test.bench '^BenchmarkFourWorkersTrialModel$' -test.benchtime 3x \
			-test.cpu "$k" | awk '/^BenchmarkFourWorkersTrialModel/ {for (i = 1; i < NF; i++) if ($(i+1) == "events/s") print $i}')
		echo "workers $k $eps $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$tmp/runs"
		t0=$(date +%s%N)
		GOMAXPROCS=$k "$tmp/memreplay" par --mixes "$mixes" --steps 2 --parallel 0 --progress=false --format json >/dev/null
		t1=$(date +%s%N)
		echo "par $k $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", (b - a) / 1e9}') $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$tmp/runs"
	done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$tmp/runs" "$mixes" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    what, k, v, load = line.split()
    runs.setdefault((what, int(k)), []).append((float(v), float(load)))
def med(what, k):
    return statistics.median(v for v, _ in runs[(what, k)])
def loads(what, k):
    return "-".join("%.1f" % l for _, l in runs[(what, k)])
ks = sorted({k for _, k in runs})
print()
print("| GOMAXPROCS | FourWorkersTrialModel events/s | speedup | efficiency per core | par --mixes %s wall time | speedup | efficiency per core | load averages |" % sys.argv[2])
print("|---:|---:|---:|---:|---:|---:|---:|---|")
for k in ks:
    w, p = med("workers", k), med("par", k)
    sw, sp = w / med("workers", 1), med("par", 1) / p
    print("| %d | %.2f M | %.2fx | %.0f%% | %.1f s | %.2fx | %.0f%% | %s; %s |" % (
        k, w / 1e6, sw, 100 * sw / k, p, sp, 100 * sp / k, loads("workers", k), loads("par", k)))
PY
