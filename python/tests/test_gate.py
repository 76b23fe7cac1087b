"""MemoryGate: admission under a budget across threads and processes, and
the share of a killed process coming back."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from memreplay import MemoryGate, TrialTooLarge, parse_size  # noqa: E402
from memreplay.gate import process_alive  # noqa: E402

HOLDER = """
import sys, time
sys.path.insert(0, {root!r})
from memreplay import MemoryGate
g = MemoryGate({budget}, path={path!r})
t = g.acquire({need}, label="child")
g.register_trial({{"study": "s", "trial_id": 7}})
print("held", flush=True)
time.sleep(60)
"""

# Registers a trial, then rewrites the ledger once more (held()) and is
# SIGKILLed by itself just before its K-th os call (open, read, write,
# truncate, seek, rename, close) of that rewrite.
KILLED_MID_REWRITE = """
import os, signal, sys
sys.path.insert(0, {root!r})
from memreplay import MemoryGate
g = MemoryGate(10, path={path!r})
g.register_trial({{"study": "s", "trial_id": 7}})
calls = [0]
def dying(f):
    def call(*a, **kw):
        calls[0] += 1
        if calls[0] == int(sys.argv[1]):
            os.kill(os.getpid(), signal.SIGKILL)
        return f(*a, **kw)
    return call
for name in ("open", "read", "write", "pwrite", "ftruncate", "lseek", "replace", "rename", "close", "fsync"):
    if hasattr(os, name):
        setattr(os, name, dying(getattr(os, name)))
