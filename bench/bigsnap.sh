#!/usr/bin/env bash
# Big snapshots, old against new (issue 19 item 5): the four commands a
# user runs on a 1.0 GB PyTorch snapshot of 24.9 M entries, each as one
# process under /usr/bin/time (wall time, CPU time = user + system, peak
# RSS), the commit OLD's binary and the working tree's in turn.
#
# Usage: bench/bigsnap.sh OLD [rounds]   (default 2 rounds)
# Environment: BIGSNAP_FILE  an existing snapshot to use instead of making
#                            one (kept; a made one is deleted at the end)
#              BIGSNAP_OLD_BIN  an old binary already built (OLD then only
#                            names it in the output; no worktree is made)
#              BIGSNAP_CMDS  the commands to run (default: all four)
#              BIGSNAP_OUTDIR  where out.pickle and big.html go (default: the
#                            temporary directory; name a disk when $TMPDIR
#                            is memory)
#
# The snapshot is made as docs/performance.md says: `memreplay synth
# --model bert-base --batch 8 --seq-len 128 --steps 7000`, then `replay
# --record big.pickle` (about 20 s, 1 GB in $TMPDIR). The commands:
#   inspect   memreplay inspect big.pickle
#   replay    memreplay replay big.pickle
#   report    memreplay report -o big.html big.pickle
#   record    memreplay replay --record out.pickle big.pickle
# Each round runs every command on both sides, one after the other, so
# that both see nearly the same load; the load average is printed beside
# each run. The goal is each under 5 s and 1 GB on a 2-CPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/bigsnap.sh OLD [rounds]}
rounds=${2:-2}

tmp=$(mktemp -d)
cleanup() {
	git worktree remove --force "$tmp/old" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
if [ -n "${BIGSNAP_OLD_BIN:-}" ]; then
	cp "$BIGSNAP_OLD_BIN" "$tmp/memreplay-old"
else
	git worktree add --quiet --detach "$tmp/old" "$(git rev-parse --verify "$old^{commit}")"
	(cd "$tmp/old" && go build -o "$tmp/memreplay-old" ./cmd/memreplay)
fi
outdir=${BIGSNAP_OUTDIR:-$tmp}
go build -o "$tmp/memreplay-new" ./cmd/memreplay

snap=${BIGSNAP_FILE:-}
if [ -z "$snap" ]; then
	snap=$tmp/big.pickle
	"$tmp/memreplay-new" synth --model bert-base --batch 8 --seq-len 128 --steps 7000 -q -o "$tmp/big.mrt"
	"$tmp/memreplay-new" replay --progress=false --record "$snap" "$tmp/big.mrt" >/dev/null
	rm -f "$tmp/big.mrt"
fi

echo "old: $(git log -1 --format='%h %s' "$old" | cut -c1-90)"
echo "new: the working tree at $(git log -1 --format='%h' HEAD)$(git diff --quiet HEAD || echo ' + uncommitted changes')"
echo "snapshot: $snap, $(stat -c %s "$snap") bytes"
echo "machine: $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %-4s %9s %9s %10s %6s\n' command side wall cpu rss load
for _ in $(seq "$rounds"); do
	for cmd in ${BIGSNAP_CMDS:-inspect replay report record}; do
		for side in old new; do
			case $cmd in
			inspect) args=(inspect "$snap") ;;
			replay) args=(replay --progress=false "$snap") ;;
			report) args=(report --progress=false -o "$outdir/big.html" "$snap") ;;
			record) args=(replay --progress=false --record "$outdir/out.pickle" "$snap") ;;
			esac
			load=$(cut -d' ' -f1 /proc/loadavg)
			/usr/bin/time -o "$tmp/time" -f '%e %U %S %M' "$tmp/memreplay-$side" "${args[@]}" >/dev/null 2>"$tmp/err" ||
				{ cat "$tmp/err" >&2; exit 1; }
			read -r wall user sys rss <"$tmp/time"
			printf '%-8s %-4s %7.2f s %7.2f s %6d MiB %6s\n' "$cmd" "$side" "$wall" \
				"$(awk -v u="$user" -v s="$sys" 'BEGIN {print u + s}')" $((rss / 1024)) "$load"
			rm -f "$outdir/big.html" "$outdir/out.pickle"
		done
	done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
