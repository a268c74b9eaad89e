#!/usr/bin/env python3
"""reproducible_check.py BUILD ROOT: the numbers a calibrated recipe rests on do not depend on how many threads ran.

Dumps 512 tokens of Genesis through kjv-llama-hd128 (head_dim 128, products long enough for Eigen to split their
sums) and fits OSCAR's per-KV-head rotations on the dump (oscar-rotate), once with one thread and once with two
(OMP_NUM_THREADS), then compares every dataset and attribute of the two dumps and of the two rotation files bit for
bit. A build that let Eigen thread its own products (its threaded path splits the sums differently) fails here;
CMakeLists.txt says how the host code is kept machine-independent. Exit 77 (skipped) without h5py.
"""
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
except ImportError:
    print("OSCAR-SKIPPED: h5py or numpy is not installed (bash .ci/setup installs python3-h5py)")
    sys.exit(77)


def run(args, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    subprocess.run(args, check=True, env=env, stdout=subprocess.DEVNULL)


def contents(path):
    """Every attribute and dataset of an HDF5 file, as bytes, by name."""
    out = {}

    def as_bytes(value):
        a = np.asarray(value)
        return repr(a.tolist()).encode() if a.dtype == object else a.tobytes()  # strings by value, not by pointer

    def visit(name, obj):
        for key, value in obj.attrs.items():
            out[f"{name}@{key}"] = as_bytes(value)
        if isinstance(obj, h5py.Dataset):
            out[name] = as_bytes(obj[()])

    with h5py.File(path, "r") as f:
        visit("/", f)
        f.visititems(visit)
    return out


def differences(a, b):
    ca, cb = contents(a), contents(b)
    names = sorted(set(ca) | set(cb))
    return [n for n in names if ca.get(n) != cb.get(n)]


def main():
    build, root = sys.argv[1], sys.argv[2]
    apps = os.path.join(build, "apps")
    model = os.path.join(root, "data/kjv-llama-hd128/kjv-llama-hd128.f16")
    tok = os.path.join(root, "data/stories260K/tok512.bin")
    text = os.path.join(root, "data/text/kjv.txt.gz")
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for threads in (1, 2):
            dump = os.path.join(tmp, f"genesis-{threads}.h5")
            run([f"{apps}/oscar-dump", "--quiet", "--model", model, "--tokenizer", tok, "--text", text, "--offset", "0",
                 "--tokens", "512", "--out", dump], threads)
            # both fits read the one-thread dump, so that the fit is compared on equal inputs
            run([f"{apps}/oscar-rotate", "--quiet", "--calib", os.path.join(tmp, "genesis-1.h5"), "--recipe",
                 "oscar-cov-head", "--out", os.path.join(tmp, f"rot-{threads}.h5")], threads)
        for what in ("genesis", "rot"):
            diff = differences(os.path.join(tmp, f"{what}-1.h5"), os.path.join(tmp, f"{what}-2.h5"))
            label = "dumps" if what == "genesis" else "rotation fits"
            if diff:
                failed = True
                print(f"FAIL: the {label} differ between 1 and 2 threads in {len(diff)} entries, e.g. {diff[:4]}")
            else:
                print(f"ok: the {label} are equal bit for bit on 1 and 2 threads")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
