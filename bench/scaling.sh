#!/usr/bin/env bash
# Scaling across cores (issue 19 item 2): the trial model's engine and the
# PAR sweep at GOMAXPROCS 1, 2, 4, ... up to `nproc`, as speedup over one
# core and efficiency per core (speedup / cores).
#
# Usage: bench/scaling.sh [rounds]   (default 5)
# Environment: SCALING_MIXES  mixes per PAR and setting of the par run (default 8)
#              SCALING_BIN    a folder with workers.test and memreplay built
#                             elsewhere (`go test -c -o DIR/workers.test
#                             ./sim/workers; go build -o DIR/memreplay
#                             ./cmd/memreplay`), for a machine without Go
#
#  - BenchmarkFourWorkersTrialModel (sim/workers), events/s: one simulated
#    GPU with four workers is a discrete-event simulation of one clock, run
#    on one goroutine, so more cores help it only through the garbage
#    collector's background work;
#  - `memreplay par --mixes M --steps 2 --parallel 0` (the BERT-family
#    study on a 24 GiB card, PAR 1 to 5, two allocator settings), wall
#    time: the mixes are independent and run one per core (GOMAXPROCS).
# Each round runs every GOMAXPROCS once, in turn, so that they all see
# nearly the same load; a speedup is taken within each round, and the
# median over the rounds counts. par's CPU time (user + system) is printed
# too: equal CPU time at every GOMAXPROCS means the work did not grow with
# the cores, so what the wall time does not gain was waiting for a CPU. The machine is shared: the load
# average is printed with each measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
mixes=${SCALING_MIXES:-8}
ncpu=$(nproc)
cpus=()
for ((k = 1; k < ncpu; k *= 2)); do cpus+=("$k"); done
cpus+=("$ncpu")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${SCALING_BIN:-}" ]; then
	cp "$SCALING_BIN/workers.test" "$SCALING_BIN/memreplay" "$tmp/"
else
	go test -c -o "$tmp/workers.test" ./sim/workers
	go build -o "$tmp/memreplay" ./cmd/memreplay
fi

echo "machine: $ncpu CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); load average $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$tmp/runs"
for r in $(seq "$rounds"); do
	for k in "${cpus[@]}"; do
		eps=$("$tmp/workers.test" -test.run '^$' -test.bench '^BenchmarkFourWorkersTrialModel$' -test.benchtime 3x \
			-test.cpu "$k" | awk '/^BenchmarkFourWorkersTrialModel/ {for (i = 1; i < NF; i++) if ($(i+1) == "events/s") print $i}')
		echo "workers $k $eps $(cut -d' ' -f1 /proc/loadavg) -" | tee -a "$tmp/runs"
		# wall and CPU seconds of one par run (python3's resource module,
		# so that no /usr/bin/time is needed)
		read -r wall cpu < <(GOMAXPROCS=$k python3 -c '
import resource, subprocess, sys, time
t = time.perf_counter()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.2f %.2f" % (time.perf_counter() - t, r.ru_utime + r.ru_stime))' \
			"$tmp/memreplay" par --mixes "$mixes" --steps 2 --parallel 0 --progress=false --format json)
		echo "par $k $wall $(cut -d' ' -f1 /proc/loadavg) $cpu" | tee -a "$tmp/runs"
	done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$tmp/runs" "$mixes" <<'PY'
import statistics, sys
# runs[(what, k)] = [(value, load, cpu seconds or None)], one per round
runs = {}
for line in open(sys.argv[1]):
    what, k, v, load, cpu = line.split()
    runs.setdefault((what, int(k)), []).append((float(v), float(load), None if cpu == "-" else float(cpu)))
ks = sorted({k for _, k in runs})
# A speedup is taken within a round (k cores against one core in the same
# round, minutes apart), then the median over the rounds: the load moves
# between rounds more than within one.
def speedups(what, k):
    one, mine = runs[(what, 1)], runs[(what, k)]
    if what == "workers":
        return [m[0] / o[0] for o, m in zip(one, mine)]
    return [o[0] / m[0] for o, m in zip(one, mine)]
print()
print("| GOMAXPROCS | FourWorkersTrialModel events/s (median) | speedup per round | median speedup | efficiency per core "
      "| par --mixes %s wall time (median) | CPU time (median) | speedup per round | median speedup | efficiency per core | load averages |" % sys.argv[2])
print("|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---|")
for k in ks:
    w, p = runs[("workers", k)], runs[("par", k)]
    sw, sp = speedups("workers", k), speedups("par", k)
    mw, mp = statistics.median(sw), statistics.median(sp)
    print("| %d | %.2f M | %s | %.2fx | %.0f%% | %.1f s | %.1f s | %s | %.2fx | %.0f%% | %s |" % (
        k, statistics.median(v for v, _, _ in w) / 1e6, ", ".join("%.2f" % x for x in sw), mw, 100 * mw / k,
        statistics.median(v for v, _, _ in p), statistics.median(c for _, _, c in p), ", ".join("%.2f" % x for x in sp),
        mp, 100 * mp / k, " ".join("%.1f" % l for _, l, _ in w + p)))
PY
