from . import memory  # noqa: F401

_initialized = False


def is_initialized():
    return _initialized
