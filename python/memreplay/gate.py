"""A memory gate for trials sharing one GPU.

A trial enters the gate with the bytes it will take from the GPU (its
prediction, `memreplay estimate`'s need_bytes) and enters only when the
trials inside plus this one fit the budget; otherwise it waits. It leaves on
exit, an exception included. Trials are admitted in the order they arrived,
so a large trial is not starved by a stream of small ones.

Across threads of one process (Optuna's study.optimize(n_jobs=k)) a gate
without a file is enough. Across worker processes on one host, every gate
names the same budget file: a JSON ledger of who holds and who waits,
rewritten under an exclusive flock(2) on BUDGET_FILE.lock. A rewrite goes
to BUDGET_FILE.tmp and is renamed over the budget file, so a process
killed in the middle leaves the old ledger or the new one, never an empty
or cut one (truncating the file and then writing it, a worker killed in
between emptied the ledger and its trials were never recovered). Each
entry carries its process's pid and start time (field 22 of
/proc/PID/stat), so an entry whose process has died (killed mid-trial,
OOM-killed, a crashed interpreter) is reclaimed by the next gate that
reads the file: a killed worker's share comes back
without anyone cleaning up, and a reused pid is not mistaken for the dead
worker. The file must be on a local file system (flock over NFS is not
reliable); across hosts each GPU has its own gate and budget file, and the
study's RDB storage is what the hosts share (docs/optuna.md).

The budget is given (bytes or "24GiB") or, with budget="gpu", the GPU's
memory as torch sees it: the device's total less what other processes
already use when the gate is made.
"""

import fcntl
import json
import os
import socket
import threading
import time
import uuid

from .sizes import format_size, parse_size

__all__ = ["MemoryGate", "TrialTooLarge", "process_alive"]


class TrialTooLarge(Exception):
    """The trial needs more than the whole budget: it can never enter."""

    def __init__(self, need, budget, label=""):
        self.need, self.budget, self.label = need, budget, label
        super().__init__(
            f"{label + ': ' if label else ''}needs {format_size(need)}, more than the gate's whole budget of {format_size(budget)}"
        )


