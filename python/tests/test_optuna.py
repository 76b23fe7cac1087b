"""memreplay inside real Optuna studies: threads on the fake GPU through
libmemreplay (over-commitment would be a real OOM there), worker processes
on SQLite with one killed mid-trial, and the diagnoses."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

try:
    import optuna
    from optuna.trial import TrialState
except ImportError:  # the suite says so, per test
    optuna = None

import fakegpu  # noqa: E402
import memreplay  # noqa: E402

MiB = 1 << 20


def need_optuna(t):
    if optuna is None:
        t.skipTest("optuna is not installed for this interpreter (Debian: apt-get install python3-optuna; use /usr/bin/python3)")


def need_cli(t):
    try:
        memreplay.binary_path()
    except FileNotFoundError as e:
        t.skipTest(str(e))


def study_with_a_dead_worker(t, budget_file, budget):
    """A SQLite study "told" whose one worker (of budget_file) was killed
    after its objective returned, before Optuna's tell: its trial stays
    RUNNING. Returns the study and that trial."""
    tmp = os.path.dirname(budget_file)
    url = "sqlite:///" + os.path.join(tmp, "study.db")
    study = optuna.create_study(study_name="told", storage=url, direction="maximize")
    p = subprocess.run([sys.executable, os.path.join(HERE, "worker.py"), url, "told", budget_file, str(budget), "1", "0.05", "1",
                        "die-before-tell"], capture_output=True, text=True, timeout=120)
    t.assertEqual(p.returncode, -signal.SIGKILL, p.stderr[-3000:])
    [dead] = study.get_trials()
    t.assertEqual(dead.state, TrialState.RUNNING)
    return study, dead


def assert_ledger_empty(t, path):
    """The gate's ledger at path holds no holder, waiter, trial or orphan."""
    with open(path) as f:
        led = json.load(f)
    t.assertEqual((led["holders"], led["waiting"], led["trials"], led["orphans"]), ({}, [], {}, []), path)


class FakeGPUThreads(unittest.TestCase):
    """n_jobs=4 threads of one process allocate through libmemreplay on a
    fake device of 512 MiB: what the gate admits must really fit."""

    def setUp(self):
        need_optuna(self)
        if not fakegpu.available():
            self.skipTest("libmemreplay and the fake driver are built by `go test ./cmd/libmemreplay -run TestPythonPackage`")
        if int(os.environ.get("FAKECUDA_CAPACITY", "0")) != 512 * MiB:
            self.skipTest("the fake device must have 512 MiB (FAKECUDA_CAPACITY)")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        fakegpu.lib()
        fakegpu.empty_cache()

    low = 4
    out_of_memory = None  # without the gate: set by the first OOM

    def objective(self, trial):
        batch = trial.suggest_int("batch", self.low, 4)
        try:
            ptrs = [fakegpu.malloc(64 * MiB) for _ in range(batch)]
        except RuntimeError:
            if self.out_of_memory is not None:
                self.out_of_memory.set()
            raise
        if self.out_of_memory is not None:
            # Held until a third trial runs out beside the two that fit: a
            # fixed 0.15 s let them miss each other at load 11 (the threads'
            # asks took longer than the trials), and the test saw no OOM.
            self.out_of_memory.wait(30)
        else:
            time.sleep(0.15)
        for p in ptrs:
            fakegpu.free(p, 64 * MiB)
        return batch

    def study(self, cb, low, trials=12):
        # Batches of low..4 tensors of 64 MiB: 4 x 256 MiB at once cannot fit.
        # (Not enqueue_trial: Optuna 3.1's SQLite storage hands one waiting
        # trial to two threads.)
        self.low = low
        storage = "sqlite:///" + os.path.join(tempfile.mkdtemp(), "study.db")
        study = optuna.create_study(storage=storage, direction="maximize")
        study.optimize(cb.wrap(self.objective), n_trials=trials, n_jobs=4, callbacks=[cb])
        return study.get_trials()

    def test_without_gate_over_commits_and_is_diagnosed(self):
        import threading

        self.out_of_memory = threading.Event()
        cb = memreplay.optuna.MemoryCallback(stats=fakegpu.stats, empty_cache=fakegpu.empty_cache)
        trials = self.study(cb, low=4)
        oom = [t for t in trials if t.user_attrs.get("memreplay_oom")]
        self.assertTrue(oom, "four threads of 256 MiB on 512 MiB must run out")
        for t in oom:
            self.assertEqual(t.state, TrialState.PRUNED)
            self.assertEqual(t.user_attrs["memreplay_diagnosis"], "capacity", t.user_attrs)
            self.assertIn("asked 64.00 MiB more", t.user_attrs["memreplay_diagnosis_text"])

    def test_gate_admits_what_fits(self):
        gate = memreplay.MemoryGate(512 * MiB, poll=0.005)
        cb = memreplay.optuna.MemoryCallback(gate=gate, need=lambda t: t.suggest_int("batch", 2, 4) * 64 * MiB,
                                             stats=fakegpu.stats, empty_cache=fakegpu.empty_cache)
        trials = self.study(cb, low=2)
        self.assertEqual([t.state for t in trials], [TrialState.COMPLETE] * len(trials))
        for t in trials:
            a = t.user_attrs
            self.assertNotIn("memreplay_oom", a)
            self.assertEqual(a["memreplay_need_bytes"], t.params["batch"] * 64 * MiB)
            self.assertGreaterEqual(a["memreplay_peak_allocated_bytes"], t.params["batch"] * 64 * MiB)  # the process's peak
            self.assertLessEqual(a["memreplay_peak_reserved_bytes"], 512 * MiB)
            self.assertEqual(a["memreplay_ooms"], 0)
            self.assertEqual(a["memreplay_stats_source"], "stats")
            self.assertEqual(a["memreplay_peak_scope"], "process")
        self.assertTrue(any(t.user_attrs["memreplay_wait_s"] > 0.05 for t in trials), "some trials waited")
        self.assertEqual(gate.held(), (0, 0))

    def test_sticky_error_fails_and_stops_after_three(self):
        def objective(trial):
            raise RuntimeError("CUDA error: an illegal memory access was encountered (cudaErrorIllegalAddress)")

        cb = memreplay.optuna.MemoryCallback(stats=fakegpu.stats, empty_cache=fakegpu.empty_cache)
        study = optuna.create_study()
        study.optimize(cb.wrap(objective), n_trials=10, callbacks=[cb])
        trials = study.get_trials()
        self.assertEqual(len(trials), 3, "the study stops after three failures in a row")
        for t in trials:
            self.assertEqual(t.state, TrialState.FAIL)
            self.assertIn("illegal memory access", t.user_attrs["memreplay_sticky_error"])


