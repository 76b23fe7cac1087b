"""A stand-in for torch, for testing python/memreplay_torch.py where PyTorch
is not installed (cmd/libmemreplay's TestPythonHelper). It has only what the
helper touches, shaped as in PyTorch 2.x: torch.cuda.is_initialized and
torch.cuda.memory's CUDAPluggableAllocator (which, like PyTorch's, loads the
library with ctypes and keeps the two function addresses) with an
allocator() whose set_*_fn setters take raw function addresses, as
torch._C._CUDAPluggableAllocator's do, and change_current_allocator."""
from . import cuda  # noqa: F401
