#!/usr/bin/env bash
# How cost grows (issue 19 item 6): time and peak RSS of the memreplay
# command against the size of its work, each command one process: peak RSS
# and CPU time (user + system) from /usr/bin/time -f '%M %U %S', wall time
# from the clock around it; then a CSV and log-log SVG plots (bench/plot)
# with each line's fitted slope. On a shared machine the CPU time is the
# steadier measure: the wall time also counts the waits for a free core.
#
# Usage: bench/growth.sh
# Environment:
#   GROWTH_MAX         largest trace, in events (default 1e8; 1e6 runs in a
#                      few minutes)
#   GROWTH_PICKLE_MAX  largest snapshot pickle to import (default 1e8: a
#                      4 GB file on disk, recorded and imported in about 2
#                      minutes; 1e7 stops at the 400 MB one)
#   GROWTH_MIXES       largest number of par mixes (default 64; 8 with a
#                      GROWTH_MAX under 1e7)
#   GROWTH_REPEAT      runs of each point up to 1e6 events (default 3; the
#                      fastest counts); larger points run once
#   GROWTH_DIR         where data/growth.csv and img/growth-*.svg go
#                      (default docs when GROWTH_MAX is unset, else
#                      bench/out, so that a quick run leaves the docs alone)
#
# The commands, each on the same kind of work:
#   replay  memreplay replay --format json T.mrt: a native trace of the
#           trial model (memreplay synth --model bert-base --batch 8
#           --seq-len 128, --steps picked for each decade: about 3,555
#           events per step after 5,100 of set-up; the 1e3 point is the
#           same model cut to one layer and one step)
#   import  memreplay inspect T.pickle: the same trace recorded as a PyTorch
#           snapshot (replay --record T.pickle), imported and prepared
#   report  memreplay report -o T.html T.mrt: the replay, the profile and
#           the HTML page (its size in bytes, and the time headless Chromium
#           takes to draw it, when Chromium is there)
#   par     memreplay par --mixes M --steps 2 --parallel 1: the BERT-family
#           study on a 24 GiB card, PAR 1 to 5, two allocator settings,
#           M = 1, 2, 4, ... mixes; one mix at a time so that the line
#           measures work, not the second CPU's availability
# The load average is written beside each point: the machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."

num() { python3 -c "print(int(float('$1')))"; }
max=$(num "${GROWTH_MAX:-1e8}")
pmax=$(num "${GROWTH_PICKLE_MAX:-1e8}")
repeat=${GROWTH_REPEAT:-3}
if [ -z "${GROWTH_MAX:-}" ]; then dir=${GROWTH_DIR:-docs}; else dir=${GROWTH_DIR:-bench/out}; fi
if [ "$max" -lt 10000000 ]; then mixes=${GROWTH_MIXES:-8}; else mixes=${GROWTH_MIXES:-64}; fi
mkdir -p "$dir/data" "$dir/img"
csv=$dir/data/growth.csv

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/memreplay
go build -o "$bin" ./cmd/memreplay
go build -o "$tmp/plot" ./bench/plot

echo "machine: $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(free -g | awk '/^Mem/ {print $2}') GiB; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command,events,seconds,cpu_seconds,rss_kib,bytes,render_ms,load1" >"$csv"

# measure EVENTS CMD...: runs CMD, its output discarded (GROWTH_REPEAT
# times for up to 1e6 events, else once); sets best (the fastest run's
# seconds), bestcpu (its user + system CPU seconds, in 10 ms steps) and
# bestrss (its peak RSS). EVENTS 0: once.
measure() {
	local n=$1 runs=1 secs rss cpu t0 t1 user sys
	shift
	[ "$n" -gt 0 ] && [ "$n" -le 1000000 ] && runs=$repeat
	best="" bestrss="" bestcpu=""
	for _ in $(seq "$runs"); do
		# %e has 10 ms steps, too coarse for the small points: the wall
		# time is taken around it in nanoseconds.
		t0=$(date +%s%N)
		/usr/bin/time -o "$tmp/time" -f '%M %U %S' "$@" >/dev/null
		t1=$(date +%s%N)
		read -r rss user sys <"$tmp/time"
		secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.4f", (b - a) / 1e9}')
		cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN {printf "%.2f", u + s}')
		if [ -z "$best" ] || awk -v a="$secs" -v b="$best" 'BEGIN {exit !(a < b)}'; then
			best=$secs bestrss=$rss bestcpu=$cpu
		fi
	done
}

# row NAME EVENTS [BYTES [RENDER_MS]]: appends the last measurement.
row() {
	local load
	load=$(cut -d' ' -f1 /proc/loadavg)
	echo "$1,$2,$best,$bestcpu,$bestrss,${3:-},${4:-},$load" >>"$csv"
	printf '%-7s %11s  %8s s  %7s s CPU  %8s KiB  %11s bytes  %6s ms  load %s\n' "$1" "$2" "$best" "$bestcpu" "$bestrss" "${3:--}" "${4:--}" "$load"
}

chromium=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)

for ((d = 3, n = 1000; n <= max; d++, n *= 10)); do
	t=$tmp/t$d.mrt
	if [ "$d" -eq 3 ]; then
		"$bin" synth --model bert-base --batch 8 --seq-len 128 --layers 1 --steps 1 -q -o "$t"
	else
		steps=$(((n - 5100) / 3555))
		[ "$steps" -ge 1 ] || steps=1
		"$bin" synth --model bert-base --batch 8 --seq-len 128 --steps "$steps" -q -o "$t"
	fi
	"$bin" replay --format json --progress=false "$t" >"$tmp/r.json"
	events=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["events"])' "$tmp/r.json")
	measure "$events" "$bin" replay --format json --progress=false "$t"
	row replay "$events" "$(stat -c %s "$t")"

	# The page: its size, and its drawing time in headless Chromium.
	measure "$events" "$bin" report --progress=false -o "$tmp/t.html" "$t"
	render=""
	if [ -n "$chromium" ]; then
		render=$("$tmp/plot" render "$tmp/t.html" | awk '{print $1}') || render=""
	fi
	row report "$events" "$(stat -c %s "$tmp/t.html")" "$render"

	if [ "$n" -le "$pmax" ]; then
		p=$tmp/t$d.pickle
		"$bin" replay --progress=false --record "$p" "$t" >/dev/null 2>"$tmp/record.log" || { cat "$tmp/record.log"; exit 1; }
		entries=$("$bin" inspect "$p" | awk -F'|' '$2 ~ /^ events / {gsub(/ /, "", $3); print $3}')
		measure "$entries" "$bin" inspect "$p"
		row import "$entries" "$(stat -c %s "$p")"
		rm -f "$p"
	fi
	rm -f "$t"
done

for ((m = 1; m <= mixes; m *= 2)); do
	measure 0 "$bin" par --mixes "$m" --steps 2 --parallel 1 --progress=false --format json
	row par "$m"
done

echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
"$tmp/plot" -csv "$csv" -img "$dir/img"