class StickyRestart(unittest.TestCase):
    def test_worker_restarts_with_a_fresh_context(self):
        need_optuna(self)
        if not fakegpu.available():
            self.skipTest("libmemreplay and the fake driver are built by `go test ./cmd/libmemreplay -run TestPythonPackage`")
        tmp = tempfile.mkdtemp()
        url = "sqlite:///" + os.path.join(tmp, "study.db")
        budget_file = os.path.join(tmp, "gpu0.budget")
        p = subprocess.run([sys.executable, os.path.join(HERE, "restart_worker.py"), url, os.path.join(tmp, "marker"), budget_file],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        lines = p.stdout.split()
        pid = lines[1]
        # One process image before the restart, one after: the same pid
        # (execv), and the second finished the study.
        self.assertEqual(lines, ["start", pid, "start", pid, "done", pid], p.stdout)
        self.assertIn("restarting this worker process", p.stderr)
        trials = optuna.load_study(study_name="restart", storage=url).get_trials()
        states = [t.state for t in trials]
        self.assertNotIn(TrialState.RUNNING, states)
        self.assertGreaterEqual(states.count(TrialState.COMPLETE), 4)
        sticky = [t for t in trials if "memreplay_sticky_error" in t.user_attrs]
        self.assertEqual(len(sticky), 1)
        self.assertEqual(sticky[0].state, TrialState.FAIL)
        self.assertIn("device-side assert", sticky[0].user_attrs["memreplay_sticky_error"])
        # The other thread's trial, in the gate, died with the old image:
        # failed, and run again once, with the x it had drawn, by a trial
        # of the fresh image; never left running.
        died = [t for t in trials if t.state == TrialState.FAIL and t is not sticky[0]]
        self.assertEqual(len(died), 1, [(t.number, t.user_attrs) for t in died])
        self.assertEqual(died[0].user_attrs["memreplay_worker_died"], f"pid {pid} on {socket.gethostname()}")
        retry = [r for r in trials if r.user_attrs.get("memreplay_retry_of") == died[0].number]
        self.assertEqual([(r.state, r.params) for r in retry], [(TrialState.COMPLETE, died[0].params)])
        self.assertIn("x", died[0].params)
        assert_ledger_empty(self, budget_file)


class TorchAllocator(unittest.TestCase):
    def test_callback_finds_libmemreplay(self):
        need_optuna(self)
        if not fakegpu.available():
            self.skipTest("libmemreplay and the fake driver are built by `go test ./cmd/libmemreplay -run TestPythonPackage`")
        repo = os.path.dirname(os.path.dirname(HERE))
        p = subprocess.run([sys.executable, os.path.join(HERE, "torch_allocator_study.py"), repo],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        rows = [json.loads(l) for l in p.stdout.splitlines()]
        trials, end = rows[:-1], rows[-1]
        self.assertEqual([t["state"] for t in trials], ["COMPLETE", "COMPLETE", "PRUNED"])
        for t in trials:
            self.assertEqual(t["memreplay_stats_source"], "libmemreplay")
            self.assertEqual(t["memreplay_peak_scope"], "process")
            self.assertGreaterEqual(t["memreplay_peak_allocated_bytes"], t["tensors"] * (32 << 20))
        self.assertEqual(trials[2]["memreplay_ooms"], 1)
        self.assertEqual(trials[0]["memreplay_ooms"], 0)
        self.assertEqual(trials[2]["memreplay_diagnosis"], "capacity")
        self.assertTrue(trials[2]["memreplay_oom"])
        # The callback emptied libmemreplay's cache after the last trial.
        self.assertEqual(end, {"reserved_after": 0})


class PeakScope(unittest.TestCase):
    """Threads share one allocator: a trial's peaks are its own only when it
    ran alone, and a reset of the peaks must not cut into another trial's."""

    def run_study(self, n_jobs):
        import threading

        lock = threading.Lock()
        state = {"peak": 0, "resets": 0}

        def stats():
            with lock:
                return {"allocated_bytes.all.peak": state["peak"], "num_ooms": 0}

        def reset():
            with lock:
                state["resets"] += 1
                state["peak"] = 0

        def objective(trial):
            with lock:
                state["peak"] += 1
            time.sleep(0.05)
            return 0.0

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study()
        cb = memreplay.optuna.MemoryCallback(stats=stats, reset_peak=reset, empty_cache=False)
        study.optimize(cb.wrap(objective), n_trials=8, n_jobs=n_jobs, callbacks=[cb])
        return study.get_trials(), state["resets"]

    def test_alone_and_side_by_side(self):
        need_optuna(self)
        trials, resets = self.run_study(1)
        self.assertEqual(resets, 8)
        for t in trials:
            self.assertEqual(t.user_attrs["memreplay_peak_scope"], "trial")
            self.assertEqual(t.user_attrs["memreplay_peak_allocated_bytes"], 1)
        trials, resets = self.run_study(4)
        scopes = [t.user_attrs["memreplay_peak_scope"] for t in trials]
        self.assertIn("process", scopes)
        self.assertLess(resets, 8, "no reset while another trial runs")
        for t in trials:
            if t.user_attrs["memreplay_peak_scope"] == "trial":
                self.assertEqual(t.user_attrs["memreplay_peak_allocated_bytes"], 1)


class Diagnoses(unittest.TestCase):
    def msg(self, tried, total, free, allocated, unalloc):
        return (f"CUDA out of memory. Tried to allocate {tried}. GPU 0 has a total capacity of {total} of which {free} is free. "
                f"Of the allocated memory {allocated} is allocated by PyTorch, and {unalloc} is reserved by PyTorch but unallocated.")

    def test_three_causes(self):
        frag = memreplay.diagnose(self.msg("1.00 GiB", "23.65 GiB", "300.00 MiB", "20.00 GiB", "1.41 GiB"))
        self.assertEqual(frag["kind"], "fragmentation")
        self.assertEqual(frag["text"], "1.41 GiB reserved but unallocated, more than the 1.00 GiB asked; "
                                       "expandable_segments:True or --policy stitch would have fit it")
        others = memreplay.diagnose(self.msg("2.00 GiB", "23.65 GiB", "1.00 GiB", "8.00 GiB", "200.00 MiB"))
        self.assertEqual(others["kind"], "other processes")
        self.assertIn("other processes hold 14.45 GiB", others["text"])
        cap = memreplay.diagnose(self.msg("6.00 GiB", "23.65 GiB", "1.00 GiB", "22.00 GiB", "100.00 MiB"))
        self.assertEqual(cap["kind"], "capacity")
        self.assertEqual(memreplay.diagnose("CUDA out of memory")["kind"], "unknown")
        self.assertTrue(memreplay.is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2 MiB")))
        self.assertFalse(memreplay.is_oom(ValueError("bad batch")))

    def test_limited_by_a_memory_fraction(self):
        # Word for word from a BERT-base trial (batch 128 x 512, fp16) on an H200 limited to 24 GiB by
        # set_per_process_memory_fraction (traces/recorded): the device had 115 GiB free, so the
        # limit, not other processes, is what the trial ran into.
        msg = ("CUDA out of memory. Tried to allocate 192.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which "
               "115.19 GiB is free. Including non-PyTorch memory, this process has 24.60 GiB memory in use. 24.00 GiB "
               "allowed; Of the allocated memory 23.91 GiB is allocated by PyTorch, and 15.67 MiB is reserved by "
               "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
        d = memreplay.diagnose(msg)
        self.assertEqual(d["kind"], "capacity")
        self.assertEqual(d["allowed"], 24 << 30)
        self.assertTrue(d["text"].startswith("this trial holds 23.93 GiB and asked 192.00 MiB more: over the 24.00 GiB"), d["text"])

    def test_estimate(self):
        need_cli(self)
        p = memreplay.estimate({"model": "bert-large", "batch": 16, "seq_len": 128, "precision": "fp16"})
        self.assertGreater(p["peak_reserved_bytes"], p["peak_live_bytes"])
        self.assertEqual(p["need_bytes"], p["peak_reserved_bytes"] + p["context_bytes"])
        with self.assertRaisesRegex(memreplay.EstimateError, 'unknown field "seqlen"'):
            memreplay.estimate({"model": "bert-large", "seqlen": 128})


def run_workers(tc, url, n_workers, budget, complete, kill_one, n_jobs):
    """Runs the study NAME on url with n_workers worker.py processes on one
    budget file; with kill_one, SIGKILLs a worker while it holds a trial and
    starts a replacement, as a supervisor would. Returns the trials and the
    killed worker's pid."""
    name = "gate"
    optuna.create_study(study_name=name, storage=url, direction="maximize")
    budget_file = os.path.join(tempfile.mkdtemp(), "gpu0.budget")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    argv = [sys.executable, os.path.join(HERE, "worker.py"), url, name, budget_file, str(budget), str(complete), "0.4", str(n_jobs)]
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n_workers)]
    killed = None
    try:
        if kill_one:
            gate = memreplay.MemoryGate(budget, path=budget_file)
            deadline = time.monotonic() + 60
            while killed is None and time.monotonic() < deadline:
                pids = {h["pid"] for h in gate.holders()}
                victim = next((p for p in procs if p.pid in pids), None)
                if victim is not None:
                    victim.send_signal(signal.SIGKILL)
                    killed = victim.pid
                    procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                time.sleep(0.02)
            tc.assertIsNotNone(killed, "no worker ever held the gate")
        for p in procs:
            out, err = p.communicate(timeout=240)
            if p.pid != killed:
                tc.assertEqual(p.returncode, 0, err[-3000:])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    trials = optuna.load_study(study_name=name, storage=url).get_trials()
    with open(budget_file) as f:
        led = json.load(f)
    # The dead worker's share came back: nothing is held, nobody waits.
    live = {k: h for k, h in led["holders"].items() if memreplay.gate.process_alive(h["pid"], h["start"])}
    tc.assertEqual(live, {})
    return trials, killed


def check_study(tc, trials, budget, complete, killed, n_jobs=1):
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    tc.assertGreaterEqual(len(done), complete)
    # Never over-committed: at every trial start, the trials running then
    # held no more than the budget.
    spans = [(t.user_attrs["t_start"], t.user_attrs["t_end"], t.user_attrs["memreplay_need_bytes"]) for t in done]
    for s, _, _ in spans:
        tc.assertLessEqual(sum(n for a, b, n in spans if a <= s < b), budget)
    tc.assertGreater(max(sum(1 for a, b, _ in spans if a <= s < b) for s, _, _ in spans), 1, "trials ran side by side")
    pids = {t.user_attrs["pid"] for t in done}
    tc.assertGreater(len(pids), 1, "several workers ran trials")
    for t in done:
        tc.assertGreater(t.user_attrs["memreplay_predicted_reserved_bytes"], 1 << 30)
    if killed is not None:
        # The killed worker's trials: each failed by a trial that started
        # after, which ran its parameters instead, completed once. Left
        # RUNNING, at most one per thread of the killed worker: a trial its
        # Optuna had created and the wrapper not yet registered, the window
        # docs/optuna.md names (the kill lands anywhere; worker.py's spec_of
        # sets "pid" after the wrapper registered the trial). Nothing that
        # the wrapper registered.
        running = [t for t in trials if t.state == TrialState.RUNNING]
        tc.assertLessEqual(len(running), n_jobs, [t.number for t in running])
        for t in running:
            tc.assertNotIn("pid", t.user_attrs, f"trial {t.number} was registered and never recovered")
        lost = [t for t in trials if t.state == TrialState.FAIL]
        tc.assertTrue(lost, "the killed worker's trial was failed")
        for t in lost:
            tc.assertIn(f"pid {killed} ", t.user_attrs["memreplay_worker_died"])
            retried = [r for r in done if r.user_attrs.get("memreplay_retry_of") == t.number]
            tc.assertEqual(len(retried), 1, f"trial {t.number} was run again and completed once (no trial lost)")
            tc.assertEqual({k: retried[0].params[k] for k in t.params}, t.params, "the retry kept what the trial had drawn")


class KilledBeforeTold(unittest.TestCase):
    def test_trial_between_wrapper_and_tell_is_recovered(self):
        """A worker killed after its objective (and memreplay's wrapper)
        returned, before Optuna recorded the trial: the trial is RUNNING in
        the storage with the worker's attrs. It must still be in the
        ledger, so the next trial fails it and runs it again; when the
        wrapper took it out on return, nothing recovered it, and a worker
        waiting for the study's pending trials (worker.py) waited for
        ever (TestPythonPackage's timeouts under load)."""
        need_optuna(self)
        need_cli(self)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        budget_file, budget = os.path.join(tempfile.mkdtemp(), "gpu0.budget"), 20 << 30
        study, dead = study_with_a_dead_worker(self, budget_file, budget)
        self.assertIn("t_end", dead.user_attrs, "killed after the objective returned")
        # The next trial (this process) recovers it and runs it again.
        cb = memreplay.optuna.MemoryCallback(gate=memreplay.MemoryGate(budget, path=budget_file), need=lambda t: 1 << 30,
                                             empty_cache=False)
        study.optimize(cb.wrap(lambda t: t.suggest_categorical("batch", [8, 16, 32])), n_trials=2, callbacks=[cb])
        trials = study.get_trials()
        self.assertEqual([t.state for t in trials], [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE])
        self.assertIn(f"pid {dead.user_attrs['pid']} ", trials[0].user_attrs["memreplay_worker_died"])
        self.assertEqual(trials[1].user_attrs["memreplay_retry_of"], dead.number)
        self.assertEqual(trials[1].params["batch"], dead.params["batch"])
        self.assertNotIn("memreplay_retry_of", trials[2].user_attrs)
        assert_ledger_empty(self, budget_file)


class OtherBudgetFile(unittest.TestCase):
    def test_orphan_of_a_gpu_without_workers_runs_on_another(self):
        """Two GPUs of one host, two budget files. GPU 1's only worker dies
        mid-trial (after its objective, before Optuna's tell). GPU 0's
        worker leaves the orphan to GPU 1 while a live process runs a
        trial of the study there, and takes it once none does: it fails
        the dead trial and runs its parameters. Before, only workers of
        the dead worker's budget file saw its orphans, and with none left
        the trial stayed RUNNING for good."""
        need_optuna(self)
        need_cli(self)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        tmp = tempfile.mkdtemp()
        gpu0, gpu1, budget = os.path.join(tmp, "gpu0.budget"), os.path.join(tmp, "gpu1.budget"), 20 << 30
        study, dead = study_with_a_dead_worker(self, gpu1, budget)
        # A live worker of GPU 1 (this process) in the middle of a trial.
        live = memreplay.MemoryGate(budget, path=gpu1)
        key = live.register_trial({"study": "told", "trial_id": -1})
        cb = memreplay.optuna.MemoryCallback(gate=memreplay.MemoryGate(budget, path=gpu0), need=lambda t: 1 << 30,
                                             empty_cache=False)
        objective = cb.wrap(lambda t: t.suggest_categorical("batch", [8, 16, 32]))
        study.optimize(objective, n_trials=1, callbacks=[cb])
        self.assertEqual(study.get_trials()[0].state, TrialState.RUNNING, "GPU 1's live worker is left to retry it")
        self.assertNotIn("memreplay_retry_of", study.get_trials()[1].user_attrs)
        live.unregister_trial(key)  # now no process runs a trial on GPU 1
        study.optimize(objective, n_trials=1, callbacks=[cb])
        trials = study.get_trials()
        self.assertEqual([t.state for t in trials], [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE])
        self.assertIn(f"pid {dead.user_attrs['pid']} ", trials[0].user_attrs["memreplay_worker_died"])
        self.assertEqual(trials[2].user_attrs["memreplay_retry_of"], dead.number)
        self.assertEqual(trials[2].system_attrs["fixed_params"], dead.params, "the retry runs what the dead trial drew")
        self.assertEqual(trials[2].params["batch"], dead.params["batch"])
        for path in (gpu0, gpu1):
            assert_ledger_empty(self, path)


# Registers trial ids (argv) of study "err" in the ledger and exits: a
# worker that died with those trials running.
DEAD_WORKER = """
import sys
sys.path.insert(0, {root!r})
from memreplay import MemoryGate
g = MemoryGate(1 << 30, path={path!r})
for tid in sys.argv[1:]:
    g.register_trial({{"study": "err", "trial_id": int(tid)}})
"""


class Flaky:
    """A storage whose server is unreachable for one trial (get_trial of
    bad raises, as SQLAlchemy's OperationalError would) while down."""

    def __init__(self, inner, bad):
        self.inner, self.bad, self.down = inner, bad, True

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def get_trial(self, trial_id):
        if self.down and trial_id == self.bad:
            raise ConnectionError("server closed the connection unexpectedly")
        return self.inner.get_trial(trial_id)


def dead_worker(n, sampler=None):
    """An in-memory study "err" with n trials RUNNING (each drew x) that a
    dead worker registered in a budget file: (study, trials, budget file)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    budget_file = os.path.join(tempfile.mkdtemp(), "gpu0.budget")
    study = optuna.create_study(study_name="err", direction="maximize", sampler=sampler)
    dead = []
    for _ in range(n):
        t = study.ask()
        t.suggest_int("x", 0, 1 << 30)
        dead.append(t)
    subprocess.run([sys.executable, "-c", DEAD_WORKER.format(root=os.path.dirname(HERE), path=budget_file)]
                   + [str(t._trial_id) for t in dead], check=True, timeout=60)
    return study, dead, budget_file


class RecoveryStorageError(unittest.TestCase):
    def test_storage_error_loses_no_orphan(self):
        """Recovery that meets a storage error (other than Optuna's "has
        already finished") leaves the dead worker's trials it had not
        settled in the ledger, and a later trial recovers them. Taking all
        of a dead worker's orphans out of the ledger before touching the
        storage lost every one after the error."""
        need_optuna(self)
        study, dead, budget_file = dead_worker(3)
        flaky = Flaky(study._storage, dead[1]._trial_id)
        study._storage = flaky
        gate = memreplay.MemoryGate(1 << 30, path=budget_file)
        cb = memreplay.optuna.MemoryCallback(gate=gate, need=lambda t: 1, empty_cache=False)
        objective = cb.wrap(lambda t: t.suggest_int("x", 0, 1 << 30))
        for _ in range(3):
            try:
                study.optimize(objective, n_trials=1, callbacks=[cb])
            except ConnectionError:
                break
        else:
            self.fail("the recovery never met the unreachable trial")
        with open(budget_file) as f:
            led = json.load(f)
        left = [o["trial_id"] for o in led["orphans"]]
        self.assertEqual(left, [dead[1]._trial_id, dead[2]._trial_id], "the trials not yet recovered stay in the ledger")
        self.assertEqual([o.get("claim") for o in led["orphans"]], [None, None], "and are free for the next claim")
        flaky.down = False
        study.optimize(objective, n_trials=3, callbacks=[cb])
        trials = study.get_trials()
        for d in dead:
            t = trials[d.number]
            self.assertEqual(t.state, TrialState.FAIL)
            self.assertIn("memreplay_worker_died", t.user_attrs)
            retries = [r for r in trials if r.user_attrs.get("memreplay_retry_of") == d.number]
            self.assertEqual([(r.state, r.params) for r in retries], [(TrialState.COMPLETE, t.params)], f"trial {d.number}")
        with open(gate.path) as f:
            self.assertEqual(json.load(f)["orphans"], [])


def locked_error():
    """What Optuna's RDBStorage raises on SQLite's SQLITE_BUSY: its
    StorageInternalError, the sqlite3 error as its cause."""
    import sqlite3

    try:
        try:
            raise sqlite3.OperationalError("database is locked")
        except sqlite3.OperationalError as e:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from e
    except optuna.exceptions.StorageInternalError as e:
        return e


class LockedOnce:
    """A storage whose call `method` meets a locked database the first time
    `when(args)` holds (SQLite's "database is locked", as a writer that
    waited out the busy timeout sees it); nothing of that call is written."""

    def __init__(self, inner, method, when):
        self.inner, self.method, self.when, self.raised = inner, method, when, 0

    def __getattr__(self, name):
        fn = getattr(self.inner, name)
        if name != self.method:
            return fn

        def call(*args, **kwargs):
            if not self.raised and self.when(args):
                self.raised += 1
                raise locked_error()
            return fn(*args, **kwargs)

        return call


class LockedDatabase(unittest.TestCase):
    """SQLite's "database is locked" (one run of five SQLite workers in
    twenty stopped on it at load 13, docs/optuna.md): memreplay's own
    storage calls make it again, and the SQLite storage waits longer for a
    lock than sqlite3's 5 s."""

    def test_recovery_survives_a_locked_database(self):
        """Failing the dead worker's trial meets a locked database once:
        the call is made again, the dead trial fails and runs again once.
        Before, the error went out of optimize and stopped the worker."""
        need_optuna(self)
        study, [dead], budget_file = dead_worker(1)
        study._storage = LockedOnce(study._storage, "set_trial_state_values", lambda a: a[0] == dead._trial_id)
        cb = memreplay.optuna.MemoryCallback(gate=memreplay.MemoryGate(1 << 30, path=budget_file), need=lambda t: 1,
                                             empty_cache=False)
        study.optimize(cb.wrap(lambda t: t.suggest_int("x", 0, 1 << 30)), n_trials=2, callbacks=[cb])
        self.assertEqual(study._storage.raised, 1)
        trials = study.get_trials()
        self.assertEqual([t.state for t in trials], [TrialState.FAIL, TrialState.COMPLETE, TrialState.COMPLETE])
        self.assertIn("memreplay_worker_died", trials[0].user_attrs)
        retries = [t for t in trials if t.user_attrs.get("memreplay_retry_of") == dead.number]
        self.assertEqual([(t.number, t.params) for t in retries], [(1, dead.params)])
        with open(budget_file) as f:
            self.assertEqual(json.load(f)["orphans"], [])

    def test_trial_attr_survives_a_locked_database(self):
        """memreplay's figures in user_attrs: a locked database once, and
        the trial completes with them (before, the trial failed and the
        error stopped optimize)."""
        need_optuna(self)
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        study = optuna.create_study()
        study._storage = LockedOnce(study._storage, "set_trial_user_attr", lambda a: a[1] == "memreplay_need_bytes")
        cb = memreplay.optuna.MemoryCallback(gate=memreplay.MemoryGate(1 << 30), need=lambda t: 1 << 20, empty_cache=False)
        study.optimize(cb.wrap(lambda t: t.suggest_float("x", 0, 1)), n_trials=2, callbacks=[cb])
        self.assertEqual(study._storage.raised, 1)
        self.assertEqual([(t.state, t.user_attrs["memreplay_need_bytes"]) for t in study.get_trials()],
                         [(TrialState.COMPLETE, 1 << 20)] * 2)

    def hold_lock(self, db, seconds=None):
        """Another connection holds SQLite's exclusive lock on db (a worker
        mid-commit, starved of CPU) for seconds, or until the returned
        function is called."""
        import sqlite3
        import threading

        con = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
        con.execute("BEGIN EXCLUSIVE")

        def release():
            con.execute("COMMIT")
            con.close()

        if seconds is None:
            return release
        t = threading.Timer(seconds, release)
        t.start()
        self.addCleanup(t.join)

    def test_sqlite_waits_past_five_seconds(self):
        """A lock held 6 s: past sqlite3's default 5 s busy timeout,
        Optuna's own next call (ask) raised StorageInternalError out of
        optimize; with the callback's busy timeout the trial waits and
        runs."""
        need_optuna(self)
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        db = os.path.join(tempfile.mkdtemp(), "study.db")
        study = optuna.create_study(storage="sqlite:///" + db)
        cb = memreplay.optuna.MemoryCallback(gate=memreplay.MemoryGate(1 << 30), need=lambda t: 1, empty_cache=False)
        objective = cb.wrap(lambda t: t.suggest_float("x", 0, 1))
        study.optimize(objective, n_trials=1, callbacks=[cb])
        self.hold_lock(db, 6)
        t0 = time.monotonic()
        study.optimize(objective, n_trials=1, callbacks=[cb])
        self.assertGreater(time.monotonic() - t0, 5, "the second trial waited for the lock")
        self.assertEqual([t.state for t in study.get_trials()], [TrialState.COMPLETE] * 2)

    def test_storage_with_its_own_timeout_is_kept(self):
        """A storage made with connect_args' timeout keeps it: 0.5 s, and a
        lock held meanwhile stops Optuna's next call as that user asked."""
        need_optuna(self)
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        db = os.path.join(tempfile.mkdtemp(), "study.db")
        storage = optuna.storages.RDBStorage("sqlite:///" + db, engine_kwargs={"connect_args": {"timeout": 0.5}})
        study = optuna.create_study(storage=storage)
        cb = memreplay.optuna.MemoryCallback(gate=memreplay.MemoryGate(1 << 30), need=lambda t: 1, empty_cache=False)
        objective = cb.wrap(lambda t: t.suggest_float("x", 0, 1))
        study.optimize(objective, n_trials=1, callbacks=[cb])
        release = self.hold_lock(db)
        try:
            with self.assertRaises(optuna.exceptions.StorageInternalError):
                study.optimize(objective, n_trials=1, callbacks=[cb])
        finally:
            release()


class RetryInAskedTrial(unittest.TestCase):
    def test_enqueued_trial_keeps_its_parameters(self):
        """A dead worker's trial is run again by a trial Optuna asked for
        afresh, never by one the user enqueued: that one runs the
        parameters it was enqueued with, and the next trial takes the
        retry."""
        need_optuna(self)
        study, [dead], budget_file = dead_worker(1)
        study.enqueue_trial({"x": -1}, user_attrs={"mine": True})
        cb = memreplay.optuna.MemoryCallback(gate=memreplay.MemoryGate(1 << 30, path=budget_file), need=lambda t: 1,
                                             empty_cache=False)
        study.optimize(cb.wrap(lambda t: t.suggest_int("x", -1, 1 << 30)), n_trials=2, callbacks=[cb])
        _, mine, retry = study.get_trials()
        self.assertEqual((mine.params, mine.user_attrs["mine"]), ({"x": -1}, True))
        self.assertNotIn("memreplay_retry_of", mine.user_attrs)
        self.assertEqual((retry.params, retry.user_attrs["memreplay_retry_of"]), (dead.params, dead.number))
        self.assertEqual(retry.state, TrialState.COMPLETE)


    def test_grid_point_is_not_lost(self):
        """With GridSampler the trial that takes a dead trial's parameters
        also takes its grid point: the point the sampler had given the
        trial stays open, and every point of the grid runs once."""
        need_optuna(self)
        grid = [10, 20, 30, 40]
        study, [dead], budget_file = dead_worker(1, optuna.samplers.GridSampler({"x": grid}))
        cb = memreplay.optuna.MemoryCallback(gate=memreplay.MemoryGate(1 << 30, path=budget_file), need=lambda t: 1,
                                             empty_cache=False)
        study.optimize(cb.wrap(lambda t: t.suggest_int("x", 0, 1 << 30)), n_trials=8, callbacks=[cb])
        done = sorted(t.params["x"] for t in study.get_trials() if t.state == TrialState.COMPLETE)
        self.assertEqual(done, grid)


class SQLiteWorkers(unittest.TestCase):
    def test_three_workers_one_killed(self):
        need_optuna(self)
        need_cli(self)
        url = "sqlite:///" + os.path.join(tempfile.mkdtemp(), "study.db")
        budget = 20 << 30
        # One thread per worker: Optuna 3.1's SQLite storage can hand one
        # enqueued trial to two threads of a process (memreplay enqueues
        # none, but keeps the test to what a SQLite study should run).
        # Every worker but the killed one must exit 0: no worker may run a
        # killed worker's trial that another runs too.
        trials, killed = run_workers(self, url, 3, budget, 12, kill_one=True, n_jobs=1)
        check_study(self, trials, budget, 12, killed)


if __name__ == "__main__":
    unittest.main()
