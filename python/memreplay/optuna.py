"""memreplay inside an Optuna study: two lines.

    cb = memreplay.optuna.MemoryCallback(gate=memreplay.MemoryGate("24GiB", path="/tmp/gpu0.budget"), spec=spec_of)
    study.optimize(cb.wrap(objective), n_jobs=4, callbacks=[cb])

cb.wrap(objective) runs each trial through the gate: spec_of(trial) gives
the trial's hyperparameters in memreplay's spelling, suggesting them on the
trial (Optuna returns the same value when the objective suggests the same
name again), `memreplay estimate` predicts what the trial takes from the
GPU, and the trial enters when that fits the budget. Inside, the trial's
memory figures go to trial.user_attrs; an out-of-memory error prunes the
trial with memreplay's diagnosis in its attrs (capacity, other processes or
fragmentation); a sticky CUDA error fails the trial (a NaN value: Optuna
records FAIL and the study goes on) and marks it so.

cb itself is the Optuna callback that runs after each trial: it takes the
trial out of the gate's ledger once Optuna has recorded its end (until
then a killed worker's trial is recovered from the ledger), and the field
reports' fixes, as options (gc.collect() and empty_cache between trials;
the worker process restarts after a sticky CUDA error, since its context is
dead; the study stops after max_failures failed trials in a row).

user_attrs written (bytes unless named otherwise):
  memreplay_need_bytes, memreplay_predicted_reserved_bytes, memreplay_predicted_live_bytes
  memreplay_wait_s                      time spent waiting at the gate
  memreplay_peak_allocated_bytes, memreplay_peak_reserved_bytes,
  memreplay_retries, memreplay_ooms      from the allocator's statistics
  memreplay_stats_source                 "torch", "libmemreplay" or the callable's name
  memreplay_peak_scope                   "trial" (peaks reset at its start) or "process"
  memreplay_oom, memreplay_diagnosis, memreplay_diagnosis_text   on an OOM
  memreplay_sticky_error                 on a sticky CUDA error
"""

import gc
import math
import os
import socket
import sys
import threading
import time

from .diagnose import diagnose, is_oom, is_sticky
from .estimate import estimate
from .gate import MemoryGate, TrialTooLarge
from .sizes import format_size

__all__ = ["MemoryCallback", "default_stats"]

_STAT_KEYS = {
    "memreplay_peak_allocated_bytes": "allocated_bytes.all.peak",
    "memreplay_peak_reserved_bytes": "reserved_bytes.all.peak",
}
_COUNTERS = {"memreplay_retries": "num_alloc_retries", "memreplay_ooms": "num_ooms"}


def default_stats():
    """(stats function, source name, peak reset function or None): libmemreplay
    when it is PyTorch's allocator in this process, else torch.cuda, else
    (None, None, None)."""
    mt = sys.modules.get("memreplay_torch")
    if mt is not None and getattr(mt, "_lib", None) is not None:
        return mt.stats, "libmemreplay", None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.memory_stats, "torch", torch.cuda.reset_peak_memory_stats
    return None, None, None


def _default_empty_cache():
    mt = sys.modules.get("memreplay_torch")
    if mt is not None and getattr(mt, "_lib", None) is not None:
        mt._lib.memreplay_empty_cache()
        return
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# A locked SQLite database: SQLite's SQLITE_BUSY, "database is locked",
# which Optuna's RDBStorage raises as StorageInternalError (the sqlite3
# error as its cause, or inside SQLAlchemy's PendingRollbackError). The
# transaction was rolled back, so the call may be made again: nothing of it
# was written.
_LOCKED = ("database is locked", "database table is locked")
_LOCKED_TRIES = 5


def _locked(e):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if any(m in str(e) for m in _LOCKED):
            return True
        e = e.__cause__ or e.__context__
    return False


def _set_attr(trial, key, value):
    _retry_locked(trial.set_user_attr, key, value)


def _retry_locked(fn, *args, **kwargs):
    """fn(*args, **kwargs), made again (at most _LOCKED_TRIES times in all,
    0.1 s to 0.8 s apart) while the database is locked. memreplay's own
    storage calls go through it, so a worker does not stop on a database
    that another worker held past the busy timeout; every call made so is
    a write of one value (an attr, a state) or a read, the same when made
    twice."""
    for i in range(_LOCKED_TRIES):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if i == _LOCKED_TRIES - 1 or not _locked(e):
                raise
            time.sleep(0.1 * 2 ** i)


