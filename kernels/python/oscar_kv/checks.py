"""checks.py: the argument checks of oscar_kv's cache objects, in pure Python (no torch, no GPU needed).

Contract: every check raises ValueError whose message names the argument, what it got, what the kernels take
and what to do. Tensors are read duck-typed (shape, dtype, device, is_contiguous()), so the checks run on torch
tensors of any device and on CPU-only machines.
"""

import numbers

FORMATS = ("oscar-cov", "oscar-omni")
# The recipes the kernels decode (oscar_kv.hf.OscarCache; oscar-cov-head: oscar-cov with one rotation per KV head) and
# the bit widths they store; oscar-eval (the C++ reference) runs the other presets.
RECIPES = ("oscar-omni", "oscar-cov", "oscar-cov-head")
BITS = (2, 4)


def _dtype_name(t):
    return str(getattr(t, "dtype", type(t).__name__)).replace("torch.", "")


def _device_of(t):
    dev = getattr(t, "device", None)
    return "cpu" if dev is None else str(dev)


def describe(t):
    shape = tuple(getattr(t, "shape", ()))
    return f"{_dtype_name(t)} {list(shape)} on {_device_of(t)}"


def check_tensor(name, t, dtype, shape, device=None, what=""):
    """`t` must have dtype name `dtype` ("bfloat16", "float32", "int32"), `shape` (ints, None = any), live on
    `device` (a "cuda:N" string; None: any CUDA device) and be contiguous."""
    want = "[" + "][".join("*" if s is None else str(s) for s in shape) + "]"
    if not hasattr(t, "shape") or not hasattr(t, "dtype"):
        raise ValueError(f"{name}: got {type(t).__name__}, expected a torch tensor {dtype} {want}{what}")
    got_shape = tuple(int(s) for s in t.shape)
    if len(got_shape) != len(shape) or any(s is not None and g != s for g, s in zip(got_shape, shape)):
        raise ValueError(f"{name}: shape {list(got_shape)}, expected {want}{what}; reshape or slice it to that")
    if _dtype_name(t) != dtype:
        raise ValueError(f"{name}: dtype {_dtype_name(t)}, the kernels take {dtype}; convert it with .to(torch.{dtype})")
    dev = _device_of(t)
    if not dev.startswith("cuda"):
        raise ValueError(f"{name}: on {dev}; the kernels run on a CUDA device: move it with .cuda()")
    if device is not None and dev != device and not (dev == "cuda" and device == "cuda:0"):
        raise ValueError(f"{name}: on {dev}, the cache lives on {device}; move it there")
    if not t.is_contiguous():
        raise ValueError(f"{name}: not contiguous (strides {tuple(t.stride())}); pass .contiguous()")