def _start_time(pid):
    """The process's start time in clock ticks since boot, and whether it is
    a zombie; (None, False) when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None, False
    # comm (field 2) may hold spaces and parentheses: split after the last ')'.
    rest = stat[stat.rfind(")") + 2:].split()
    return int(rest[19]), rest[0] in ("Z", "X")


def process_alive(pid, start=None):
    """Whether pid runs, and is the same process (started at start)."""
    if not isinstance(pid, int) or pid <= 0:
        return False  # kill(0) and kill(-1) would ask about process groups
    t, dead = _start_time(pid)
    if t is None:
        try:
            os.kill(pid, 0)  # no /proc: ask the kernel
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return not dead and (start is None or t == start)


_ME = None

# This process image. os.execv (a worker restarting itself after a sticky
# CUDA error) keeps the pid and the start time, so an entry of the image
# before the exec would look alive; the token tells them apart.
_IMAGE = uuid.uuid4().hex


def _me():
    global _ME
    if _ME is None or _ME[0] != os.getpid():  # recomputed after a fork
        _ME = (os.getpid(), _start_time(os.getpid())[0])
    return _ME


class _Ticket:
    def __init__(self, gate, key, need, label, waited):
        self.gate, self.key, self.need, self.label, self.waited = gate, key, need, label, waited

    def release(self):
        self.gate._release(self.key)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


class MemoryGate:
    """Admits trials while their predicted bytes fit the budget.

    budget: bytes, a string such as "24GiB", or "gpu" (module comment).
    path: the budget file shared by every gate on this GPU (processes of one
        host); None keeps the ledger in this process (threads only).
    poll: seconds between looks at the file while waiting.
    """

    def __init__(self, budget, path=None, poll=0.05, device=0):
        self.path = os.path.abspath(path) if path else None
        self.poll = poll
        self._lock = threading.Lock()  # guards the in-process ledger and the file's rewrite
        self._changed = threading.Condition(self._lock)
        self._mem = {"holders": {}, "waiting": [], "trials": {}, "orphans": []}
        self._seq = 0
        self._host = socket.gethostname()
        if budget == "gpu":
            # The free memory now, plus what the gate's trials hold (they
            # are inside the budget, not other processes).
            self.budget = 1
            budget = _gpu_free(device) + self.held()[0]
        self.budget = parse_size(budget)
        if self.budget <= 0:
            raise ValueError("the gate's budget must be positive")

    # --- the ledger -------------------------------------------------------

    def _open(self):
        """The lock: a file beside the ledger, never replaced (a lock on
        the ledger itself would be on the inode a rewrite renames away)."""
        fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def _read(self):
        data = b""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            fd = None
        if fd is not None:
            try:
                while True:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        break
                    data += chunk
            finally:
                os.close(fd)
        if not data.strip():
            return {"holders": {}, "waiting": [], "trials": {}, "orphans": []}
        try:
            led = json.loads(data)
        except ValueError as e:
            raise ValueError(f"{self.path}: not a memreplay budget file ({e})") from None
        for k, v in (("holders", {}), ("waiting", []), ("trials", {}), ("orphans", [])):
            led.setdefault(k, v)
        return led

    def _write(self, led):
        """Under the lock: the new ledger in full beside the old, then
        renamed over it (atomic: every reader sees one or the other)."""
        data = json.dumps(led, sort_keys=True).encode()
        tmp = self.path + ".tmp"  # only the lock's holder writes it
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, self.path)

    def _transact(self, fn):
        """fn(ledger) under the locks; the ledger is written back."""
        with self._lock:
            if self.path is None:
                return fn(self._mem)
            fd = self._open()
            try:
                led = self._read()
                out = fn(led)
                self._write(led)
                return out
            finally:
                os.close(fd)  # releases the flock

    @staticmethod
    def _dead(e):
        if e.get("host") not in (None, socket.gethostname()):
            return False  # another host's file on a shared disk: not ours to judge
        pid, start = _me()
        if e["pid"] == pid and e.get("start") == start:
            return e.get("image") != _IMAGE  # an earlier image of this process, before an exec
        return not process_alive(e["pid"], e.get("start"))

    @classmethod
    def _reclaim(cls, led):
        """Drops the entries of processes that are gone; returns them."""
        gone = []
        for k, e in list(led["holders"].items()):
            if cls._dead(e):
                gone.append(led["holders"].pop(k))
        alive = []
        for w in led["waiting"]:
            (gone if cls._dead(w) else alive).append(w)
        led["waiting"] = alive
        # A dead worker's registered trials become orphans, for a worker of
        # the same study to fail and run again (claim_orphan).
        for k, e in list(led.get("trials", {}).items()):
            if cls._dead(e):
                led["orphans"].append(dict(led["trials"].pop(k), key=k))
        return gone

    # --- admission --------------------------------------------------------

    def acquire(self, need, label="", timeout=None):
        """Waits until need bytes fit, then holds them; returns a ticket
        (a context manager) whose release gives them back. Raises
        TrialTooLarge when need exceeds the whole budget, TimeoutError after
        timeout seconds of waiting."""
        need = parse_size(need)
        if need > self.budget:
            raise TrialTooLarge(need, self.budget, label)
        pid, start = _me()
        with self._lock:
            self._seq += 1
            key = f"{self._host}:{pid}:{start}:{threading.get_ident()}:{self._seq}"
        entry = {"pid": pid, "start": start, "image": _IMAGE, "host": self._host, "bytes": need, "label": str(label), "key": key}
        t0 = time.monotonic()

        def enqueue(led):
            self._reclaim(led)
            led["waiting"].append(entry)

        self._transact(enqueue)

        def try_enter(led):
            self._reclaim(led)
            held = sum(e["bytes"] for e in led["holders"].values())
            # First come, first served: only the oldest waiter may enter.
            if not led["waiting"] or led["waiting"][0]["key"] != key:
                if not any(w["key"] == key for w in led["waiting"]):
                    led["waiting"].append(entry)  # a foreign gate dropped us: queue again
                return False
            if held + need > self.budget:
                return False
            led["waiting"].pop(0)
            led["holders"][key] = dict(entry, since=time.time())
            return True

        try:
            while not self._transact(try_enter):
                if timeout is not None and time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"{label or 'trial'}: waited {timeout}s for {format_size(need)} under a budget of {format_size(self.budget)}")
                with self._changed:
                    self._changed.wait(self.poll)
        except BaseException:
            self._transact(lambda led: led.__setitem__("waiting", [w for w in led["waiting"] if w["key"] != key]))
            raise
        return _Ticket(self, key, need, label, time.monotonic() - t0)

    def _release(self, key):
        self._transact(lambda led: led["holders"].pop(key, None))
        with self._changed:
            self._changed.notify_all()

    # --- trials of a study, for recovery after a worker dies ---------------

    def register_trial(self, meta):
        """Records that this process runs a trial (meta: a JSON-able dict
        with at least "study"); returns the key for unregister_trial. When
        the process dies, the next gate to read the file moves the entry to
        the orphans, which claim_orphan hands out one at a time."""
        pid, start = _me()
        with self._lock:
            self._seq += 1
            key = f"{self._host}:{pid}:{start}:{threading.get_ident()}:t{self._seq}"
        entry = dict(meta, pid=pid, start=start, image=_IMAGE, host=self._host)

        def reg(led):
            self._reclaim(led)
            led["trials"][key] = entry

        self._transact(reg)
        return key

    def unregister_trial(self, key):
        self._transact(lambda led: led["trials"].pop(key, None))

    def claim_orphan(self, study, only_if_idle=False):
        """One registered trial of study whose process died, claimed by
        this process (a copy of its entry), or None. The orphan stays in
        the ledger, claimed, until settle_orphan: no other caller gets it
        meanwhile, and if this process dies or its storage fails before it
        settles, the orphan is handed out again (taking every orphan out
        at once, as this once did, lost the rest when recovering one of
        them raised). only_if_idle: None while a live process has a
        trial of study registered here (a worker of another budget file
        takes this file's orphans only when none of its own runs trials)."""
        pid, start = _me()
        claim = {"pid": pid, "start": start, "image": _IMAGE, "host": self._host}

        def take(led):
            self._reclaim(led)
            if only_if_idle and any(e.get("study") == study for e in led["trials"].values()):
                return None
            for o in led["orphans"]:
                if o.get("study") == study and (o.get("claim") is None or self._dead(o["claim"])):
                    o["claim"] = claim
                    return dict(o)
            return None

        return self._transact(take)

    def settle_orphan(self, orphan, done):
        """Ends claim_orphan's claim: done, the orphan leaves the ledger;
        not done, it is unclaimed and waits for the next claim."""
        ident = _orphan_ident(orphan)

        def settle(led):
            for i, o in enumerate(led["orphans"]):
                if _orphan_ident(o) == ident:
                    if done:
                        del led["orphans"][i]
                    else:
                        o.pop("claim", None)
                    return

        self._transact(settle)

    def registered(self, study):
        """The trial ids of study in the ledger: registered by a live
        process, or orphaned by a dead one."""
        def look(led):
            self._reclaim(led)
            ids = {e.get("trial_id") for e in led["trials"].values() if e.get("study") == study}
            return ids | {o.get("trial_id") for o in led["orphans"] if o.get("study") == study}

        return self._transact(look)

    def held(self):
        """(bytes held, number of holders) after reclaiming dead processes'
        entries."""
        def look(led):
            self._reclaim(led)
            return sum(e["bytes"] for e in led["holders"].values()), len(led["holders"])

        return self._transact(look)

    def holders(self):
        """The live holders' entries (pid, bytes, label, since)."""
        def look(led):
            self._reclaim(led)
            return [dict(e) for e in led["holders"].values()]

        return self._transact(look)


def _orphan_ident(o):
    # The registration key; an orphan a gate before it made has none.
    return o.get("key") or (o.get("study"), o.get("trial_id"), o.get("pid"), o.get("start"))


def _gpu_free(device):
    try:
        import torch
    except ImportError:
        raise RuntimeError('budget="gpu" needs torch with CUDA; give the budget in bytes (e.g. "24GiB")') from None
    if not torch.cuda.is_available():
        raise RuntimeError('budget="gpu": torch sees no CUDA device; give the budget in bytes (e.g. "24GiB")')
    free, _total = torch.cuda.mem_get_info(device)
    return free
