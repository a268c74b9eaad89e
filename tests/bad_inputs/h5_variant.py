"""h5_variant.py: what the bad-input fixture scripts share: variant(fix, name, src, edit) copies FIX/SRC (a dump) to
FIX/NAME and applies edit(f) to the copy, opened with h5py for update."""
import os
import shutil

import h5py


def variant(fix, name, src, edit):
    path = os.path.join(fix, name)
    shutil.copyfile(os.path.join(fix, src), path)
    with h5py.File(path, "r+") as f:
        edit(f)
