"""gpu_python.py: what the Python GPU tests share: require() puts the checkout's oscar_kv on the path and exits 77
(CTest's skip) with one line when torch, another module named, a CUDA device or the kernels library is missing;
check() records a failure and prints it; finish() prints the tally and gives the exit status (0 passed, 1 failed).
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
failures = []


def require(*modules):
    """The oscar_kv package once torch (and `modules`), a CUDA device and the library are there; else exit 77."""
    sys.path.insert(0, str(ROOT / "kernels" / "python"))
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


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def finish():
    print(f"{len(failures)} failures" if failures else "all passed")
    return 1 if failures else 0
