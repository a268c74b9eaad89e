"""gpu_python.py: what the Python GPU tests share: require() puts the checkout's oscar_kv on the path and exits 77
(CTest's skip) with one line when torch, another module named, a CUDA device or the kernels library is missing;
check() and finish() are python_checks' (a failure recorded and printed; the tally and the exit status).
"""
import sys
from pathlib import Path

from python_checks import check, failures, finish  # noqa: F401  (the GPU tests take them from here)

__all__ = ["check", "failures", "finish", "require"]


def require(*modules):
    """The oscar_kv package once torch (and `modules`), a CUDA device and the library are there; else exit 77."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    for m in ("torch",) + modules:
        try:
            __import__(m)
        except ImportError:
            print(f"SKIP: {m} not installed")
            sys.exit(77)
    import torch
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        sys.exit(77)
    import oscar_kv
    try:
        oscar_kv.load()
    except FileNotFoundError as e:
        print(f"SKIP: {e}")
        sys.exit(77)
    return oscar_kv

