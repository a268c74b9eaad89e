"""oscar_kv: Python access to oscar-kv's CUDA kernel library (liboscar_kernels.so) through its C API.

Layers: _capi (ctypes: loading the library, the C structs, status codes raised as OscarError with the library's
message), checks (argument checks, no GPU needed), cache (torch-level CovKvCache / OmniKvCache on torch's current
stream, CUDA-graph safe), paged (the paged serving layout in numbers), rotations (oscar-rotate's files), timing
(CUDA-event and CUDA-graph timing). Importing oscar_kv itself needs neither torch nor a GPU. Subpackages, imported
on demand: oscar_kv.hf (the transformers integration: OscarCache, the "oscar_kv" attention function, calibrate; needs
torch and transformers) and oscar_kv.vllm (the vLLM plugin; needs vLLM).
"""
from ._capi import (  # noqa: F401
    COV_RECENT,
    COV_SINK,
    CovCache,
    DecodeOptions,
    Error,
    Kernels,
    OmniCache,
    OscarError,
    ROTATION_HADAMARD,
    ROTATION_MATRIX,
    ROTATION_NONE,
    Rotation,
    WriteOptions,
    default_library_path,
    load,
)
from .cache import CovKvCache, KernelRotation, OmniKvCache  # noqa: F401
from .checks import CacheSpec  # noqa: F401
