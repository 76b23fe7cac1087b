"""Stress only (stress_workers.py, STRESS_WIDEN_POP=1): widens Optuna 3.1's
race on enqueued trials (optuna/optuna#4621) by sleeping 0.2 s after the
SELECT ... FOR UPDATE that finds a WAITING trial in
set_trial_state_values, before its UPDATE: on SQLite, which takes no row
lock there, another worker popping meanwhile pops the same trial. Then
runs the worker given as the first argument with the rest."""

import runpy
import sys
import time

from optuna.storages._rdb import models
from optuna.trial import TrialState

_find = models.TrialModel.find_or_raise_by_id.__func__


def _slow(cls, trial_id, session, for_update=False):
    t = _find(cls, trial_id, session, for_update)
    if for_update and t.state == TrialState.WAITING:
        time.sleep(0.2)
    return t


models.TrialModel.find_or_raise_by_id = classmethod(_slow)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
