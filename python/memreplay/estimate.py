"""memreplay's prediction of one trial's memory, from Python: runs
`memreplay estimate --spec JSON --format json` (docs/optuna.md) and caches
the answer per trial configuration, since a study asks for the same
configurations again and again."""

import json
import os
import shutil
import subprocess
import threading

__all__ = ["estimate", "binary_path", "EstimateError"]


class EstimateError(RuntimeError):
    """`memreplay estimate` refused the trial (bad hyperparameters) or could
    not run; the message is memreplay's."""


def binary_path(binary=None):
    """The memreplay CLI: binary, else $MEMREPLAY_BIN, else `memreplay` on
    PATH, else dist/memreplay of this checkout."""
    if binary:
        return binary
    if os.environ.get("MEMREPLAY_BIN"):
        return os.environ["MEMREPLAY_BIN"]
    found = shutil.which("memreplay")
    if found:
        return found
    here = os.path.dirname(os.path.abspath(__file__))
    cand = os.path.join(here, "..", "..", "dist", "memreplay")
    if os.path.exists(cand):
        return os.path.abspath(cand)
    raise FileNotFoundError(
        "memreplay not found: build it (go build -o dist/memreplay ./cmd/memreplay), "
        "put it on PATH, or set MEMREPLAY_BIN"
    )


_cache = {}
_cache_lock = threading.Lock()


def estimate(spec, alloc_conf=None, context_overhead=None, binary=None):
    """The prediction for one trial, a dict with peak_live_bytes,
    peak_reserved_bytes, analytic_live_bytes, margin, context_bytes,
    need_bytes (reserved + context: what the trial takes from the GPU), ...

    spec: the trial's hyperparameters in memreplay's spelling, e.g.
    {"model": "bert-large", "batch": 16, "seq_len": 128, "precision": "fp16"}
    (keys: model, batch, seq_len, grad_accum, precision, optimizer,
    gradient_checkpointing, attention, dynamic_padding, steps; docs/cli.md).
    """
    text = json.dumps(spec, sort_keys=True)
    key = (text, alloc_conf, context_overhead, binary)
    with _cache_lock:
        if key in _cache:
            return dict(_cache[key])
    cmd = [binary_path(binary), "estimate", "--format", "json", "--spec", text]
    if alloc_conf:
        cmd += ["--alloc-conf", alloc_conf]
    if context_overhead is not None:
        cmd += ["--context-overhead", f"{int(context_overhead)}B"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise EstimateError(p.stderr.strip() or f"memreplay estimate exited {p.returncode}")
    out = json.loads(p.stdout)
    with _cache_lock:
        _cache[key] = out
    return dict(out)
