#!/usr/bin/env python3
"""hf_dump.py: command-line entry of oscar_kv.hf_dump (kernels/python/oscar_kv/hf_dump.py, which documents it):
oscar-kv dump format v2 from a Hugging Face causal LM. Imported as a module, this file is that module."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels" / "python"))
from oscar_kv import hf_dump as _impl  # noqa: E402

if __name__ == "__main__":
    _impl.run()
else:
    sys.modules[__name__] = _impl