def _sqlite_busy_timeout(storage, seconds):
    """Raises the busy timeout of a SQLite study's connections to seconds
    (from the next connection on: SQLAlchemy opens one per session for a
    SQLite file) unless the storage was given its own (connect_args'
    timeout). Python's sqlite3 waits 5 s for a lock by default, and a
    writer that waited longer raised "database is locked" out of
    optimize: under load, several workers writing one file, that stopped
    worker processes (docs/optuna.md)."""
    backend = getattr(storage, "_backend", storage)
    url, engine = str(getattr(backend, "url", "")), getattr(backend, "engine", None)
    if engine is None or not url.startswith("sqlite") or getattr(backend, "_memreplay_busy", False):
        return
    backend._memreplay_busy = True
    if "timeout" in ((getattr(backend, "engine_kwargs", None) or {}).get("connect_args") or {}):
        return  # the user's choice
    from sqlalchemy import event

    ms = int(seconds * 1000)

    def busy(dbapi_conn, _record):
        dbapi_conn.execute(f"PRAGMA busy_timeout = {ms}")

    event.listen(engine, "connect", busy)


class MemoryCallback:
    """The trial wrapper (wrap) and the Optuna callback (__call__).

    gate: a memreplay.MemoryGate, or None for figures and diagnoses only.
    spec: spec(trial) -> the trial's hyperparameters for `memreplay
        estimate` (a dict), suggesting them on the trial; or
    need: need(trial) -> the bytes the trial takes from the GPU (instead of
        spec: your own prediction).
    alloc_conf: the allocator settings the trials run with
        (PYTORCH_CUDA_ALLOC_CONF syntax), for the prediction.
    stats: a function returning torch.cuda.memory_stats()'s keys; default:
        libmemreplay's when it is the allocator, else torch.cuda's.
    reset_peak: called at a trial's start so peaks are the trial's (default
        torch.cuda.reset_peak_memory_stats with torch's stats).
    empty_cache: True (gc.collect(), then the allocator's empty_cache, after
        every trial), False, or a function doing your own cleanup.
    restart_on_sticky: after a sticky CUDA error, replace the worker process
        with a fresh one (os.execv of the same command line): it rejoins the
        study through its storage, so use an RDB storage. With n_jobs > 1
        the other threads' trials die with the process; with a budget
        file, the restarted process's gate reclaims their bytes and its
        next trials fail them and run them again (docs/optuna.md).
    max_failures: stop the study (study.stop()) after this many failed
        trials in a row in this process; 0 never stops.
    sqlite_timeout: seconds a SQLite study's connections wait for a lock
        held by another worker (Python's sqlite3 waits 5 s) from the first
        trial on, unless the storage was made with its own timeout; None
        leaves the storage as it is.
    """

    def __init__(self, gate=None, spec=None, need=None, alloc_conf=None, stats="auto", reset_peak="auto",
                 empty_cache=True, restart_on_sticky=False, max_failures=3, binary=None, timeout=None,
                 sqlite_timeout=60.0):
        if spec is not None and need is not None:
            raise ValueError("give spec or need, not both")
        if gate is not None and spec is None and need is None:
            raise ValueError("a gate needs each trial's size: give spec= (memreplay estimates it) or need=")
        self.gate, self.spec, self.need = gate, spec, need
        self.alloc_conf, self.binary, self.timeout = alloc_conf, binary, timeout
        self._stats, self._reset = stats, reset_peak
        self.empty_cache = empty_cache
        self.restart_on_sticky = restart_on_sticky
        self.max_failures = max_failures
        self.sqlite_timeout = sqlite_timeout
        self._lock = threading.Lock()
        self._restarting = threading.Event()
        self._active = 0  # trials running in this process now
        self._starts = 0  # trials started in this process so far
        # trial id -> (ledger key, thread): trials whose objective returned
        # and whose end Optuna records after the wrapper (see wrap).
        self._untold = {}
        self._noted = set()  # (study, attr) of _note_ledger, written once
        self.failures_in_a_row = 0

    # --- inside the trial -------------------------------------------------

    def _stats_source(self):
        if self._stats == "auto":
            fn, name, reset = default_stats()
            return fn, name, reset if self._reset == "auto" else self._reset
        if self._stats is None:
            return None, None, None
        name = getattr(self._stats, "__name__", "custom")
        return self._stats, name, None if self._reset == "auto" else self._reset

    def _predict(self, trial):
        if self.need is not None:
            return {"need_bytes": int(self.need(trial))}
        spec = self.spec(trial)
        p = estimate(spec, alloc_conf=self.alloc_conf, binary=self.binary)
        _set_attr(trial, "memreplay_predicted_reserved_bytes", p["peak_reserved_bytes"])
        _set_attr(trial, "memreplay_predicted_live_bytes", p["peak_live_bytes"])
        return p

    def wrap(self, objective):
        """The objective, run through the gate with its memory recorded."""

        def wrapped(trial):
            if self.sqlite_timeout is not None:
                _sqlite_busy_timeout(trial.study._storage, self.sqlite_timeout)
            reg = None
            if self.gate is not None and self.gate.path is not None:
                # Registered first: until then a killed worker leaves the
                # trial RUNNING with nothing to recover it by.
                reg = self.gate.register_trial({"study": trial.study.study_name, "trial_id": trial._trial_id,
                                                "number": trial.number})
                if self._restarting.is_set():
                    # The process is about to be replaced: the trial is in
                    # the ledger, so the fresh image fails it and runs it
                    # again (and takes no orphan it could not finish).
                    threading.Event().wait()
            try:
                if reg is not None:
                    self._note_ledger(trial)
                    self._forget_told(threading.get_ident())
                    self._recover(trial)
                return self._admit_and_run(objective, trial)
            finally:
                if reg is not None:
                    # The trial stays in the ledger until Optuna has
                    # recorded its end (the callback, __call__, takes it
                    # out): Optuna writes COMPLETE, PRUNED or FAIL after
                    # this wrapper returns, and a worker killed in between
                    # left the trial RUNNING with nothing to recover it by.
                    with self._lock:
                        self._untold[trial._trial_id] = (reg, threading.get_ident())

        wrapped.__name__ = getattr(objective, "__name__", "objective")
        wrapped.__doc__ = objective.__doc__
        return wrapped

    def _admit_and_run(self, objective, trial):
        import optuna

        ticket = None
        if self.spec is not None or self.need is not None:
            p = self._predict(trial)
            _set_attr(trial, "memreplay_need_bytes", p["need_bytes"])
            if self.gate is not None:
                try:
                    ticket = self.gate.acquire(p["need_bytes"], label=f"trial {trial.number}", timeout=self.timeout)
                except TrialTooLarge as e:
                    _set_attr(trial, "memreplay_diagnosis", "capacity")
                    _set_attr(trial, "memreplay_diagnosis_text", str(e))
                    raise optuna.TrialPruned(str(e)) from None
                _set_attr(trial, "memreplay_wait_s", round(ticket.waited, 3))
        try:
            return self._run(objective, trial)
        finally:
            if ticket is not None:
                ticket.release()

    def _forget_told(self, thread):
        """Takes out of the ledger the trials this thread ran before, if
        the callback has not (cb not among optimize's callbacks, or an
        error raised out of optimize): a thread of Optuna's loop starts
        its next trial only after Optuna recorded the last one."""
        with self._lock:
            done = [tid for tid, (_, th) in self._untold.items() if th == thread]
            keys = [self._untold.pop(tid)[0] for tid in done]
        for k in keys:
            self.gate.unregister_trial(k)

    def _settle(self, study, limit=2.0):
        """Before the exec: waits, at most limit seconds, until every trial
        of the study that is RUNNING is in the gate's ledger. Optuna hands
        another thread of this process its trial (RUNNING in the storage)
        a moment before the wrapped objective registers it; replaced in
        that moment, the trial stayed RUNNING for good, with no entry for
        the fresh image to recover (seen once in ten runs of the restart
        test). Once _restarting is set, a thread that registers a trial
        waits there for the exec instead of starting it."""
        if self.gate is None or self.gate.path is None:
            return
        from optuna.trial import TrialState

        deadline = time.monotonic() + limit
        while True:
            running = {t._trial_id for t in _retry_locked(study.get_trials, deepcopy=False, states=(TrialState.RUNNING,))}
            if running <= self.gate.registered(study.study_name) or time.monotonic() > deadline:
                return
            time.sleep(0.01)

    def _recover(self, trial):
        """Makes this trial, fresh from Optuna and with nothing suggested
        yet, the retry of one trial a dead worker of the study left
        running: that trial is failed (memreplay_worker_died names the
        pid) and this one runs with the parameters it had drawn
        (memreplay_retry_of names it). A killed worker loses no trial.

        Optuna's own heartbeat does this too, but Optuna 3.1's fails live
        trials as well (optuna/optuna#4234), so the gate's ledger, which
        knows which process ran which trial, is the record used here.

        The retry is not enqueued (study.enqueue_trial): every worker's
        study.ask() pops WAITING trials, and on SQLite two workers can pop
        the same one (SELECT ... FOR UPDATE takes no lock there;
        optuna/optuna#4621); the second then stops with "has already
        finished" and Optuna's "Should not reach". The orphan is claimed
        under the ledger's flock instead, so exactly one trial takes it,
        and its parameters become this trial's fixed_params, the system
        attr through which Optuna gives an enqueued trial its values (each
        suggest of a name in it returns the fixed value). The other
        orphans stay in the ledger, RUNNING in the storage, for the next
        trials to start; one whose recovery raised (a lost database
        connection) stays too. Orphans of this gate's budget file come
        first; then those of the study's other budget files on this host
        whose GPU has no live process running a trial of the study
        (_ledgers), so that a GPU whose workers all died loses none."""
        from optuna.trial import TrialState

        storage = trial.study._storage
        for gate, foreign in self._ledgers(trial):
            while True:
                try:
                    o = gate.claim_orphan(trial.study.study_name, only_if_idle=foreign)
                except (OSError, ValueError) as e:
                    if not foreign:
                        raise
                    print(f"memreplay: {e}; its orphans are not run here", file=sys.stderr)
                    break
                if o is None:
                    break
                done = False
                try:
                    ft = _retry_locked(storage.get_trial, o["trial_id"])
                    if ft.state != TrialState.RUNNING:
                        done = True  # finished meanwhile: nothing was lost
                        continue
                    own = _retry_locked(storage.get_trial_system_attrs, trial._trial_id)
                    if own.get("fixed_params"):
                        return  # an enqueued trial runs its own parameters; the next trial takes the orphan
                    done = self._become_retry(storage, trial, ft, own, o, gate.path if foreign else None)
                    if done:
                        return
                    done = True  # the dead trial finished meanwhile; this trial is free for the next orphan
                finally:
                    gate.settle_orphan(o, done)

    _LEDGER_ATTR = "memreplay_budget_file:"

    def _note_ledger(self, trial):
        """Records this process's budget file in the study (a study system
        attr per host and file, written once per process), so that a worker
        on another budget file of this host finds its orphans (_ledgers)."""
        study = trial.study
        key = f"{self._LEDGER_ATTR}{socket.gethostname()}:{self.gate.path}"
        with self._lock:
            if (study.study_name, key) in self._noted:
                return
        _retry_locked(study._storage.set_study_system_attr, study._study_id, key, True)
        with self._lock:
            self._noted.add((study.study_name, key))

    def _ledgers(self, trial):
        """The ledgers this trial may take an orphan from: this gate's
        (foreign False), then the study's other budget files on this host
        (foreign True), whose orphans are taken only while no live process
        runs a trial of the study there (MemoryGate.claim_orphan's
        only_if_idle): a retry stays on its GPU while a worker of that GPU
        can run it, and is not lost when every one of them is gone."""
        yield self.gate, False
        study = trial.study
        prefix = f"{self._LEDGER_ATTR}{socket.gethostname()}:"
        attrs = _retry_locked(study._storage.get_study_system_attrs, study._study_id)
        for key in sorted(attrs):
            path = key[len(prefix):] if key.startswith(prefix) else None
            if path and path != self.gate.path and os.path.exists(path):
                yield MemoryGate(self.gate.budget, path=path, poll=self.gate.poll), True  # for its ledger only

    def _become_retry(self, storage, trial, ft, own, o, foreign=None):
        """This trial takes over ft (RUNNING, its worker dead); False when
        ft turned out finished, and this trial is as it was. This trial is
        marked first and ft failed after: a worker killed in between
        leaves ft RUNNING and orphaned (a later trial retries it) and this
        trial orphaned too, retried in its turn with the same parameters;
        the other order could leave ft failed with no retry."""
        from optuna.trial import TrialState

        params = dict(ft.system_attrs.get("fixed_params") or {})  # a retry that died before suggesting
        params.update(ft.params)
        _set_attr(trial, "memreplay_retry_of", ft.number)
        _retry_locked(storage.set_trial_system_attr, trial._trial_id, "fixed_params", params)
        if "grid_id" in own and "grid_id" in ft.system_attrs:
            # GridSampler gave this trial a grid point of its own; it runs
            # ft's point instead, so it is marked as visiting ft's, and its
            # own stays unvisited for a later trial.
            _retry_locked(storage.set_trial_system_attr, trial._trial_id, "grid_id", ft.system_attrs["grid_id"])
        try:
            _retry_locked(storage.set_trial_user_attr, ft._trial_id, "memreplay_worker_died", f"pid {o['pid']} on {o['host']}")
            failed = _retry_locked(storage.set_trial_state_values, ft._trial_id, TrialState.FAIL)
        except RuntimeError:  # "has already finished": Optuna recorded it after all
            failed = False
        if not failed:
            _set_attr(trial, "memreplay_retry_of", None)
            _retry_locked(storage.set_trial_system_attr, trial._trial_id, "fixed_params", {})
            if "grid_id" in own:
                _retry_locked(storage.set_trial_system_attr, trial._trial_id, "grid_id", own["grid_id"])
            return False
        where = f" (budget file {foreign}, where no worker runs trials now)" if foreign else ""
        print(f"memreplay: trial {ft.number}'s worker (pid {o['pid']}){where} died; trial failed and run again as trial {trial.number}",
              file=sys.stderr)
        return True

    def _run(self, objective, trial):
        fn, name, reset = self._stats_source()
        # Threads of one process share one allocator: a peak is the trial's
        # only when no other trial ran beside it, and a reset of the peaks
        # must not cut into another trial's.
        with self._lock:
            alone = self._active == 0
            self._active += 1
            self._starts += 1
            started = self._starts
        before = {}
        try:
            if fn is not None:
                if reset is not None and alone:
                    reset()
                before = fn()
            return self._objective(objective, trial, fn, name, reset if alone else None, before, started)
        finally:
            with self._lock:
                self._active -= 1

    def _objective(self, objective, trial, fn, name, reset, before, started):
        import optuna

        def record():
            with self._lock:
                scope_trial = reset is not None and self._starts == started and self._active == 1
            return self._record(trial, fn, name, scope_trial, before)

        try:
            value = objective(trial)
        except optuna.TrialPruned:
            record()
            raise
        except Exception as e:
            stats = record()
            if is_oom(e):
                d = diagnose(str(e), stats)
                _set_attr(trial, "memreplay_oom", True)
                _set_attr(trial, "memreplay_diagnosis", d["kind"])
                _set_attr(trial, "memreplay_diagnosis_text", d["text"])
                raise optuna.TrialPruned(f"out of memory ({d['kind']}): {d['text']}") from None
            if is_sticky(e):
                _set_attr(trial, "memreplay_sticky_error", str(e)[:500])
                # FAIL without raising: Optuna records a NaN value as a failed
                # trial and calls the callbacks, which act on it.
                n = len(trial.study.directions)
                return float("nan") if n == 1 else [float("nan")] * n
            raise
        record()
        return value

    def _record(self, trial, fn, name, scope_trial, before):
        if fn is None:
            return {}
        try:
            s = fn()
        except Exception as e:  # a dead context: the figures are lost, not the trial
            _set_attr(trial, "memreplay_stats_error", str(e)[:200])
            return {}
        for attr, key in _STAT_KEYS.items():
            if key in s:
                _set_attr(trial, attr, int(s[key]))
        for attr, key in _COUNTERS.items():
            if key in s:
                _set_attr(trial, attr, int(s[key]) - int(before.get(key, 0)))
        _set_attr(trial, "memreplay_stats_source", name)
        _set_attr(trial, "memreplay_peak_scope", "trial" if scope_trial else "process")
        return s

    # --- between trials: the Optuna callback ------------------------------

    def __call__(self, study, frozen):
        from optuna.trial import TrialState

        with self._lock:
            told = self._untold.pop(frozen._trial_id, None)
        if told is not None:  # Optuna has recorded the trial's end: nothing left to recover
            self.gate.unregister_trial(told[0])
        if self.empty_cache:
            gc.collect()
            (self.empty_cache if callable(self.empty_cache) else _default_empty_cache)()
        with self._lock:
            if frozen.state == TrialState.FAIL:
                self.failures_in_a_row += 1
            elif frozen.state in (TrialState.COMPLETE, TrialState.PRUNED):
                self.failures_in_a_row = 0
            stop = self.max_failures and self.failures_in_a_row >= self.max_failures
        sticky = frozen.user_attrs.get("memreplay_sticky_error") is not None
        if stop:
            print(f"memreplay: {self.failures_in_a_row} failed trials in a row; stopping the study", file=sys.stderr)
            study.stop()
            return
        if sticky and self.restart_on_sticky:
            print(f"memreplay: trial {frozen.number} hit a sticky CUDA error; restarting this worker process", file=sys.stderr)
            self._restarting.set()
            self._settle(study)
            sys.stdout.flush()
            sys.stderr.flush()
            os.execv(sys.executable, [sys.executable] + sys.argv)
