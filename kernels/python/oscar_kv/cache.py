"""cache.py: torch-level quantized KV caches over the CUDA kernels: CovKvCache (oscar-cov) and OmniKvCache (oscar-omni).

Contract: device memory comes from the format units' allocators (oscar_cov_cache_create / oscar_omni_cache_create);
every call runs on torch's current CUDA stream and is asynchronous; append() and decode() with an explicit
max_seq_len do no host synchronisation and allocate nothing, so they can be captured in a CUDA graph; a bad
argument raises ValueError before any kernel runs; a failing C call raises OscarError with the C message.
Inputs: bf16 K/V [batch][kv_heads][tokens][head_dim] (post-RoPE, unrotated: the rotation is applied in the
kernels), bf16 queries [batch][q_heads][head_dim]; decode returns float32 [batch][q_heads][head_dim], un-rotated.
Logit modifiers (set at creation or with set_logits): softcap (Gemma 2's attention soft-capping) and per-query-head
sink logits (gpt-oss), applied inside the decode kernels (oscar_decode_options).
"""
import ctypes as C

from . import _capi
from .checks import CacheSpec


class KernelRotation:
    """The channel rotation a cache applies in its kernels: none, Hadamard (oscar-omni's), or dense float32 R_K/R_V
    matrices [n][head_dim][head_dim] (n = 1 for one per layer, num_kv_heads for one per KV head; k' = k R_K,
    v' = v R_V) such as oscar-rotate writes for oscar-cov."""

    def __init__(self, kind="none", key=None, value=None):
        if kind not in ("none", "hadamard", "matrix"):
            raise ValueError(f"rotation kind {kind!r}: give none, hadamard or matrix")
        if (kind == "matrix") != (key is not None and value is not None):
            raise ValueError("rotation: kind 'matrix' takes both key and value matrices (and only it does)")
        self.kind, self.key, self.value = kind, key, value

    @staticmethod
    def hadamard():
        return KernelRotation("hadamard")

    @staticmethod
    def matrices(key, value):
        return KernelRotation("matrix", key, value)

    def bind(self, spec, device):
        """The oscar_rotation struct for `spec` on `device` (matrices moved there, float32, contiguous; checked)."""
        import torch
        r = _capi.Rotation()
        r.kind = {"none": _capi.ROTATION_NONE, "hadamard": _capi.ROTATION_HADAMARD, "matrix": _capi.ROTATION_MATRIX}[self.kind]
        keep = []
        if self.kind == "matrix":
            D, H = spec.head_dim, spec.num_kv_heads
            mats = []
            for name, m in (("key rotation", self.key), ("value rotation", self.value)):
                m = torch.as_tensor(m).to(device=device, dtype=torch.float32)
                if m.dim() == 2:
                    m = m.unsqueeze(0)
                if m.dim() != 3 or m.shape[1:] != (D, D) or m.shape[0] not in (1, H):
                    raise ValueError(f"{name}: shape {list(m.shape)}, expected [1 or {H}][{D}][{D}]")
                if not torch.isfinite(m).all():
                    raise ValueError(f"{name}: holds NaN or Inf")
                eye = torch.eye(D, device=device).expand_as(m)
                err = (m.transpose(1, 2) @ m - eye).abs().max().item()
                if err > 1e-4:
                    raise ValueError(f"{name}: not orthogonal (max |R^T R - I| = {err:.2e})")
                mats.append(m.contiguous())
            if mats[0].shape[0] != mats[1].shape[0]:
                raise ValueError("rotation: key and value matrices differ in count (one per layer vs one per KV head)")
            r.per_head = int(mats[0].shape[0] > 1)
            r.key, r.value = mats[0].data_ptr(), mats[1].data_ptr()
            keep = mats
        return r, keep


class _DeviceArray:
    """A raw device array exposed through __cuda_array_interface__ (torch.as_tensor views it without copying)."""

    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (int(ptr), False),
                                         "version": 3, "strides": None}


