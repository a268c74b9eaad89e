"""_capi.py: ctypes binding of the C API in kernels/include/oscar_kernels.h and oscar_kv.h.

Contract: the structs mirror oscar_cov_cache / oscar_omni_cache field for field; every cache is allocated
by the library's own allocator (oscar_cov_cache_create / oscar_omni_cache_create, sizes from the format
units cov_format.h / omni_format.h) and released with the matching destroy; a status other than OSCAR_OK
raises OscarError carrying the status and the library's message. Device pointers are plain integers
(torch's data_ptr(), or a cache field).
"""
import ctypes as C
import os
from pathlib import Path

OSCAR_OK = 0
STATUS_NAMES = {0: "OSCAR_OK", 1: "OSCAR_ERR_INVALID_ARGUMENT", 2: "OSCAR_ERR_UNSUPPORTED", 3: "OSCAR_ERR_MISALIGNED",
                4: "OSCAR_ERR_CUDA", 5: "OSCAR_ERR_NO_DEVICE"}

# oscar-cov defaults (covfmt::kDefaultSink / kDefaultRecent).
COV_SINK, COV_RECENT = 64, 256


class Error(C.Structure):
    """oscar_error: the one-line message a failing call leaves."""
    _fields_ = [("message", C.c_char * 512)]


class Rotation(C.Structure):
    """oscar_rotation (oscar_kv.h): kind 0 none, 1 Hadamard, 2 matrix (key/value: device float32 R_K/R_V pointers)."""
    _fields_ = [("kind", C.c_int32), ("per_head", C.c_int32), ("key", C.c_void_p), ("value", C.c_void_p)]


ROTATION_NONE, ROTATION_HADAMARD, ROTATION_MATRIX = 0, 1, 2


class WriteOptions(C.Structure):
    """oscar_write_options (oscar_kv.h): the options of a prefill, append or paged write (the rotation of the k, v rows).
    Passing None instead is the plain write."""
    _fields_ = [("rotation", Rotation)]


class DecodeOptions(C.Structure):
    """oscar_decode_options (oscar_kv.h): the rotation of q and the output, softcap (> 0: scores -> softcap tanh(s / softcap))
    and sinks (device float32 [num_q_heads] sink logits joining the softmax denominator, or NULL). Passing None instead
    is the plain decode."""
    _fields_ = [("rotation", Rotation), ("softcap", C.c_float), ("sinks", C.c_void_p)]


class CovCache(C.Structure):
    """oscar_cov_cache (oscar_kv.h)."""
    _fields_ = [("batch", C.c_int32), ("num_kv_heads", C.c_int32), ("head_dim", C.c_int32), ("bits", C.c_int32),
                ("sink", C.c_int32), ("recent", C.c_int32), ("body_capacity", C.c_int64),
                ("clip_k", C.c_float), ("clip_v", C.c_float), ("clip_mode", C.c_int32), ("rounding", C.c_int32)] + \
               [(n, C.c_void_p) for n in ("k_sink", "v_sink", "k_recent", "v_recent", "k_codes", "v_codes",
                                          "k_params", "v_params", "arrivals")]


class OmniCache(C.Structure):
    """oscar_omni_cache (oscar_kv.h)."""
    _fields_ = [("batch", C.c_int32), ("num_kv_heads", C.c_int32), ("head_dim", C.c_int32), ("bits", C.c_int32),
                ("body_capacity", C.c_int64)] + \
               [(n, C.c_void_p) for n in ("k_res", "v_res", "k_codes", "v_codes", "k_params", "v_params", "k_norms", "arrivals")]


class CovPaged(C.Structure):
    """oscar_cov_paged (oscar_kv.h): the paged oscar-cov cache of one layer (layout oscar/cov_paged_format.h)."""
    _fields_ = [("num_kv_heads", C.c_int32), ("head_dim", C.c_int32), ("bits", C.c_int32), ("sink", C.c_int32),
                ("recent", C.c_int32), ("page_tokens", C.c_int32), ("num_pages", C.c_int64), ("page_stride", C.c_int64),
                ("num_window_slots", C.c_int32), ("clip_k", C.c_float), ("clip_v", C.c_float), ("clip_mode", C.c_int32),
                ("rounding", C.c_int32)] + [(n, C.c_void_p) for n in ("pages", "k_sink", "v_sink", "k_recent", "v_recent")]


class PagedBatch(C.Structure):
    """oscar_paged_batch (oscar_kv.h): one engine step's sequences (device int32 pointers)."""
    _fields_ = [("num_seqs", C.c_int32), ("seq_lens", C.c_void_p), ("query_start_loc", C.c_void_p),
                ("block_table", C.c_void_p), ("block_table_stride", C.c_int32), ("window_slot", C.c_void_p),
                ("split_tokens", C.c_int32)]


class CovPagedLayout(C.Structure):
    """oscar_cov_paged_layout (oscar_kv.h): the byte sizes and offsets of oscar/cov_paged_format.h for one shape."""
    _fields_ = [(n, C.c_int64) for n in ("code_bytes", "param_bytes", "token_bytes", "region_bytes", "page_bytes", "k_codes_offset",
                                         "v_codes_offset", "k_params_offset", "v_params_offset", "bf16_token_bytes",
                                         "window_slot_bytes")]


