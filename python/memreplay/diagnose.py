"""Why a trial ran out of GPU memory: from PyTorch's OOM message (which
libmemreplay's allocator writes word for word) and, where given, the
allocator's statistics.

Three causes, in the order they are tested:

- fragmentation: the process had at least the requested bytes reserved but
  unallocated, in pieces none of which was large enough; the BERT-family study's trial 268
  ("1.41 GiB reserved but unallocated"). Expandable segments map the pieces
  into one range and memreplay's stitch policy joins them, so either would
  have served the request.
- other processes: the GPU's memory not held by this process (other trials,
  their caches, other users) left too little, although this process's use
  plus the request fits the device with one CUDA context to spare: the trial
  would have fit alone, so the fault is the packing (a gate with a smaller
  share, or fewer trials at once).
- capacity: the trial needs more than the device has, alone.
"""

import re

from .sizes import format_size, parse_pytorch_size

__all__ = ["diagnose", "parse_oom_message", "is_oom", "is_sticky"]

_SIZE = r"([0-9.]+ (?:bytes|KiB|MiB|GiB|TiB))"
_FIELDS = {
    "tried": re.compile(r"Tried to allocate " + _SIZE),
    "total": re.compile(r"total capacity of " + _SIZE),
    "free": re.compile(r"of which " + _SIZE + r" is free"),
    "allowed": re.compile(_SIZE + r" allowed;"),
    "allocated": re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch"),
    "reserved_unallocated": re.compile(_SIZE + r" is reserved by PyTorch but unallocated"),
}

# One CUDA context, what a process costs the device before any tensor
# (gpu.DefaultContextOverhead in the simulator).
CONTEXT_BYTES = 500 << 20


def parse_oom_message(msg):
    """The figures of PyTorch's "CUDA out of memory. Tried to allocate ..."
    message as bytes; a key is absent when the message lacks it."""
    out = {}
    for k, rx in _FIELDS.items():
        m = rx.search(msg)
        if m:
            out[k] = parse_pytorch_size(m.group(1))
    return out


def is_oom(exc):
    """Whether exc is a CUDA out-of-memory error (torch.OutOfMemoryError,
    or any error carrying PyTorch's message)."""
    name = type(exc).__name__
    return name in ("OutOfMemoryError",) or "out of memory" in str(exc).lower()


_STICKY = re.compile(
    r"device-side assert|illegal memory access|illegal address|cudaErrorAssert|cudaErrorIllegalAddress|"
    r"CUDA_ERROR_ILLEGAL_ADDRESS|CUDA_ERROR_ASSERT|unspecified launch failure|cudaErrorLaunchFailure|"
    r"CUDA_ERROR_LAUNCH_FAILED|misaligned address",
    re.IGNORECASE,
)


def is_sticky(exc):
    """Whether exc is a sticky CUDA error: the process's context is
    corrupted and every later CUDA call fails (seed 004)."""
    return bool(_STICKY.search(str(exc)))


def diagnose(msg, stats=None, context_bytes=CONTEXT_BYTES):
    """A dict: kind ("fragmentation", "other processes", "capacity" or
    "unknown"), text (one sentence for a person), and the figures used."""
    f = parse_oom_message(msg)
    stats = stats or {}
    if "allocated" not in f and "allocated_bytes.all.current" in stats:
        f["allocated"] = stats["allocated_bytes.all.current"]
    if "reserved_unallocated" not in f and "reserved_bytes.all.current" in stats:
        f["reserved_unallocated"] = stats["reserved_bytes.all.current"] - stats.get("allocated_bytes.all.current", 0)
    tried = f.get("tried")
    if tried is None:
        return dict(f, kind="unknown", text="out of memory; the message gives no size to diagnose from: " + msg[:200])
    unalloc = f.get("reserved_unallocated", 0)
    allocated = f.get("allocated", 0)
    ours = allocated + unalloc
    total = f.get("allowed") or f.get("total")
    if unalloc >= tried:
        kind = "fragmentation"
        text = (f"{format_size(unalloc)} reserved but unallocated, more than the {format_size(tried)} asked; "
                "expandable_segments:True or --policy stitch would have fit it")
    elif total is not None and "free" in f:
        others = max(0, f["total"] - f["free"] - ours)
        if ours + tried + context_bytes <= total and others > context_bytes:
            kind = "other processes"
            text = (f"other processes hold {format_size(others)} of the GPU's {format_size(f['total'])}; "
                    f"this trial holds {format_size(ours)} and asked {format_size(tried)} more, which fits the GPU alone: "
                    "run fewer trials at once or give each a smaller share")
        else:
            kind = "capacity"
            text = (f"this trial holds {format_size(ours)} and asked {format_size(tried)} more: over the "
                    f"{format_size(total)} it may use even alone; a smaller batch, checkpointing or fp16 would shrink it")
    else:
        kind = "capacity"
        text = f"asked {format_size(tried)} with {format_size(ours)} held; the message gives no capacity to compare with"
    return dict(f, kind=kind, text=text)
