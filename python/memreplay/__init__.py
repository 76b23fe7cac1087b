"""memreplay for Python: the memory of trials sharing a GPU.

    import memreplay
    memreplay.estimate({"model": "bert-large", "batch": 16, "seq_len": 128, "precision": "fp16"})
    gate = memreplay.MemoryGate("24GiB", path="/tmp/gpu0.budget")
    cb = memreplay.optuna.MemoryCallback(gate=gate, spec=spec_of)   # Optuna: docs/optuna.md

MemoryGate admits trials while their predicted bytes fit a budget, across
threads and worker processes, and gets back the share of a killed worker.
memreplay.optuna.MemoryCallback puts each trial's memory figures in its
user_attrs and diagnoses every OOM. PyTorch with memreplay's allocator is
the separate module memreplay_torch (docs/libmemreplay.md).
"""

from . import optuna
from .diagnose import diagnose, is_oom, is_sticky, parse_oom_message
from .estimate import EstimateError, binary_path, estimate
from .gate import MemoryGate, TrialTooLarge
from .sizes import format_size, parse_size

__all__ = ["MemoryGate", "TrialTooLarge", "estimate", "EstimateError", "binary_path", "diagnose", "parse_oom_message",
           "is_oom", "is_sticky", "parse_size", "format_size", "optuna"]
