"""calibration.py: oscar-cov's rotations fitted on a calibration passage, as a library call. The passage runs through the
model once (capture.write_dump into an in-memory HDF5 dump, nothing on disk) and the C++ reference fits the matrices:
oscar-rotate --calib - --out - reads the dump's file image on stdin and writes the rotations file's image on stdout
(its messages on stderr)."""
import io
import os
import shutil
import subprocess
import sys
import tempfile

from .. import _capi
from . import capture
from .cache import load_rotations

CALIBRATED = ("oscar-cov", "oscar-cov-head")
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tool_path(name):
    """An oscar-kv command-line tool, found without environment variables: installed with this package (oscar_kv/bin/,
    pip install copies it there from the build), beside the kernels library this package loads (its build folder's
    apps/, or an installation's bin/ next to lib/), OSCAR_BUILD/apps/, or PATH. Else one FileNotFoundError saying how
    to get it."""
    lib = _capi.default_library_path()
    cands = [os.path.join(PACKAGE_DIR, "bin", name), str(lib.parent.parent / "apps" / name),
             str(lib.parent.parent / "bin" / name)]
    if os.environ.get("OSCAR_BUILD"):
        cands.append(os.path.join(os.environ["OSCAR_BUILD"], "apps", name))
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(f"{name}: not installed with oscar_kv, not beside {lib} and not on PATH; build it "
                            f"(cmake --build build --target {name}) and reinstall the package (pip install kernels/python), "
                            "or put the build's apps/ folder on PATH")


def _model_name(model):
    return os.path.basename(os.path.normpath(getattr(model.config, "_name_or_path", "") or "model"))


def calibration_dump(model, ids, name, progress=None):
    """The file image (bytes) of the dump of passage `ids` that calibrate() hands to oscar-rotate: float32 tensors,
    no pre-RoPE ones, chunks of 1024 tokens (as experiments/hf_dump.py --no-pre-rope --check off writes it)."""
    import h5py
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        capture.write_dump(model, ids, f, name, text_source="calibration passage (token ids)", progress=progress)
    return buf.getvalue()


def _fit(tool, dump, recipe, quiet):
    """oscar-rotate's rotations file image for the dump image `dump`."""
    cmd = [tool, "--calib", "-", "--recipe", recipe, "--out", "-"] + (["--quiet"] if quiet else [])
    r = subprocess.run(cmd, input=dump, stdout=subprocess.PIPE, stderr=subprocess.PIPE if quiet else None)
    if r.returncode != 0:
        msg = (r.stderr or b"").decode(errors="replace").strip() or f"exit status {r.returncode}"
        raise RuntimeError(f"oscar-rotate failed: {msg}")
    return r.stdout


def _labelled(image, label):
    """The rotations image with its `calibration` attribute (oscar-rotate records its --calib argument, here '-')
    naming the passage instead; the token ids themselves are in /calibration_token_ids."""
    import h5py
    buf = io.BytesIO(image)
    with h5py.File(buf, "r+") as f:
        f.attrs["calibration"] = label
    return buf.getvalue()


def _write_atomic(path, data):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp made it 0600; the file gets an ordinary file's mode
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def calibrate(model, token_ids, out=None, recipe="oscar-cov", name=None, quiet=True):
    """Fits oscar-cov's rotations (recipe "oscar-cov": one pair per layer; "oscar-cov-head": one per KV head) on the
    calibration passage `token_ids` (ints) run through `model`, by the C++ reference (oscar-rotate, found by
    tool_path). Returns the per-layer (R_K, R_V) as load_rotations returns them (OscarCache takes them as rotations=);
    writes the rotations file to `out` (atomically) when given. name: the model's name in the file's `calibration`
    attribute (default: its folder's); quiet=False shows the capture's and oscar-rotate's progress on stderr."""
    if recipe not in CALIBRATED:
        raise ValueError(f"recipe {recipe!r}: only {' and '.join(CALIBRATED)} are calibrated")
    if out is not None:
        folder = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise ValueError(f"{out}: the folder {folder} does not exist or is not writable; create it first")
    tool = tool_path("oscar-rotate")
    ids = [int(t) for t in token_ids]
    name = name or _model_name(model)
    progress = None if quiet else (lambda done, T, secs: print(f"  {done}/{T} tokens, {secs:.0f} s", file=sys.stderr))
    image = _fit(tool, calibration_dump(model, ids, name, progress), recipe, quiet)
    image = _labelled(image, f"{name}: {len(ids)}-token passage through oscar_kv.hf.calibrate (dump not kept)")
    rot = load_rotations(io.BytesIO(image), model, per_head=(recipe == "oscar-cov-head"), name="oscar-rotate's output")
    if out is not None:
        _write_atomic(out, image)
    return rot