class OscarError(RuntimeError):
    """A C API call returned a status other than OSCAR_OK: .status (int), .status_name, .message (the library's)."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = STATUS_NAMES.get(self.status, f"status {self.status}")
        self.message = message
        super().__init__(f"{message} ({self.status_name})")


def default_library_path():
    """OSCAR_KERNELS_LIB; else OSCAR_BUILD/kernels/liboscar_kernels.so; else the liboscar_kernels.so beside this file
    (pip install copies the built one there); else, in an editable install, build/kernels/liboscar_kernels.so of the
    checkout this file lies in, or its newest build folder of another name."""
    env = os.environ.get("OSCAR_KERNELS_LIB")
    if env:
        return Path(env)
    name = "liboscar_kernels.so"
    cands = ([Path(os.environ["OSCAR_BUILD"]) / "kernels" / name] if os.environ.get("OSCAR_BUILD") else []) + \
        [Path(__file__).resolve().parent / name]
    here = Path(__file__).resolve().parents
    if len(here) > 3:  # an editable install: build/ of this checkout, else its newest build folder of another name
        others = sorted(here[3].glob(f"*/kernels/{name}"), key=lambda p: p.stat().st_mtime, reverse=True)
        cands += [here[3] / "build" / "kernels" / name] + others
    for c in cands:
        if c.is_file():
            return c
    return cands[-1]


_vp, _i32, _i64, _f32, _size = C.c_void_p, C.c_int32, C.c_int64, C.c_float, C.c_size_t
_err, _cov, _omni = C.POINTER(Error), C.POINTER(CovCache), C.POINTER(OmniCache)
_wopt, _dopt = C.POINTER(WriteOptions), C.POINTER(DecodeOptions)
_paged, _batch, _playout = C.POINTER(CovPaged), C.POINTER(PagedBatch), C.POINTER(CovPagedLayout)
# name: (restype, argtypes); a status-returning function's last argument is its oscar_error*.
_SIGNATURES = {
    "oscar_status_name": (C.c_char_p, [C.c_int]),
    "oscar_device_count": (C.c_int, []),
    "oscar_cov_shape_supported": (C.c_int, [_i32, _i32]),
    "oscar_omni_shape_supported": (C.c_int, [_i32, _i32]),
    "oscar_max_query_group": (C.c_int, []),
    "oscar_fwht_f32": (C.c_int, [_vp, _i64, _i32, _i32, _vp, _err]),
    "oscar_fwht_bf16": (C.c_int, [_vp, _i64, _i32, _i32, _vp, _err]),
    "oscar_cov_cache_create": (C.c_int, [_cov, _i32, _i32, _i32, _i32, _i32, _i32, _i64, _err]),
    "oscar_cov_cache_bytes": (_i64, [_i32, _i32, _i32, _i32, _i32, _i32, _i64]),
    "oscar_cov_cache_destroy": (C.c_int, [_cov, _err]),
    "oscar_cov_capacity": (_i64, [_cov]),
    "oscar_cov_prefill": (C.c_int, [_cov, _wopt, _vp, _vp, _vp, _i32, _vp, _err]),
    "oscar_cov_append": (C.c_int, [_cov, _wopt, _vp, _vp, _vp, _i32, _vp, _err]),
    "oscar_cov_decode": (C.c_int, [_cov, _dopt, _vp, _i32, _vp, _i32, _f32, _vp, _vp, _size, _vp, _err]),
    "oscar_decode_workspace_bytes": (_size, [_i32, _i32, _i32, _i32, _i32, _i32]),
    "oscar_bf16_decode": (C.c_int, [_vp, _vp, _i32, _i32, _i64, _i32, _vp, _i32, _vp, _i32, _f32, _vp, _vp, _size, _vp, _err]),
    "oscar_omni_cache_create": (C.c_int, [_omni, _i32, _i32, _i32, _i32, _i64, _err]),
    "oscar_omni_cache_bytes": (_i64, [_i32, _i32, _i32, _i32, _i64]),
    "oscar_omni_cache_destroy": (C.c_int, [_omni, _err]),
    "oscar_omni_capacity": (_i64, [_omni]),
    "oscar_omni_prefill": (C.c_int, [_omni, _wopt, _vp, _vp, _vp, _i32, _vp, _err]),
    "oscar_omni_append": (C.c_int, [_omni, _wopt, _vp, _vp, _vp, _i32, _vp, _err]),
    "oscar_omni_decode": (C.c_int, [_omni, _dopt, _vp, _i32, _vp, _i32, _f32, _vp, _vp, _size, _vp, _err]),
    "oscar_cov_paged_layout_of": (C.c_int, [_i32, _i32, _i32, _i32, _i32, _i32, _playout, _err]),
    "oscar_cov_paged_default_rule": (None, [_paged]),
    "oscar_cov_paged_workspace_bytes": (_size, [_i32, _i32, _i32, _i32, _i32, _i32]),
    "oscar_cov_paged_write": (C.c_int, [_paged, _wopt, _batch, _vp, _vp, _i64, _i64, _i32, _vp, _vp, _err]),
    "oscar_cov_paged_decode": (C.c_int, [_paged, _dopt, _batch, _vp, _i32, _i32, _f32, _vp, _vp, _size, _vp, _err]),
}


def check_elf(path):
    """Refuses, before the dynamic loader maps it, a file that is not a 64-bit ELF shared object or that is shorter than
    its own section header table says (a truncated copy: mapping it would kill Python with SIGBUS)."""
    import struct
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(64)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
        raise OSError(f"{path}: is not a 64-bit ELF shared library; point OSCAR_KERNELS_LIB at the built "
                      "liboscar_kernels.so")
    shoff, = struct.unpack_from("<Q", head, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
    if shoff + shentsize * shnum > size:
        raise OSError(f"{path}: is truncated ({size} bytes, its headers say at least {shoff + shentsize * shnum}); "
                      "rebuild it or copy it again")


class Kernels:
    """The loaded library. Attribute access gives the raw C functions (signatures declared); call() runs
    a status-returning one and raises OscarError on failure; the cache helpers allocate and free caches."""

    def __init__(self, path=None):
        self.path = Path(path) if path else default_library_path()
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: the oscar-kv kernel library is not there; build it "
                                    f"(cmake --build build --target oscar_kernels_shared) or set OSCAR_KERNELS_LIB")
        check_elf(self.path)
        try:
            self.dll = C.CDLL(str(self.path))
        except OSError as e:
            raise OSError(f"{self.path}: cannot be loaded as the oscar-kv kernel library ({e}); rebuild it "
                          "(cmake --build build --target oscar_kernels_shared) or fix OSCAR_KERNELS_LIB") from None
        for name, (res, args) in _SIGNATURES.items():
            try:
                f = getattr(self.dll, name)
            except AttributeError:
                raise OSError(f"{self.path}: lacks the function {name}, so it is not the oscar-kv kernel library of this "
                              "package's version; rebuild it and reinstall the package, or fix OSCAR_KERNELS_LIB") from None
            f.restype, f.argtypes = res, args

    def __getattr__(self, name):  # only reached for names the instance lacks: the C functions
        if name == "dll":
            raise AttributeError(name)
        return getattr(self.dll, name)

    def call(self, name, *args):
        """Calls C function `name` with `args` and a fresh oscar_error; raises OscarError unless OSCAR_OK."""
        err = Error()
        status = getattr(self.dll, name)(*args, C.byref(err))
        if status != OSCAR_OK:
            raise OscarError(status, err.message.decode(errors="replace"))

    def device_count(self):
        return self.dll.oscar_device_count()

    def cov_cache_bytes(self, batch, kv_heads, head_dim, bits, capacity, sink=COV_SINK, recent=COV_RECENT):
        return self.dll.oscar_cov_cache_bytes(batch, kv_heads, head_dim, bits, sink, recent, capacity)

    def omni_cache_bytes(self, batch, kv_heads, head_dim, bits, capacity):
        return self.dll.oscar_omni_cache_bytes(batch, kv_heads, head_dim, bits, capacity)

    def cov_cache_create(self, batch, kv_heads, head_dim, bits, capacity, sink=COV_SINK, recent=COV_RECENT):
        """An oscar-cov cache whose (sequence, KV head) rows hold up to `capacity` tokens; free with cov_cache_destroy."""
        c = CovCache()
        self.call("oscar_cov_cache_create", C.byref(c), batch, kv_heads, head_dim, bits, sink, recent, capacity)
        return c

    def cov_cache_destroy(self, cache):
        self.call("oscar_cov_cache_destroy", C.byref(cache))

    def omni_cache_create(self, batch, kv_heads, head_dim, bits, capacity):
        """An oscar-omni cache whose sequences hold up to `capacity` tokens; free with omni_cache_destroy."""
        c = OmniCache()
        self.call("oscar_omni_cache_create", C.byref(c), batch, kv_heads, head_dim, bits, capacity)
        return c

    def omni_cache_destroy(self, cache):
        self.call("oscar_omni_cache_destroy", C.byref(cache))

    def decode_workspace_bytes(self, batch, q_heads, kv_heads, head_dim, max_seq_len, quantized):
        return self.dll.oscar_decode_workspace_bytes(batch, q_heads, kv_heads, head_dim, max_seq_len, int(bool(quantized)))

    def cov_paged_layout(self, page_tokens, kv_heads, head_dim, bits, sink=COV_SINK, recent=COV_RECENT):
        """The paged layout's sizes and offsets of this shape (oscar_cov_paged_layout); OscarError on a shape the paged
        cache refuses."""
        lay = CovPagedLayout()
        self.call("oscar_cov_paged_layout_of", page_tokens, kv_heads, head_dim, bits, sink, recent, C.byref(lay))
        return lay


_loaded = {}


def load(path=None):
    """The library at `path` (default: default_library_path()), loaded once per path."""
    p = Path(path) if path else default_library_path()
    key = str(p.resolve()) if p.exists() else str(p)
    if key not in _loaded:
        _loaded[key] = Kernels(p)
    return _loaded[key]
