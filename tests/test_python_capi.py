#!/usr/bin/env python3
"""test_python_capi.py [LIB]: the Python binding kernels/python/oscar_kv against the built library.

Checks, on any machine: oscar_cov_cache_bytes / oscar_omni_cache_bytes equal the format units' layouts
written out here independently (cov_format.h, omni_format.h: every array rounded up to 16 bytes), bad shapes
give 0 bytes and raise OscarError with the C message on create, a bad oscar_fwht_bf16 call raises with its
message, the options structs (WriteOptions, DecodeOptions) reach the library field for field (each bad field named); without a GPU, creating a cache raises OscarError(OSCAR_ERR_NO_DEVICE) carrying the C message; with
one, the created caches carry the layout's body capacity. Exit 0 passed, 1 failed, 77 skipped (library not
built). LIB defaults to OSCAR_KERNELS_LIB, else build/kernels/liboscar_kernels.so of this checkout.
"""
import ctypes as C
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels" / "python"))
import oscar_kv  # noqa: E402

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}")


def expect_error(fn, status, text, what):
    try:
        fn()
    except oscar_kv.OscarError as e:
        check(e.status == status, f"{what}: status {e.status_name}, expected {oscar_kv._capi.STATUS_NAMES[status]}")
        check(text in e.message and text in str(e), f"{what}: message {e.message!r} lacks {text!r}")
        return e
    check(False, f"{what}: no OscarError raised")


def r16(b):
    return (b + 15) // 16 * 16