g.held()
print("rewrote", calls[0], flush=True)
"""

# Claims the orphan a killed HOLDER left and sleeps without settling it.
CLAIMER = """
import sys, time
sys.path.insert(0, {root!r})
from memreplay import MemoryGate
o = MemoryGate(10, path={path!r}).claim_orphan("s")
print("claimed", o and o["trial_id"], flush=True)
time.sleep(60)
"""


class Threads(unittest.TestCase):
    def run_threads(self, gate, needs):
        lock = threading.Lock()
        state = {"held": 0, "max": 0}
        errors = []

        def trial(n):
            try:
                with gate.acquire(n):
                    with lock:
                        state["held"] += n
                        state["max"] = max(state["max"], state["held"])
                    time.sleep(0.01)
                    with lock:
                        state["held"] -= n
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        ts = [threading.Thread(target=trial, args=(n,)) for n in needs]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        self.assertEqual(errors, [])
        return state["max"]

    def test_budget_never_exceeded(self):
        for path in (None, os.path.join(tempfile.mkdtemp(), "budget")):
            gate = MemoryGate(10, path=path, poll=0.002)
            peak = self.run_threads(gate, [3, 4, 5, 2, 6, 3, 7, 1] * 3)
            self.assertLessEqual(peak, 10, path)
            self.assertGreater(peak, 7, "the gate admitted trials side by side")
            self.assertEqual(gate.held(), (0, 0))

    def test_too_large_and_release_on_exception(self):
        gate = MemoryGate("1GiB")
        with self.assertRaises(TrialTooLarge):
            gate.acquire("2GiB")
        with self.assertRaises(ZeroDivisionError):
            with gate.acquire("1GiB"):
                1 / 0
        self.assertEqual(gate.held(), (0, 0))
        with gate.acquire("1GiB"):  # all of it is back
            with self.assertRaises(TimeoutError):
                gate.acquire(1, timeout=0.05)
        self.assertEqual(gate.held(), (0, 0))

    def test_first_come_first_served(self):
        gate = MemoryGate(10, poll=0.002)
        order = []
        first = gate.acquire(6)
        def enter(n, name):
            t = gate.acquire(n)
            order.append(name)  # before the release: whoever enters next comes after
            t.release()

        big = threading.Thread(target=enter, args=(8, "big"))
        big.start()
        while len(gate._mem["waiting"]) < 1:
            time.sleep(0.001)
        # A small trial that would fit now waits behind the big one.
        small = threading.Thread(target=enter, args=(2, "small"))
        small.start()
        time.sleep(0.05)
        self.assertEqual(order, [])
        first.release()
        big.join(10)
        small.join(10)
        self.assertEqual(order, ["big", "small"])

    def test_sizes(self):
        self.assertEqual(parse_size("24GiB"), 24 << 30)
        self.assertEqual(parse_size("1.5 GiB"), 3 << 29)
        self.assertEqual(parse_size(7), 7)
        for bad in ("lots", "-1GiB", "3 parsecs", -1):
            with self.assertRaises(ValueError):
                parse_size(bad)


class Processes(unittest.TestCase):
    def spawn(self, path, budget, need):
        root = os.path.dirname(HERE)
        p = subprocess.Popen([sys.executable, "-c", HOLDER.format(root=root, budget=budget, path=path, need=need)],
                             stdout=subprocess.PIPE, text=True)
        self.assertEqual(p.stdout.readline().strip(), "held")
        return p

    def test_killed_holder_share_comes_back(self):
        path = os.path.join(tempfile.mkdtemp(), "gpu0.budget")
        gate = MemoryGate("10GiB", path=path, poll=0.01)
        a = self.spawn(path, '"10GiB"', '"6GiB"')
        b = self.spawn(path, '"10GiB"', '"4GiB"')
        try:
            self.assertEqual(gate.held(), (10 << 30, 2))
            with self.assertRaises(TimeoutError):
                gate.acquire("1GiB", timeout=0.1)
            a.send_signal(signal.SIGKILL)
            # Not reaped yet: a zombie holds nothing.
            time.sleep(0.1)
            t0 = time.monotonic()
            with gate.acquire("6GiB", timeout=10):
                self.assertLess(time.monotonic() - t0, 5)
                self.assertEqual(gate.held(), (10 << 30, 2))
            b.kill()
            b.wait()
            self.assertEqual(gate.held(), (0, 0))
            with open(path) as f:
                led = json.load(f)
            self.assertEqual(led["holders"], {})
            # Each dead worker's registered trial is handed out to one
            # claimer at a time, of its study; a claim settled as not done
            # (its recovery failed) hands it out again, one settled done
            # takes it out.
            self.assertIsNone(gate.claim_orphan("other"))
            first, second = gate.claim_orphan("s"), gate.claim_orphan("s")
            self.assertEqual(sorted([first["pid"], second["pid"]]), sorted([a.pid, b.pid]))
            self.assertEqual({first["trial_id"], second["trial_id"]}, {7})
            self.assertIsNone(gate.claim_orphan("s"), "both are claimed")
            gate.settle_orphan(first, done=False)
            again = gate.claim_orphan("s")
            self.assertEqual((again["pid"], again["trial_id"]), (first["pid"], 7))
            gate.settle_orphan(again, done=True)
            gate.settle_orphan(second, done=True)
            self.assertIsNone(gate.claim_orphan("s"))
            with open(path) as f:
                self.assertEqual(json.load(f)["orphans"], [])
        finally:
            for p in (a, b):
                p.kill()
                p.wait()
                p.stdout.close()

    def test_killed_mid_rewrite_loses_nothing(self):
        """A process killed at any instant of a ledger rewrite leaves the
        ledger as it was or as it was to be, never empty or cut: with the
        file truncated and then written, a worker killed between the two
        (a window the GIL stretches while another thread of the worker
        runs) emptied it, its running trials were never orphaned, and the
        study's other workers waited for them for ever."""
        root = os.path.dirname(HERE)
        for k in range(1, 50):
            path = os.path.join(tempfile.mkdtemp(), "gpu0.budget")
            p = subprocess.run([sys.executable, "-c", KILLED_MID_REWRITE.format(root=root, path=path), str(k)],
                               capture_output=True, text=True, timeout=60)
            if p.returncode == 0:
                self.assertTrue(p.stdout.startswith("rewrote"), p.stdout)
                break
            self.assertEqual(p.returncode, -signal.SIGKILL, p.stderr[-2000:])
            gate = MemoryGate(10, path=path)
            o = gate.claim_orphan("s")
            self.assertEqual(o and o["trial_id"], 7, f"killed before os call {k} of the rewrite")
            self.assertIsNone(gate.claim_orphan("s"))
        else:
            self.fail("the rewrite never finished")
        self.assertGreater(k, 3, "the child was killed inside the rewrite")

    def test_dead_claimer_orphan_is_handed_out_again(self):
        """A worker that claimed an orphan and died before settling it (or
        one whose storage failed) leaves the orphan in the ledger: the next
        claimer gets it. Taking orphans out of the ledger on the claim lost
        them."""
        path = os.path.join(tempfile.mkdtemp(), "gpu0.budget")
        gate = MemoryGate(10, path=path)
        holder = self.spawn(path, "10", "1")
        holder.kill()
        holder.wait()
        holder.stdout.close()
        claimer = subprocess.Popen([sys.executable, "-c", CLAIMER.format(root=os.path.dirname(HERE), path=path)],
                                   stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(claimer.stdout.readline().strip(), "claimed 7")
            self.assertIsNone(gate.claim_orphan("s"), "claimed by a live process")
            claimer.kill()
            claimer.wait()
            o = gate.claim_orphan("s")
            self.assertEqual((o["trial_id"], o["pid"]), (7, holder.pid))
        finally:
            claimer.kill()
            claimer.wait()
            claimer.stdout.close()

    def test_reused_pid_is_not_the_holder(self):
        path = os.path.join(tempfile.mkdtemp(), "budget")
        me = os.getpid()
        with open(path, "w") as f:
            # This process's pid with another start time: a dead holder whose
            # pid was handed to us.
            json.dump({"holders": {"x": {"pid": me, "start": 1, "bytes": 5, "label": "old", "key": "x"}},
                       "waiting": []}, f)
        self.assertFalse(process_alive(me, 1))
        self.assertTrue(process_alive(me))
        self.assertEqual(MemoryGate(5, path=path).held(), (0, 0))

    def test_bad_budget_file(self):
        path = os.path.join(tempfile.mkdtemp(), "budget")
        with open(path, "w") as f:
            f.write("not json")
        with self.assertRaisesRegex(ValueError, "not a memreplay budget file"):
            MemoryGate(5, path=path).held()


if __name__ == "__main__":
    unittest.main()
