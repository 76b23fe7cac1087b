"""memreplay's caching allocator as PyTorch's CUDA allocator.

libmemreplay.so (built with ``make libmemreplay``, or
``go build -buildmode=c-shared -o dist/libmemreplay.so ./cmd/libmemreplay``)
makes the same caching decisions as PyTorch's own allocator, under settings
in PYTORCH_CUDA_ALLOC_CONF syntax, and can record every decision into a
trace that ``memreplay replay --check`` reproduces. Three lines in a
training script::

    from memreplay_torch import use_memreplay, stats, write_trace
    use_memreplay(alloc_conf="expandable_segments:True", record=True)  # before any CUDA tensor
    ...  # train
    print(stats()["reserved_bytes.all.peak"]); write_trace("run.mrt")

With a pluggable allocator PyTorch refuses torch.cuda.memory_stats(),
max_memory_reserved(), _record_memory_history() and _dump_snapshot();
stats(), write_trace() and write_snapshot() here stand in for them.
See docs/libmemreplay.md.
"""

import atexit
import ctypes
import json
import os
import sys

__all__ = ["use_memreplay", "stats", "write_trace", "write_snapshot", "last_error", "library_path"]

_lib = None  # the ctypes handle, once loaded
_allocator = None  # the torch.cuda.memory.CUDAPluggableAllocator in use

# PyTorch's optional hooks: (setter on torch._C._CUDAPluggableAllocator, our symbol).
_HOOKS = (
    ("set_init_fn", "memreplay_init"),  # void(int device_count)
    ("set_reset_fn", "memreplay_empty_cache"),  # void(void): torch.cuda.empty_cache()
    ("set_memory_fraction_fn", "memreplay_set_memory_fraction"),  # void(double, int)
    ("set_record_stream_fn", "memreplay_record_stream"),  # void(void*, cudaStream_t)
)


def library_path(lib_path=None):
    """The library to load: lib_path, else $MEMREPLAY_LIB, else dist/libmemreplay.so
    of this checkout, else libmemreplay.so beside this file."""
    if lib_path:
        return os.path.abspath(lib_path)
    if os.environ.get("MEMREPLAY_LIB"):
        return os.path.abspath(os.environ["MEMREPLAY_LIB"])
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "..", "dist", "libmemreplay.so"), os.path.join(here, "libmemreplay.so")):
        if os.path.exists(cand):
            return os.path.abspath(cand)
    raise FileNotFoundError(
        "libmemreplay.so not found: build it with `make libmemreplay` "
        "(go build -buildmode=c-shared -o dist/libmemreplay.so ./cmd/libmemreplay), "
        "or pass lib_path= or set MEMREPLAY_LIB"
    )


def _load(path):
    lib = ctypes.CDLL(path)
    lib.memreplay_stats_json.argtypes = [ctypes.c_int]
    lib.memreplay_stats_json.restype = ctypes.c_void_p  # char*, freed with memreplay_free_string
    lib.memreplay_free_string.argtypes = [ctypes.c_void_p]
    lib.memreplay_free_string.restype = None
    lib.memreplay_write_trace.argtypes = [ctypes.c_char_p]
    lib.memreplay_write_trace.restype = ctypes.c_int
    lib.memreplay_write_snapshot.argtypes = [ctypes.c_char_p]
    lib.memreplay_write_snapshot.restype = ctypes.c_int
    lib.memreplay_last_error.argtypes = []
    lib.memreplay_last_error.restype = ctypes.c_char_p
    return lib


def use_memreplay(lib_path=None, alloc_conf=None, record=None, trace_path=None, max_entries=None):
    """Make libmemreplay PyTorch's CUDA allocator. Call it before anything
    touches CUDA memory (the first CUDA tensor initialises the allocator,
    after which PyTorch refuses to swap it).

    alloc_conf: settings in PYTORCH_CUDA_ALLOC_CONF syntax (sets
        MEMREPLAY_ALLOC_CONF); None keeps the environment's, which falls back
        to PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF.
    record: record every allocator decision for write_trace() /
        write_snapshot() (MEMREPLAY_RECORD=1).
    trace_path: record, and write the trace there at interpreter exit
        (MEMREPLAY_TRACE); write_trace() with no path writes there too.
    max_entries: events kept per device while recording
        (MEMREPLAY_MAX_ENTRIES; default 1,000,000, 0 unbounded).

    The library reads these variables once, when it is loaded, so they are
    set here before loading it. Returns the CUDAPluggableAllocator.
    """
    global _lib, _allocator
    if _allocator is not None:
        return _allocator
    import torch

    if torch.cuda.is_initialized():
        raise RuntimeError(
            "use_memreplay() must run before CUDA is initialised (before the first "
            "CUDA tensor): PyTorch cannot swap an initialised allocator"
        )
    path = library_path(lib_path)
    if alloc_conf is not None:
        os.environ["MEMREPLAY_ALLOC_CONF"] = alloc_conf
    if trace_path:
        os.environ["MEMREPLAY_TRACE"] = os.path.abspath(trace_path)
    elif record:
        os.environ["MEMREPLAY_RECORD"] = "1"
    if max_entries is not None:
        os.environ["MEMREPLAY_MAX_ENTRIES"] = str(int(max_entries))
    lib = _load(path)  # the library copies the environment now

    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "memreplay_malloc", "memreplay_free")
    raw = alloc.allocator()  # torch._C._CUDAPluggableAllocator
    for setter, symbol in _HOOKS:
        fn = getattr(raw, setter, None)
        if fn is None:  # not bound in this torch: PyTorch then skips the hook
            print(f"memreplay_torch: this torch has no {setter}; {symbol} is not wired", file=sys.stderr)
            continue
        fn(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)
    torch.cuda.memory.change_current_allocator(alloc)
    _lib, _allocator = lib, alloc
    if os.environ.get("MEMREPLAY_TRACE"):
        atexit.register(_write_trace_at_exit)
    return alloc


def _loaded():
    if _lib is None:
        raise RuntimeError("call use_memreplay() first")
    return _lib


def last_error():
    """The most recent failure's message from the library ("" if none)."""
    return _loaded().memreplay_last_error().decode("utf-8", "replace")


def stats(device=0):
    """torch.cuda.memory_stats(device) for memreplay: a dict of PyTorch's
    flattened keys ("reserved_bytes.all.peak", "num_alloc_retries", ...)."""
    lib = _loaded()
    p = lib.memreplay_stats_json(int(device))
    if not p:
        raise RuntimeError("memreplay_stats_json: " + last_error())
    try:
        return json.loads(ctypes.string_at(p).decode("utf-8"))
    finally:
        lib.memreplay_free_string(p)


def _path_arg(path):
    return None if path is None else os.fsencode(path)


def write_trace(path=None):
    """Write the recording as a memreplay trace (replay it with
    `memreplay replay --check PATH`). path None: $MEMREPLAY_TRACE."""
    if _loaded().memreplay_write_trace(_path_arg(path)) != 0:
        raise RuntimeError("memreplay_write_trace: " + last_error())


def write_snapshot(path=None):
    """Write a PyTorch memory snapshot pickle (what _dump_snapshot writes:
    open it at pytorch.org/memory_viz). Without a recording it holds the
    segments only. path None: $MEMREPLAY_SNAPSHOT."""
    if _loaded().memreplay_write_snapshot(_path_arg(path)) != 0:
        raise RuntimeError("memreplay_write_snapshot: " + last_error())


def _write_trace_at_exit():
    try:
        write_trace()
    except Exception as e:  # at exit: report, never raise
        print(f"memreplay_torch: {e}", file=sys.stderr)
