import ctypes

current = None  # the allocator passed to change_current_allocator


class _RawPluggable:
    """torch._C._CUDAPluggableAllocator: the hooks are raw addresses."""

    def __init__(self, alloc_fn, free_fn):
        self.alloc_fn, self.free_fn = alloc_fn, free_fn
        self.hooks = {}

    def set_init_fn(self, addr):
        self.hooks["init"] = addr

    def set_reset_fn(self, addr):
        self.hooks["reset"] = addr

    def set_memory_fraction_fn(self, addr):
        self.hooks["memory_fraction"] = addr

    def set_record_stream_fn(self, addr):
        self.hooks["record_stream"] = addr


class CUDAPluggableAllocator:
    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        allocator = ctypes.CDLL(path_to_so_file)
        alloc_fn = ctypes.cast(getattr(allocator, alloc_fn_name), ctypes.c_void_p).value
        free_fn = ctypes.cast(getattr(allocator, free_fn_name), ctypes.c_void_p).value
        assert alloc_fn is not None and free_fn is not None
        self._allocator = _RawPluggable(alloc_fn, free_fn)

    def allocator(self):
        return self._allocator


def change_current_allocator(allocator):
    global current
    from .. import cuda

    if cuda._initialized:
        raise RuntimeError("Can't swap an already initialized allocator")
    current = allocator
