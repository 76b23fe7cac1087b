"""libmemreplay.so on the fake CUDA driver, through ctypes, as the trials of
these tests allocate: no PyTorch and no GPU. The Go test that runs this
suite (cmd/libmemreplay/python_test.go) builds both libraries and sets
MEMREPLAY_LIB, MEMREPLAY_LIBCUDA (the fake driver) and FAKECUDA_CAPACITY."""

import ctypes
import json
import os

_lib = None


def available():
    return bool(os.environ.get("MEMREPLAY_LIB") and os.environ.get("MEMREPLAY_LIBCUDA"))


def lib():
    """The library, loaded once per process (its device state is the
    process's, as a CUDA context is)."""
    global _lib
    if _lib is None:
        os.environ.setdefault("MEMREPLAY_OOM", "null")  # NULL on OOM: no C++ runtime to throw through
        l = ctypes.CDLL(os.environ["MEMREPLAY_LIB"])
        l.memreplay_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        l.memreplay_malloc.restype = ctypes.c_void_p
        l.memreplay_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        l.memreplay_free.restype = None
        l.memreplay_stats_json.argtypes = [ctypes.c_int]
        l.memreplay_stats_json.restype = ctypes.c_void_p
        l.memreplay_free_string.argtypes = [ctypes.c_void_p]
        l.memreplay_last_error.restype = ctypes.c_char_p
        l.memreplay_init(1)
        _lib = l
    return _lib


def malloc(size):
    """A device pointer; RuntimeError with the allocator's message (PyTorch's
    OOM text) when it fails, as torch raises OutOfMemoryError."""
    p = lib().memreplay_malloc(size, 0, None)
    if not p:
        raise RuntimeError(lib().memreplay_last_error().decode())
    return p


def free(p, size):
    lib().memreplay_free(p, size, 0, None)


def stats():
    """torch.cuda.memory_stats()'s keys, from the library."""
    p = lib().memreplay_stats_json(0)
    try:
        return json.loads(ctypes.string_at(p).decode())
    finally:
        lib().memreplay_free_string(p)


def empty_cache():
    lib().memreplay_empty_cache()
