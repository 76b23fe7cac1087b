"""A worker whose first trial corrupts its CUDA context on the fake driver
(a device-side assert, sticky): with restart_on_sticky the callback
replaces the process (os.execv, same pid) and the fresh one, with a fresh
context, finishes the study. The other thread's trial, in the gate when
the process is replaced, dies with the old image; the fresh
image's next trial fails it and runs its parameters again (the gate's
ledger, memreplay_retry_of). Usage: restart_worker.py STORAGE_URL MARKER
BUDGET_FILE"""

import ctypes
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import optuna  # noqa: E402
from optuna.study import MaxTrialsCallback  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

import fakegpu  # noqa: E402
import memreplay  # noqa: E402

url, marker, budget_file = sys.argv[1:4]
print("start", os.getpid(), flush=True)
optuna.logging.set_verbosity(optuna.logging.ERROR)
study = optuna.create_study(study_name="restart", storage=url, load_if_exists=True)


first_image = not os.path.exists(marker)  # the image before the exec


def objective(trial):
    if not os.path.exists(marker):
        open(marker, "w").close()
        # The other thread's trial waits at the gate first (it needs the
        # whole budget, held here): it is in the ledger, with its x drawn,
        # when the process is replaced, so it dies with this image.
        deadline = time.monotonic() + 60
        while not gate_waiters() and time.monotonic() < deadline:
            time.sleep(0.01)
        fc = ctypes.CDLL(os.environ["MEMREPLAY_LIBCUDA"])
        fc.fakecuda_sticky.argtypes = [ctypes.c_char_p, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_longlong]
        fc.fakecuda_sticky(b"", 710, 0, 0)  # CUDA_ERROR_ASSERT from the next driver call on
    elif first_image:
        # The other thread's trial, admitted once the sticky trial gave the
        # gate back: it holds the gate here until the exec replaces the
        # process. Its CUDA call would meet the corrupt context and fail it
        # as sticky too, leaving nothing to recover (a race the exec won
        # every time it was run, but a race).
        threading.Event().wait()
    p = fakegpu.malloc(64 << 20)  # raises with the driver's message once the context is corrupt
    fakegpu.free(p, 64 << 20)
    return trial.suggest_float("x", 0, 1)


# Each trial needs the whole budget: the second thread waits at the gate
# while the first runs, then holds it when the first restarts the process;
# its entries, left by the image before the exec, must not block the fresh
# one.
gate = memreplay.MemoryGate(64 << 20, path=budget_file, poll=0.01)


def gate_waiters():
    with open(budget_file) as f:
        return json.load(f)["waiting"]


def owed():
    """The study's trials that a dead image left running and the ledger
    still holds: each trial that starts here takes one (fails it and runs
    its parameters). Optuna's queue holds none (memreplay enqueues
    nothing), so waiting for WAITING trials waited for nothing."""
    running = {t._trial_id for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    return running & gate.registered(study.study_name)


# need suggests x: the trial that dies waiting at the gate has drawn it,
# and its retry must run that x.
cb = memreplay.optuna.MemoryCallback(gate=gate, need=lambda t: (t.suggest_float("x", 0, 1), 64 << 20)[1], stats=fakegpu.stats,
                                     empty_cache=fakegpu.empty_cache, restart_on_sticky=True)
while True:
    study.optimize(cb.wrap(objective), n_jobs=2, callbacks=[cb, MaxTrialsCallback(4, states=(TrialState.COMPLETE,))])
    if not owed():
        break
print("done", os.getpid(), flush=True)