def cov_bytes(batch, hkv, hd, bits, sink, recent, cap):  # covfmt::layout, arrays in struct order
    bh = batch * hkv
    body = max(0, cap - sink - recent)
    arrays = [bh * sink * hd * 2] * 2 + [bh * recent * hd * 2] * 2 + [bh * body * hd * bits // 8] * 2 + [bh * body * 4] * 2
    return sum(r16(a) for a in arrays), body


def omni_bytes(batch, hkv, hd, bits, cap):  # omnifmt::layout
    bh = batch * hkv
    need = max(0, cap - 127)
    body = (need + 127) // 128 * 128
    arrays = [bh * 128 * hd * 2] * 2 + [bh * body * hd * bits // 8] * 2 + [bh * (body // 32) * hd * 4,
                                                                            bh * body * (hd // 32) * 4, batch * body * 2]
    return sum(r16(a) for a in arrays), body


def check_options(lib, codes):
    """The options structs as the library reads them: a cache struct over host memory (never dereferenced: every call
    fails its checks first) and options whose one bad field the message must name, so a field at the wrong offset fails."""
    buf = (C.c_uint8 * 8192)()
    base = (C.addressof(buf) + 255) // 256 * 256
    c = oscar_kv.CovCache(batch=2, num_kv_heads=2, head_dim=128, bits=2, sink=64, recent=256, body_capacity=1000, clip_k=0.96,
                          clip_v=0.92, clip_mode=1, rounding=1)
    for i, (name, _) in enumerate(oscar_kv.CovCache._fields_[11:19]):
        setattr(c, name, base + 256 * i)
    k, v, lens, q, out, ws = (base + 256 * i for i in range(8, 14))
    wsb = lib.decode_workspace_bytes(2, 8, 2, 128, 100, 1)
    bad = codes["OSCAR_ERR_INVALID_ARGUMENT"]

    def decode(opts):
        lib.call("oscar_cov_decode", C.byref(c), opts, q, 8, lens, 100, 1.0, out, ws, wsb, None)

    def prefill(opts):
        lib.call("oscar_cov_prefill", C.byref(c), opts, k, v, lens, 10, None)

    expect_error(lambda: decode(C.byref(oscar_kv.DecodeOptions(softcap=float("nan")))), bad, "oscar_cov_decode: options->softcap=nan",
                 "decode options: softcap")
    expect_error(lambda: decode(C.byref(oscar_kv.DecodeOptions(sinks=base + 2))), codes["OSCAR_ERR_MISALIGNED"],
                 "oscar_cov_decode: options->sinks", "decode options: sinks")
    rot = oscar_kv.Rotation(kind=oscar_kv.ROTATION_MATRIX, per_head=2, key=base, value=base)
    expect_error(lambda: decode(C.byref(oscar_kv.DecodeOptions(rotation=rot))), bad, "options->rotation.per_head=2",
                 "decode options: rotation")
    expect_error(lambda: prefill(C.byref(oscar_kv.WriteOptions(rotation=oscar_kv.Rotation(kind=7)))), bad,
                 "oscar_cov_prefill: options->rotation.kind=7", "write options: rotation")
    expect_error(lambda: lib.call("oscar_cov_prefill", C.byref(c), None, k, v, lens, 1321, None), bad, "exceeds the cache capacity 1320",
                 "plain prefill past the capacity")


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else oscar_kv.default_library_path()
    if not path.is_file():
        print(f"SKIP: {path} is not built (cmake --build build --target oscar_kernels_shared)")
        return 77
    lib = oscar_kv.load(path)
    E = oscar_kv._capi.STATUS_NAMES
    codes = {v: k for k, v in E.items()}

    shapes = [(1, 1, 128, 2, 64, 256, 1), (1, 8, 128, 2, 64, 256, 4096), (3, 5, 128, 4, 64, 256, 131072),
              (2, 8, 64, 2, 0, 1, 1000), (32, 8, 128, 4, 64, 256, 131072), (1, 2, 96, 2, 7, 13, 333)]
    for s in shapes:
        b, h, d, bits, sink, recent, cap = s
        want, _ = cov_bytes(*s)
        got = lib.cov_cache_bytes(b, h, d, bits, cap, sink, recent)
        check(got == want, f"oscar_cov_cache_bytes{s} = {got}, layout says {want}")
        want, _ = omni_bytes(b, h, d, bits, cap)
        got = lib.omni_cache_bytes(b, h, d, bits, cap)
        check(got == want, f"oscar_omni_cache_bytes{(b, h, d, bits, cap)} = {got}, layout says {want}")
    # One (sequence, KV head) of oscar-cov INT2 at 128K tokens: BF16 windows (512 B a token) + body (72 B a token).
    check(lib.cov_cache_bytes(1, 1, 128, 2, 131072) == (64 + 256) * 512 + (131072 - 320) * 72, "cov INT2 128K per head")
    for bad in [(0, 8, 128, 2, 100), (1, 0, 128, 2, 100), (1, 8, 100, 2, 100), (1, 8, 128, 3, 100), (1, 8, 128, 2, 0)]:
        check(lib.cov_cache_bytes(*bad) == 0, f"oscar_cov_cache_bytes{bad} should be 0")
        check(lib.omni_cache_bytes(*bad) == 0, f"oscar_omni_cache_bytes{bad} should be 0")
    check(lib.cov_cache_bytes(1, 8, 128, 2, 100, -1, 256) == 0, "negative sink gives 0 bytes")
    # The compiled shapes, from the kernels' dispatch tables (no device needed).
    for hd in (64, 128, 256):
        for bits in (2, 4):
            check(lib.oscar_cov_shape_supported(hd, bits) == 1, f"oscar-cov compiled for head_dim {hd} bits {bits}")
    for hd, bits in [(96, 2), (128, 3), (512, 2)]:
        check(lib.oscar_cov_shape_supported(hd, bits) == 0 and lib.oscar_omni_shape_supported(hd, bits) == 0,
              f"nothing compiled for head_dim {hd} bits {bits}")
    check(lib.oscar_omni_shape_supported(128, 2) == 1, "oscar-omni compiled for head_dim 128")
    check(lib.oscar_max_query_group() == 16, "at most 16 query heads per KV head")
    # Workspace grows with the query groups of 8 (grid z) and the head_dim.
    check(lib.decode_workspace_bytes(1, 16, 1, 128, 4096, 1) == 2 * lib.decode_workspace_bytes(1, 8, 1, 128, 4096, 1),
          "16 query heads per KV head take two query-slot groups")
    check(lib.decode_workspace_bytes(1, 8, 1, 64, 4096, 1) < lib.decode_workspace_bytes(1, 8, 1, 128, 4096, 1), "head_dim 64 needs less")

    # Bad shapes fail before any device is needed, with the C message.
    expect_error(lambda: lib.cov_cache_create(1, 8, 128, 3, 4096), codes["OSCAR_ERR_UNSUPPORTED"],
                 "oscar_cov_cache_create: bits=3", "cov create bits=3")
    expect_error(lambda: lib.omni_cache_create(0, 8, 128, 2, 4096), codes["OSCAR_ERR_INVALID_ARGUMENT"],
                 "oscar_omni_cache_create: batch=0", "omni create batch=0")
    expect_error(lambda: lib.cov_cache_create(1, 8, 128, 2, 4096, sink=64, recent=0), codes["OSCAR_ERR_INVALID_ARGUMENT"],
                 "recent=0", "cov create recent=0")
    expect_error(lambda: lib.call("oscar_fwht_bf16", 4096, 4, 96, 1, None), codes["OSCAR_ERR_UNSUPPORTED"],
                 "oscar_fwht_bf16: head_dim=96", "fwht_bf16 head_dim=96")
    expect_error(lambda: lib.call("oscar_cov_prefill", None, None, None, None, None, 1, None), codes["OSCAR_ERR_INVALID_ARGUMENT"],
                 "cache is NULL", "cov prefill NULL cache")
    check_options(lib, codes)

    if lib.device_count() == 0:
        e = expect_error(lambda: lib.cov_cache_create(2, 8, 128, 2, 4096), codes["OSCAR_ERR_NO_DEVICE"],
                         "oscar_cov_cache_create: no CUDA device is visible", "cov create without a GPU")
        expect_error(lambda: lib.omni_cache_create(2, 8, 128, 4, 4096), codes["OSCAR_ERR_NO_DEVICE"],
                     "oscar_omni_cache_create: no CUDA device is visible", "omni create without a GPU")
        check(e is not None and isinstance(e, RuntimeError) and "OSCAR_ERR_NO_DEVICE" in str(e), "OscarError names its status")
        print("no GPU: create raised", repr(str(e)) if e else None)
    else:
        c = lib.cov_cache_create(2, 8, 128, 2, 4096)
        try:
            check(c.body_capacity == 4096 - 320 and c.sink == 64 and c.recent == 256 and abs(c.clip_k - 0.96) < 1e-6,
                  f"cov cache fields {c.body_capacity} {c.sink} {c.recent} {c.clip_k}")
            check(all(getattr(c, n) % 16 == 0 for n, _ in oscar_kv.CovCache._fields_[11:]), "cov arrays 16-byte aligned")
            check(lib.oscar_cov_capacity(C.byref(c)) == 4096, "cov capacity")
        finally:
            lib.cov_cache_destroy(c)
        check(c.k_sink is None and c.body_capacity == 0, "destroy clears the struct")
        o = lib.omni_cache_create(2, 8, 128, 4, 1000)
        try:
            check(o.body_capacity == omni_bytes(2, 8, 128, 4, 1000)[1], f"omni body_capacity {o.body_capacity}")
            check(lib.oscar_omni_capacity(C.byref(o)) >= 1000, "omni capacity")
        finally:
            lib.omni_cache_destroy(o)
    try:
        oscar_kv.Kernels("/nonexistent/liboscar_kernels.so")
        check(False, "a missing library raises")
    except FileNotFoundError as e:
        check("OSCAR_KERNELS_LIB" in str(e), "missing-library message names OSCAR_KERNELS_LIB")
    print("test_python_capi:", "PASSED" if failures == 0 else f"FAILED ({failures})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