def whole(name, v, most=2**31 - 2):
    """v as a Python int in [1, most], from any integral type (int, numpy and torch integers); else one ValueError."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        if hasattr(v, "item") and getattr(v, "ndim", 1) == 0 and not isinstance(v.item(), (float, bool)):
            v = v.item()  # a 0-d integer tensor or array
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ValueError(f"{name}: {v!r}; give a positive integer")
    v = int(v)
    if v < 1 or v > most:
        raise ValueError(f"{name}: {v}; give a positive integer of at most {most} (the kernels count in int32)")
    return v


class CacheSpec:
    """The shapes of one quantized cache (either format), checked without a GPU; the cache objects hold one.

    fmt: "oscar-cov" or "oscar-omni"; bits: 2 or 4; head_dim and query grouping as the library's tables say
    (`lib` is the loaded oscar_kv.Kernels, used only for its shape queries, which need no GPU)."""

    def __init__(self, lib, fmt, batch, num_kv_heads, head_dim, bits, capacity, num_q_heads):
        if fmt not in FORMATS:
            raise ValueError(f"format {fmt!r}: unknown; the kernels implement {', '.join(FORMATS)}")
        # ints of any kind (numpy's, torch's 0-d) taken as Python ints; floats and bools refused. The C API counts
        # in int32: larger values would be truncated by ctypes, so they are refused here.
        batch, num_kv_heads, head_dim, capacity, num_q_heads = (
            whole("batch", batch), whole("num_kv_heads", num_kv_heads), whole("head_dim", head_dim),
            whole("capacity", capacity), whole("num_q_heads", num_q_heads))
        if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or int(bits) not in BITS:
            raise ValueError(f"bits: {bits!r}; the kernels store 2 or 4 bits (an integer)")
        bits = int(bits)
        supported = lib.dll.oscar_cov_shape_supported if fmt == "oscar-cov" else lib.dll.oscar_omni_shape_supported
        if not supported(head_dim, bits):
            hds = [d for d in (32, 64, 96, 128, 160, 192, 256, 512) if supported(d, bits)]
            raise ValueError(f"head_dim {head_dim}: {fmt} kernels are compiled for head_dim "
                             f"{', '.join(map(str, hds))} at {bits} bits; this layer must use an ordinary cache")
        group_max = lib.dll.oscar_max_query_group()
        if num_q_heads % num_kv_heads:
            raise ValueError(f"num_q_heads {num_q_heads}: not a multiple of num_kv_heads {num_kv_heads}")
        if num_q_heads // num_kv_heads > group_max:
            raise ValueError(f"num_q_heads {num_q_heads} over {num_kv_heads} KV heads: "
                             f"{num_q_heads // num_kv_heads} query heads per KV head, the kernels take at most {group_max}")
        self.fmt, self.batch, self.num_kv_heads, self.head_dim = fmt, batch, num_kv_heads, head_dim
        self.bits, self.capacity, self.num_q_heads = bits, capacity, num_q_heads
        self.device = None  # "cuda:N" once allocated

    def __repr__(self):
        return (f"{self.fmt}@{self.bits} [batch {self.batch}][{self.num_kv_heads} KV heads][capacity {self.capacity}]"
                f"[head_dim {self.head_dim}], {self.num_q_heads} query heads")

    def check_prefill(self, k, v, lengths=None):
        B, H, D = self.batch, self.num_kv_heads, self.head_dim
        for name, t in (("k", k), ("v", v)):
            check_tensor(name, t, "bfloat16", (B, H, None, D), self.device, " ([batch][kv_heads][tokens][head_dim])")
        L = int(k.shape[2])
        if tuple(v.shape) != tuple(k.shape):
            raise ValueError(f"v: shape {list(v.shape)} differs from k's {list(k.shape)}")
        if L > self.capacity:
            raise ValueError(f"k: {L} tokens, the cache holds {self.capacity}; create it with a larger capacity "
                             "(OscarCache: max_cache_len)")
        if lengths is not None and not isinstance(lengths, (list, tuple)):
            check_tensor("lengths", lengths, "int32", (B,), self.device, " (tokens of each sequence)")
        if isinstance(lengths, (list, tuple)):
            if len(lengths) != B or any((not isinstance(n, int)) or n < 0 or n > L for n in lengths):
                raise ValueError(f"lengths: {list(lengths)}; give {B} integers in [0, {L}]")
        return L

    def check_append(self, k_new, v_new, max_len):
        B, H, D = self.batch, self.num_kv_heads, self.head_dim
        for name, t in (("k_new", k_new), ("v_new", v_new)):
            check_tensor(name, t, "bfloat16", (B, H, D), self.device, " ([batch][kv_heads][head_dim])")
        if max_len + 1 > self.capacity:
            raise ValueError(f"append: the cache is full ({self.capacity} tokens per sequence); create it with a larger "
                             "capacity (OscarCache: max_cache_len)")

    def check_logits(self, softcap, sinks):
        """The logit modifiers (oscar_decode_options' softcap and sinks): softcap a finite number >= 0 (0 = none); sinks
        None or a tensor [num_q_heads] (one logit per query head; any float dtype and device: the cache keeps a float32
        copy)."""
        import math
        if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not math.isfinite(softcap) or softcap < 0:
            raise ValueError(f"softcap: {softcap!r}; give a finite number >= 0 (the model's attention soft-capping; 0 = none)")
        if sinks is not None:
            if not hasattr(sinks, "shape") or tuple(int(s) for s in sinks.shape) != (self.num_q_heads,):
                raise ValueError(f"sinks: {describe(sinks) if hasattr(sinks, 'shape') else type(sinks).__name__}, expected a "
                                 f"tensor [{self.num_q_heads}] (one sink logit per query head)")
            if not _dtype_name(sinks).startswith(("float", "bfloat")):
                raise ValueError(f"sinks: dtype {_dtype_name(sinks)}; give floating-point logits")

    def check_decode(self, q, out):
        B, Hq, D = self.batch, self.num_q_heads, self.head_dim
        check_tensor("q", q, "bfloat16", (B, Hq, D), self.device, " ([batch][q_heads][head_dim])")
        if out is not None:
            check_tensor("out", out, "float32", (B, Hq, D), self.device, " ([batch][q_heads][head_dim])")
