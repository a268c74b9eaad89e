"""oscar_kv: Python access to oscar-kv's CUDA kernel library (liboscar_kernels.so) through its C API.

For now the ctypes layer only (_capi): loading the library, the two cache structs, cache allocation
through oscar_cov_cache_create / oscar_omni_cache_create, and C status codes raised as OscarError with
the library's message.
"""
from ._capi import (  # noqa: F401
    COV_RECENT,
    COV_SINK,
    CovCache,
    Error,
    Kernels,
    OmniCache,
    OscarError,
    ROTATION_HADAMARD,
    ROTATION_MATRIX,
    ROTATION_NONE,
    Rotation,
    default_library_path,
    load,
)