class _KvCache:
    """Common part of both formats; see the module docstring."""
    _fmt = None

    def __init__(self, batch, num_kv_heads, head_dim, bits, capacity, num_q_heads=None, rotation=None, device=None,
                 lib=None, softcap=0.0, sinks=None):
        try:
            import torch
        except ImportError:
            raise ImportError(f"oscar_kv.{type(self).__name__}: PyTorch is not installed; install it (pip install torch). "
                              "The C layer (oscar_kv.load()) works without it") from None
        self.lib = lib if isinstance(lib, _capi.Kernels) else _capi.load(lib)
        num_q_heads = num_kv_heads if num_q_heads is None else num_q_heads
        self.spec = CacheSpec(self.lib, self._fmt, batch, num_kv_heads, head_dim, bits, capacity, num_q_heads)
        self.spec.check_logits(softcap, sinks)  # before any allocation (set_logits below keeps them)
        self.rotation = rotation if rotation is not None else KernelRotation("none")
        if not isinstance(self.rotation, KernelRotation):
            raise ValueError("rotation: give an oscar_kv.KernelRotation (none, hadamard() or matrices(R_K, R_V))")
        if not torch.cuda.is_available():
            raise _capi.OscarError(5, "no CUDA device: torch sees none; the oscar-kv kernels need an NVIDIA GPU")
        self.device = torch.device(device if device is not None else f"cuda:{torch.cuda.current_device()}")
        if self.device.type != "cuda":
            raise ValueError(f"device {self.device}: the kernels run on a CUDA device")
        if self.device.index is None:
            self.device = torch.device(f"cuda:{torch.cuda.current_device()}")
        self.spec.device = str(self.device)
        self._c = None
        with torch.cuda.device(self.device):
            self._c = self._create()
            self._rot, self._rot_keep = self.rotation.bind(self.spec, self.device)
            self._write_options = _capi.WriteOptions(self._rot)
            self.seq_lens = torch.zeros(batch, dtype=torch.int32, device=self.device)
            self._ws_len = self.capacity
            nbytes = self.lib.decode_workspace_bytes(batch, num_q_heads, num_kv_heads, head_dim, self._ws_len, 1)
            self.workspace = torch.empty(max(nbytes, 16), dtype=torch.uint8, device=self.device)
        self.set_logits(softcap, sinks)
        self.max_len = 0  # host bound of seq_lens (eager use keeps it exact; after graph replays use set_lengths)

    # ---- format hooks
    def _create(self):
        raise NotImplementedError

    def _destroy(self, c):
        raise NotImplementedError

    def _arrays(self):
        raise NotImplementedError

    @property
    def capacity(self):
        """Tokens one sequence can hold (from the format's layout; at least the capacity asked for)."""
        return int(getattr(self.lib.dll, f"oscar_{self._short}_capacity")(C.byref(self._c)))

    @property
    def nbytes(self):
        """Device bytes of the cache (the allocator's size)."""
        return int(self._bytes())

    def _stream(self):
        import torch
        return C.c_void_p(torch.cuda.current_stream(self.device).cuda_stream)

    def set_logits(self, softcap=0.0, sinks=None):
        """The decode's logit modifiers: softcap > 0 maps each score s (after the scale) to softcap tanh(s / softcap);
        sinks (tensor [num_q_heads] or None) adds e^sink to each query head's softmax denominator. Kept for every
        later decode (a float32 device copy of sinks); not to be changed while a captured graph replays."""
        import torch
        self.spec.check_logits(softcap, sinks)
        self.softcap = float(softcap)
        self.sinks = None if sinks is None else \
            sinks.detach().to(device=self.device, dtype=torch.float32).contiguous().clone()
        if self.sinks is not None and not torch.isfinite(self.sinks).all():
            raise ValueError("sinks: holds NaN or Inf; give finite logits")
        self._decode_options = _capi.DecodeOptions(self._rot, self.softcap, self.sinks.data_ptr() if self.sinks is not None else None)

    def _call(self, what, *args):
        self.lib.call(f"oscar_{self._short}_{what}", C.byref(self._c), C.byref(self._write_options), *args)

    # ---- operations
    def prefill(self, k, v, lengths=None):
        """Writes tokens [0, lengths[b]) of each sequence from k, v bf16 [batch][kv_heads][L][head_dim] (lengths: None =
        all L, a list of ints, or a device int32 tensor [batch]); replaces what the cache held."""
        import torch
        L = self.spec.check_prefill(k, v, lengths)
        if lengths is None:
            self.seq_lens.fill_(L)
            self.max_len = L
        elif isinstance(lengths, (list, tuple)):
            self.seq_lens.copy_(torch.tensor(lengths, dtype=torch.int32), non_blocking=False)
            self.max_len = max(lengths) if lengths else 0
        else:
            self.seq_lens.copy_(lengths)
            self.max_len = int(lengths.max().item())
        self._call("prefill", k.data_ptr(), v.data_ptr(), self.seq_lens.data_ptr(), max(L, 1), self._stream())

    def append(self, k_new, v_new, max_seq_len=None):
        """Appends one token to every sequence (k_new, v_new bf16 [batch][kv_heads][head_dim]) and advances seq_lens
        on the device. max_seq_len: a host bound of the lengths before the append (default: the tracked one)."""
        bound = self.max_len if max_seq_len is None else int(max_seq_len)
        self.spec.check_append(k_new, v_new, bound)
        self._call("append", k_new.data_ptr(), v_new.data_ptr(), self.seq_lens.data_ptr(), bound, self._stream())
        self.seq_lens.add_(1)
        self.max_len = bound + 1

    def decode(self, q, scale, out=None, max_seq_len=None):
        """Attention of one query per sequence over the cache: q bf16 [batch][q_heads][head_dim] -> float32 out
        [batch][q_heads][head_dim] (allocated when None), softmax(scale q K^T) V over each sequence's tokens (with the
        logit modifiers of set_logits)."""
        import torch
        self.spec.check_decode(q, out)
        bound = self.max_len if max_seq_len is None else int(max_seq_len)
        if bound > self._ws_len:
            raise ValueError(f"max_seq_len {bound}: beyond the capacity {self._ws_len} the workspace was sized for")
        if out is None:
            out = torch.empty(q.shape, dtype=torch.float32, device=self.device)
        s = self.spec
        self.lib.call(f"oscar_{self._short}_decode", C.byref(self._c), C.byref(self._decode_options), q.data_ptr(), s.num_q_heads,
                      self.seq_lens.data_ptr(), max(bound, 1), float(scale), out.data_ptr(), self.workspace.data_ptr(),
                      self.workspace.numel(), self._stream())
        return out

    def set_lengths(self, max_len):
        """Sets the host bound after CUDA-graph replays advanced seq_lens on the device."""
        self.max_len = int(max_len)

    def arrays(self):
        """The cache's device arrays as torch tensors viewing its memory (valid while the cache lives):
        name -> tensor, shapes as in oscar_kv.h (bf16 arrays as bfloat16, (scale, zero) pairs as float16 [..][2])."""
        import torch
        views = {}
        for name, ptr, shape, typestr, view in self._arrays():
            t = torch.as_tensor(_DeviceArray(ptr, shape, typestr), device=self.device)
            if view is not None:
                t = t.view(view)
            views[name] = t
        return views

    def reorder(self, index):
        """Keeps sequence index[i] as sequence i (beam search): every array and the lengths gathered by `index`
        (a device int64 tensor [batch])."""
        import torch
        index = torch.as_tensor(index, device=self.device, dtype=torch.int64)
        if tuple(index.shape) != (self.spec.batch,):
            raise ValueError(f"index: shape {list(index.shape)}, expected [{self.spec.batch}]")
        B = self.spec.batch
        for t in self.arrays().values():
            rows = t.view(B, -1)
            rows.copy_(rows.index_select(0, index))
        self.seq_lens.copy_(self.seq_lens.index_select(0, index))

    def close(self):
        """Frees the device memory now (also done when the object is collected)."""
        if getattr(self, "_c", None) is not None:
            c, self._c = self._c, None
            self._destroy(c)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        mods = (f", softcap {self.softcap:g}" if self.softcap else "") + (", sinks" if self.sinks is not None else "")
        return f"{type(self).__name__}({self.spec}, rotation {self.rotation.kind}{mods}, {self.nbytes / 2**20:.1f} MiB)"


