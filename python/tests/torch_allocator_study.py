"""An Optuna study whose trials allocate through libmemreplay made the
allocator by memreplay_torch.use_memreplay (with the stand-in torch of
cmd/libmemreplay/testdata/faketorch: no PyTorch here), and the callback
with its defaults: it must find libmemreplay's statistics and empty its
cache between trials by itself. Prints one JSON line per trial's attrs, then
the allocator's reserved bytes after the study. Usage: torch_allocator_study.py REPO"""

import ctypes
import json
import os
import sys

repo = sys.argv[1]
sys.path.insert(0, os.path.join(repo, "cmd", "libmemreplay", "testdata", "faketorch"))
sys.path.insert(0, os.path.join(repo, "python"))

import optuna  # noqa: E402

import memreplay  # noqa: E402
import memreplay_torch as mt  # noqa: E402

mt.use_memreplay(lib_path=os.environ["MEMREPLAY_LIB"])
lib = mt._lib
lib.memreplay_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.memreplay_malloc.restype = ctypes.c_void_p
lib.memreplay_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.memreplay_init(1)


def objective(trial):
    n = trial.suggest_int("tensors", 1, 3)
    ptrs = [lib.memreplay_malloc(32 << 20, 0, None) for _ in range(n)]
    if trial.number == 2:
        big = lib.memreplay_malloc(1 << 40, 0, None)  # more than the fake device: an OOM
        if not big:
            for p in ptrs:
                lib.memreplay_free(p, 32 << 20, 0, None)
            raise RuntimeError(mt.last_error())
    for p in ptrs:
        lib.memreplay_free(p, 32 << 20, 0, None)
    return n


optuna.logging.set_verbosity(optuna.logging.ERROR)
study = optuna.create_study()
cb = memreplay.optuna.MemoryCallback()
study.optimize(cb.wrap(objective), n_trials=3, callbacks=[cb])
for t in study.get_trials():
    print(json.dumps(dict(t.user_attrs, state=t.state.name, tensors=t.params.get("tensors"))))
print(json.dumps({"reserved_after": mt.stats()["reserved_bytes.all.current"]}))
