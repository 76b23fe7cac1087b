"""Drives python/memreplay_torch.py against the stand-in torch of
testdata/faketorch and libmemreplay.so on the fake CUDA driver, calling the
allocator through the addresses the helper handed to "PyTorch", with the
ctypes types of PyTorch's std::function signatures. Prints one line per
check for TestPythonHelper. Usage: python_helper.py REPO LIB TRACE SNAPSHOT"""
import ctypes
import os
import sys

repo, lib, trace, snapshot = sys.argv[1:5]
sys.path.insert(0, os.path.join(repo, "cmd", "libmemreplay", "testdata", "faketorch"))
sys.path.insert(0, os.path.join(repo, "python"))

import torch  # the stand-in
import memreplay_torch as mt

alloc = mt.use_memreplay(lib_path=lib, alloc_conf="expandable_segments:True", record=True)
assert torch.cuda.memory.current is alloc
assert mt.use_memreplay() is alloc, "a second call is a no-op"
raw = alloc.allocator()
print("hooks", ",".join(sorted(raw.hooks)))

MALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
INIT = ctypes.CFUNCTYPE(None, ctypes.c_int)
RESET = ctypes.CFUNCTYPE(None)
FRACTION = ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.c_int)
RECORD = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
malloc, free = MALLOC(raw.alloc_fn), FREE(raw.free_fn)

INIT(raw.hooks["init"])(1)
a = malloc(30 << 20, 0, None)
b = malloc(30 << 20, 0, None)
print("contiguous", b - a == 30 << 20)  # expandable_segments:True from alloc_conf
ctypes.memset(a, 0x5A, 30 << 20)
print("written", ctypes.string_at(a + (30 << 20) - 4, 4) == b"\x5a" * 4)
RECORD(raw.hooks["record_stream"])(b, 7)
free(b, 30 << 20, 0, None)
free(a, 30 << 20, 0, None)
RESET(raw.hooks["reset"])()
FRACTION(raw.hooks["memory_fraction"])(0.5, 0)
s = mt.stats(0)
print("stats", s["allocation.all.allocated"], s["allocated_bytes.all.current"], s["reserved_bytes.all.peak"])
free(12345, 0, 0, None)
print("last_error", mt.last_error())
mt.write_trace(trace)
mt.write_snapshot(snapshot)
try:
    mt.write_trace(os.path.join(trace, "no", "such", "dir"))
except RuntimeError as e:
    print("error", str(e).split(":")[0])
print("done")