class CovKvCache(_KvCache):
    """oscar-cov (OSCAR): BF16 sink (64) and recent (256) windows per (sequence, KV head), the body in 2 or 4 bits,
    one token-wise asymmetric group of head_dim channels per token, OSCAR's per-row quantile clamp at 0.96 (K) / 0.92 (V),
    rounding half away from zero (the C cache's clip_mode / rounding fields); rotation: the
    calibrated R_K / R_V matrices (oscar-rotate), or none."""
    _fmt, _short = "oscar-cov", "cov"

    def __init__(self, *args, sink=_capi.COV_SINK, recent=_capi.COV_RECENT, **kw):
        self.sink, self.recent = sink, recent
        super().__init__(*args, **kw)

    def _create(self):
        s = self.spec
        return self.lib.cov_cache_create(s.batch, s.num_kv_heads, s.head_dim, s.bits, s.capacity, self.sink, self.recent)

    def _destroy(self, c):
        self.lib.cov_cache_destroy(c)

    def _bytes(self):
        s = self.spec
        return self.lib.cov_cache_bytes(s.batch, s.num_kv_heads, s.head_dim, s.bits, s.capacity, self.sink, self.recent)

    def _arrays(self):
        import torch
        c, s = self._c, self.spec
        BH, D, nb = s.batch * s.num_kv_heads, s.head_dim, c.body_capacity
        out = []
        for t in ("k", "v"):
            out += [(f"{t}_sink", getattr(c, f"{t}_sink"), (BH, c.sink, D), "<i2", torch.bfloat16),
                    (f"{t}_recent", getattr(c, f"{t}_recent"), (BH, c.recent, D), "<i2", torch.bfloat16)]
        for t in ("k", "v"):
            if nb > 0:
                out += [(f"{t}_codes", getattr(c, f"{t}_codes"), (BH, nb, D * s.bits // 8), "|u1", None),
                        (f"{t}_params", getattr(c, f"{t}_params"), (BH, nb, 2), "<f2", None)]
        return out


class OmniKvCache(_KvCache):
    """oscar-omni (OScaR): Hadamard rotation in the kernels, per-token key norms over all KV heads, keys per channel
    over 32-token blocks, values per token in groups of 32 channels, a BF16 residual block of 128 tokens."""
    _fmt, _short = "oscar-omni", "omni"

    def __init__(self, *args, rotation=None, **kw):
        super().__init__(*args, rotation=rotation if rotation is not None else KernelRotation.hadamard(), **kw)

    def _create(self):
        s = self.spec
        return self.lib.omni_cache_create(s.batch, s.num_kv_heads, s.head_dim, s.bits, s.capacity)

    def _destroy(self, c):
        self.lib.omni_cache_destroy(c)

    def _bytes(self):
        s = self.spec
        return self.lib.omni_cache_bytes(s.batch, s.num_kv_heads, s.head_dim, s.bits, s.capacity)

    def _arrays(self):
        import torch
        c, s = self._c, self.spec
        BH, D, nb = s.batch * s.num_kv_heads, s.head_dim, c.body_capacity
        out = [("k_res", c.k_res, (BH, 128, D), "<i2", torch.bfloat16), ("v_res", c.v_res, (BH, 128, D), "<i2", torch.bfloat16)]
        if nb > 0:
            out += [("k_codes", c.k_codes, (BH, nb, D * s.bits // 8), "|u1", None),
                    ("v_codes", c.v_codes, (BH, nb, D * s.bits // 8), "|u1", None),
                    ("k_params", c.k_params, (BH, nb // 32, D, 2), "<f2", None),
                    ("v_params", c.v_params, (BH, nb, D // 32, 2), "<f2", None),
                    ("k_norms", c.k_norms, (s.batch, nb), "<f2", None)]
        return out
