"""Stress of the killed-worker tests (not part of the suite: minutes per
run set). RUNS times: WORKERS worker.py processes on one SQLite study and
one budget file, KILLS of them SIGKILLed one after another (at least GAP s
apart) while holding the gate, each replaced at once, as a supervisor
would. Per run it prints the surviving workers' exit codes, how many died
of a double pop (Optuna 3.1's race on enqueued trials on SQLite,
optuna/optuna#4621: "has already finished and can not be updated"), how
many of SQLite's "database is locked" (a writer waited out the busy
timeout; the calls that met it are printed), every other failure, and whether the study lost a trial: each
trial failed for a killed worker (memreplay_worker_died) must have exactly
one retry (memreplay_retry_of), completed or itself failed and retried;
none left WAITING or RUNNING with a worker's pid.

Usage: stress_workers.py PYTHON_ROOT RUNS WORKERS KILLS N_JOBS COMPLETE
PYTHON_ROOT is the python/ folder whose memreplay package and worker.py run
(an old checkout's, to measure before a change). Environment:
STRESS_SLEEP (a batch-16 trial's seconds, 0.4), STRESS_BUDGET (bytes, 20
GiB), STRESS_GAP (1.0), STRESS_WAIT (seconds the workers get to finish
after the kills, 180), STRESS_WIDEN_POP=1 runs each worker through
slow_pop.py, which widens the race's window. STRESS_GPUS=N gives the
workers N budget files in turn (N GPUs of a host); with STRESS_STRAND=1
the victims are every worker of the last one, none replaced, so its
orphans must run on another GPU (KILLS is then ignored)."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

root, runs, nw, kills, n_jobs, complete = sys.argv[1], *map(int, sys.argv[2:7])
sys.path.insert(0, root)
import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

import memreplay  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)
here = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
wrap = [os.path.join(here, "slow_pop.py")] if os.environ.get("STRESS_WIDEN_POP") == "1" else []
budget = int(os.environ.get("STRESS_BUDGET", 20 << 30))
gap = float(os.environ.get("STRESS_GAP", "1.0"))
gpus = int(os.environ.get("STRESS_GPUS", "1"))
strand = os.environ.get("STRESS_STRAND") == "1"
tot = {"runs": 0, "double_pop_runs": 0, "double_pops": 0, "locked": 0, "other_fail_runs": 0, "lost_trial_runs": 0}


def call_site(err):
    """Where a worker met the locked database: the frames of its last
    traceback in worker.py, memreplay and Optuna (not SQLAlchemy's)."""
    last = err[err.rfind("Traceback (most recent call last)"):]
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\w+)', last)
    keep = [f"{os.path.basename(f)}:{n} {fn}" for f, n, fn in frames
            if "sqlalchemy" not in f and "contextlib" not in f and "runpy" not in f and "_convert_positional" not in f]
    return " > ".join(keep[-6:])


for r in range(runs):
    url = "sqlite:///" + os.path.join(tempfile.mkdtemp(), "study.db")
    optuna.create_study(study_name="gate", storage=url, direction="maximize")
    tmp = tempfile.mkdtemp()
    budget_files = [os.path.join(tmp, f"gpu{g}.budget") for g in range(gpus)]
    gpu_of = {}

    def start(g):
        argv = [sys.executable] + wrap + [os.path.join(root, "tests", "worker.py"), url, "gate", budget_files[g], str(budget),
                                          str(complete), os.environ.get("STRESS_SLEEP", "0.4"), str(n_jobs)]
        p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        gpu_of[p.pid] = g
        return p

    procs = [start(i % gpus) for i in range(nw)]
    # STRESS_STRAND=1: the victims are every worker of the last budget file
    # (the last GPU), none replaced: its orphans must run on another GPU.
    targets = [p for p in procs if gpu_of[p.pid] == gpus - 1] if strand else None
    want = len(targets) if strand else kills
    killed, last = [], 0.0
    gates = [memreplay.MemoryGate(budget, path=f) for f in budget_files]
    deadline = time.monotonic() + 120
    while len(killed) < want and time.monotonic() < deadline:
        pids = {h["pid"] for g in gates for h in g.holders()}
        victim = next((p for p in (targets or procs) if p.pid in pids and p.pid not in killed and p.poll() is None), None)
        if victim is not None and time.monotonic() - last > gap:
            victim.send_signal(signal.SIGKILL)
            killed.append(victim.pid)
            last = time.monotonic()
            if not strand:
                procs.append(start(gpu_of[victim.pid]))
        time.sleep(0.02)
    codes, double, locked, other, other_sites = [], 0, 0, [], []
    end = time.monotonic() + float(os.environ.get("STRESS_WAIT", "180"))
    for p in procs:
        try:
            _, err = p.communicate(timeout=max(1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            other.append("hung (killed by the stress): " + err[-300:])
        if p.pid in killed:
            continue
        codes.append(p.returncode)
        if p.returncode != 0:
            if "has already finished and can not be updated" in err:
                double += 1
            elif "database is locked" in err:
                locked += 1
                other_sites.append(call_site(err))
            else:
                other.append(err[-600:])
    trials = optuna.load_study(study_name="gate", storage=url).get_trials()
    bad = []
    for t in trials:
        if t.state == TrialState.FAIL and "memreplay_worker_died" in t.user_attrs:
            rs = [x for x in trials if x.user_attrs.get("memreplay_retry_of") == t.number]
            if len(rs) != 1 or rs[0].state not in (TrialState.COMPLETE, TrialState.FAIL):
                bad.append((t.number, [(x.number, x.state.name) for x in rs]))
    running = [t.number for t in trials if t.state == TrialState.RUNNING and "pid" in t.user_attrs]
    waiting = [t.number for t in trials if t.state == TrialState.WAITING]
    fails = sum(t.state == TrialState.FAIL for t in trials)
    tot["runs"] += 1
    tot["double_pops"] += double
    tot["double_pop_runs"] += double > 0
    tot["locked"] += locked
    tot["other_fail_runs"] += bool(other)
    tot["lost_trial_runs"] += bool(bad or running or waiting)
    print(f"run {r}: killed {len(killed)} codes {codes} double_pop {double} locked {locked} fails {fails} trials {len(trials)} "
          f"bad {bad} running {running} waiting {waiting} load {open('/proc/loadavg').read().split()[0]}", flush=True)
    for o in other:
        print("  OTHER:", o.replace("\n", " | ")[-600:], flush=True)
    for site in other_sites:
        print("  LOCKED at:", site, flush=True)
print("TOTAL", tot, flush=True)
