"""One worker process of a study shared through an RDB storage, as a user
would run it on each GPU host: its own gate on the host's budget file and
the memreplay callback (which also fails and runs again the trials of a
worker that died). The trial sleeps for its modelled time with the memory
`memreplay estimate` predicts held at the gate (no GPU here), and records
when it ran.

Usage: worker.py STORAGE_URL STUDY BUDGET_FILE BUDGET COMPLETE_TRIALS SLEEP_S N_JOBS [die-before-tell]

die-before-tell: the process SIGKILLs itself in its first trial after the
objective (and memreplay's wrapper) returned, before Optuna records the
trial's end: a worker killed at that instant, deterministically."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import optuna  # noqa: E402
from optuna.study import MaxTrialsCallback  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

import memreplay  # noqa: E402

url, name, budget_file, budget, n, sleep_s, n_jobs = sys.argv[1:8]
optuna.logging.set_verbosity(optuna.logging.WARNING)
storage = url
if url.startswith("sqlite"):
    # SQLite's busy timeout from load_study on (the callback raises a
    # SQLite study's from its first trial on): docs/optuna.md.
    storage = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
study = optuna.load_study(study_name=name, storage=storage)

if sys.argv[8:] == ["die-before-tell"]:
    import signal

    from optuna.study import _optimize

    _optimize._tell_with_warning = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)


def spec_of(trial):
    trial.set_user_attr("pid", os.getpid())  # before the gate: a killed holder's trial names its worker
    return {"model": trial.suggest_categorical("model", ["bert-base", "bert-large"]),
            "batch": trial.suggest_categorical("batch", [8, 16, 32]),
            "seq_len": 128, "precision": "fp16"}


def objective(trial):
    spec = spec_of(trial)  # the same values the gate saw
    trial.set_user_attr("t_start", time.time())
    time.sleep(float(sleep_s) * spec["batch"] / 16)
    trial.set_user_attr("t_end", time.time())
    return spec["batch"] / (1 + (spec["model"] == "bert-large"))


cb = memreplay.optuna.MemoryCallback(gate=memreplay.MemoryGate(budget, path=budget_file, poll=0.02), spec=spec_of)


def pending():
    """Trials the study still owes: retries waiting to run, and trials of
    a worker that died, which the next trial to start recovers."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING))
            if t.state == TrialState.WAITING or "pid" in t.user_attrs and not memreplay.gate.process_alive(t.user_attrs["pid"])]


while True:
    study.optimize(cb.wrap(objective), n_jobs=int(n_jobs),
                   callbacks=[cb, MaxTrialsCallback(int(n), states=(TrialState.COMPLETE,))])
    if not pending():
        break
    time.sleep(0.5)
print("worker done", os.getpid(), flush=True)
