"""Byte sizes as users write them ("24GiB", "500MiB", 1 << 30) and as
PyTorch prints them ("1.41 GiB")."""

import re

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "bytes": 1}


def parse_size(s):
    """Bytes from an int or a string such as "24GiB", "1.5 GiB", "500MB"."""
    if isinstance(s, bool):
        raise ValueError(f"size {s!r}: want bytes or a string such as 24GiB")
    if isinstance(s, int):
        if s < 0:
            raise ValueError(f"size {s}: must not be negative")
        return s
    if isinstance(s, float):
        if s < 0 or s != s:
            raise ValueError(f"size {s}: must not be negative")
        return int(s)
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", str(s))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"size {s!r}: want a number with B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_size(n):
    """Bytes below 1 KiB, then KiB, MiB, GiB with two decimals."""
    n = int(n)
    if n < 1024:
        return f"{n} bytes"
    for unit, div in (("KiB", 1 << 10), ("MiB", 1 << 20)):
        if n < div * 1024:
            return f"{n / div:.2f} {unit}"
    return f"{n / (1 << 30):.2f} GiB"


_PYTORCH = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(bytes|KiB|MiB|GiB|TiB)")


def parse_pytorch_size(s):
    """Bytes from PyTorch's printed size ("1.41 GiB", "512 bytes"); None if
    s is not one."""
    m = _PYTORCH.fullmatch(s.strip())
    if not m:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
