#!/usr/bin/env bash
# Two test binaries, old and new, run in turn ROUNDS times on the same
# benchmarks, so that both see the same load on a shared machine; prints
# the best and the median of each benchmark's ns/op, events/s and
# cpu-events/s on each side (docs/performance.md quotes its lines).
#
# Usage: bench/abmin.sh OLD.test NEW.test BENCHREGEX ROUNDS [test flags...]
#   e.g. go test -c -o new.test ./sim/replay   (and old.test at the old commit)
#        bench/abmin.sh old.test new.test '^BenchmarkReplay1M$' 10 -test.cpu 1 -test.benchtime 10x
# `make bench-compare OLD=<commit>` does the same under benchstat.
# abmin OLD.test NEW.test BENCHREGEX ROUNDS [extra test flags...]: alternate runs; print min and median of each metric column "ns/op" and cpu-events/s
old=$1 new=$2 re=$3 rounds=$4; shift 4
tmp=$(mktemp -d)
for r in $(seq $rounds); do
  $old -test.run '^$' -test.bench "$re" "$@" | grep '^Benchmark' | sed 's/^/old /' >> $tmp/out
  $new -test.run '^$' -test.bench "$re" "$@" | grep '^Benchmark' | sed 's/^/new /' >> $tmp/out
done
python3 - $tmp/out <<'PY'
import sys,statistics,collections
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
    f=l.split(); side,name=f[0],f[1]
    for i in range(3,len(f)-1):
        if f[i+1] in ('ns/op','cpu-events/s','events/s'):
            try: d[(name,f[i+1],side)].append(float(f[i]))
            except: pass
keys=sorted({(n,u) for n,u,s in d})
for n,u in keys:
    o,nw=d[(n,u,'old')],d[(n,u,'new')]
    if not o or not nw: continue
    best=min if u=='ns/op' else max
    print(f"{n:50s} {u:14s} old best {best(o):12.1f} med {statistics.median(o):12.1f} | new best {best(nw):12.1f} med {statistics.median(nw):12.1f} | best ratio {best(o)/best(nw):.3f}")
PY
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf $tmp
