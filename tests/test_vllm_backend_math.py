#!/usr/bin/env python3
"""test_vllm_backend_math.py: the vLLM backend's prefill arithmetic on the CPU, with torch and without vLLM (its few
imports stubbed): OscarCovImpl._context, the cached prefix as a decode reads it (BF16 sink, the body decoded from a page
pool of random bytes, the recent ring), against a decoder written from kernels/include/oscar/cov_format.h's words
(2-bit codes little-endian, channel 4k in byte k's lowest bits; 4-bit low nibble first; x = code * scale + zero, fp16
scale and zero); and OscarCovImpl._attend's torch fallback (used where vLLM has no flash-attn build) against a
naive causal softmax, for a continued prefill, a one-token one and a fresh one, with 4 query heads per KV head; and the
per-step state: the request slots plugin.py's model-runner hook hands to the metadata builders reach each step's
metadata (check_step_state). The page layout comes from the kernel library LIB (oscar_kv.paged reads it there). The
GPU path (FlashAttention) is checked in the engine (experiments/device/vllm_plugin_check.py). Exit 0 passed, 1 failed,
77 without torch or LIB."""
import dataclasses
import os
import struct
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import torch
except ImportError:
    print("SKIPPED: torch is not installed (pip install torch); the backend's prefill arithmetic needs it")
    sys.exit(77)


def stub_vllm():
    """The names backend.py imports from vLLM 0.26, as inert stand-ins."""
    def mod(name, **kw):
        m = types.ModuleType(name)
        m.__dict__.update(kw)
        sys.modules[name] = m

    class Generic:
        def __class_getitem__(cls, item):
            return cls

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class FullAttentionSpec:
        block_size: int = 0

    mod("vllm", __version__="0.26.0")
    for n in ("vllm.v1", "vllm.v1.attention", "vllm.v1.attention.backends", "vllm.v1.worker", "vllm.v1.worker.gpu"):
        mod(n)
    mod("vllm.config", get_current_vllm_config=lambda: None)
    mod("vllm.v1.attention.backend", AttentionBackend=object, AttentionImpl=Generic, AttentionMetadata=object,
        AttentionMetadataBuilder=Generic, CommonAttentionMetadata=object,
        AttentionCGSupport=types.SimpleNamespace(UNIFORM_SINGLE_TOKEN_DECODE=1), AttentionType=types.SimpleNamespace(DECODER="decoder"))
    mod("vllm.v1.attention.backends.fa_utils", flash_attn_varlen_func=None, get_flash_attn_version=lambda **k: None,
        is_flash_attn_varlen_func_available=lambda: False)
    mod("vllm.v1.attention.backends.utils",  # every request a decode
        split_decodes_and_prefills=lambda cam, decode_threshold: (cam.num_reqs, 0, cam.num_reqs, 0))
    mod("vllm.v1.kv_cache_interface", FullAttentionSpec=FullAttentionSpec)
    mod("vllm.v1.worker.workspace", current_workspace_manager=None)

    class GPUModelRunner:
        def prepare_attn(self, input_batch):
            return "block tables", "slot mappings"
    mod("vllm.v1.worker.gpu.model_runner", GPUModelRunner=GPUModelRunner)


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def reference_row(pool, lay, page, off, h, value):
    """One body row of one head, decoded byte by byte from cov_format.h's description."""
    o_k, o_v, o_kp, o_vp = lay.offsets()
    base = page * lay.page_bytes + h * lay.region_bytes
    codes = base + (o_v if value else o_k) + off * lay.code_bytes
    params = base + (o_vp if value else o_kp) + off * 4
    scale, zero = struct.unpack("<ee", bytes(pool[params:params + 4]))
    per = 8 // lay.bits
    row = []
    for d in range(lay.head_dim):
        byte = pool[codes + d // per]
        code = (byte >> (lay.bits * (d % per))) & ((1 << lay.bits) - 1)
        row.append(code * scale + zero)
    return row


def check_step_state(backend, paged):
    """A step's request-state indices reach its metadata: plugin.py's hook of the model runner hands them to every
    oscar_cov metadata builder (and to nothing else), build() puts them into the metadata's window slots, step after
    step; a builder never given any refuses (the V2 runner is needed), a graph capture uses the scratch slot; each
    backend class sizes its pages with its own bit width."""
    from types import SimpleNamespace
    from oscar_kv.vllm import plugin
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    def builder():
        b = object.__new__(backend.OscarCovMetadataBuilder)
        b.max_num_seqs, b.reorder_batch_threshold, b.request_slots = 8, 1, None
        b.window_slot = torch.full((16,), 8, dtype=torch.int32)
        return b

    def step(b, n, capture=False):
        z = torch.zeros(n + 1, dtype=torch.int32)
        cam = SimpleNamespace(num_reqs=n, num_actual_tokens=n, query_start_loc=z, query_start_loc_cpu=z, seq_lens=z[:n],
                              seq_lens_cpu_upper_bound=z[:n], block_table_tensor=z, slot_mapping=z[:n])
        return b.build(0, cam, capture=capture)

    b1, b2, fresh = builder(), builder(), builder()
    plugin._hand_over_request_slots()
    runner = GPUModelRunner()
    runner.attn_groups = [[SimpleNamespace(metadata_builders=[b1, object()])], [SimpleNamespace(metadata_builders=[b2])]]
    for slots in ([5, 2, 7], [1, 0]):
        got = runner.prepare_attn(SimpleNamespace(idx_mapping=torch.tensor(slots, dtype=torch.int32), idx_mapping_np=slots))
        check(got == ("block tables", "slot mappings"), f"the runner's own prepare_attn result passed on: {got}")
        for b in (b1, b2):
            md = step(b, len(slots))
            check(md.window_slot.tolist() == slots and md.window_slot_cpu == slots,
                  f"step {slots}: metadata window slots {md.window_slot.tolist()} / {md.window_slot_cpu}")
    try:
        step(fresh, 2)
        check(False, "a builder without the step's request slots must refuse")
    except paged.Unsupported as e:
        check("V2 model runner" in str(e), f"refusal without request slots: {e}")
    md = step(fresh, 2, capture=True)
    check(md.window_slot.tolist() == [8, 8], f"capture: scratch slot everywhere, got {md.window_slot.tolist()}")
    for name, bits in paged.CACHE_DTYPES.items():
        cls = getattr(backend, backend.BACKENDS[name].rsplit(".", 1)[1])
        want = (10, paged.PagedLayout(8, 128, bits, 256).page_bytes)
        got = cls.get_kv_cache_shape(10, 256, 8, 128, "auto")
        check(cls.bits == bits and got == want, f"{name}: {cls.__name__} shape {got} for 'auto', want {want}")
    print("step state: request slots through the builders into the metadata over two steps; backend classes per dtype")


def main():
    lib_path = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    if lib_path is None or not lib_path.is_file():
        print(f"SKIPPED: the kernel library {lib_path} is not built (the page layout comes from it)")
        return 77
    os.environ["OSCAR_KERNELS_LIB"] = str(lib_path)
    stub_vllm()
    sys.path.insert(0, str(ROOT / "kernels" / "python"))
    from oscar_kv import paged
    from oscar_kv.vllm import backend

    g = torch.Generator().manual_seed(0)
    for bits in (2, 4):
        H, D, P, S, W = 2, 64, 256, paged.SINK, paged.RECENT
        lay = paged.PagedLayout(H, D, bits, P)
        impl = object.__new__(backend.OscarCovImpl)
        impl.num_heads, impl.num_kv_heads, impl.head_size, impl.bits = 2 * H, H, D, bits
        slots = 3
        impl.k_sink = torch.randn(slots, H, S, D, generator=g).to(torch.bfloat16)
        impl.v_sink = torch.randn(slots, H, S, D, generator=g).to(torch.bfloat16)
        impl.k_recent = torch.randn(slots, H, W, D, generator=g).to(torch.bfloat16)
        impl.v_recent = torch.randn(slots, H, W, D, generator=g).to(torch.bfloat16)
        pages = 6
        pool = torch.randint(0, 256, (pages, lay.page_bytes), dtype=torch.uint8, generator=g)
        # (scale, zero) as small finite fp16 values, so that no random byte pair is an infinity or NaN
        flat = pool.view(-1)
        o_k, o_v, o_kp, o_vp = lay.offsets()
        for p in range(pages):
            for h in range(H):
                for op in (o_kp, o_vp):
                    a = p * lay.page_bytes + h * lay.region_bytes + op
                    vals = (torch.rand(P, 2, generator=g) * 0.5 - 0.25).to(torch.float16)
                    flat[a:a + 4 * P] = vals.view(torch.uint8).view(-1)
        block_row = torch.tensor([4, 1, 5, 0], dtype=torch.int32)  # the sequence's pages, not in pool order
        wslot, L, ctx = 1, 900, 700  # a continued prefill: 700 cached tokens of a sequence now 900 long
        K, V = impl._context(pool, block_row, wslot, ctx, L)
        body_end = max(S, L - W)
        raw = pool.view(-1).tolist()
        worst = 0.0
        for pos in list(range(0, 70)) + list(range(S, body_end, 37)) + list(range(body_end, ctx)):
            for h in range(H):
                for value, got in ((False, K), (True, V)):
                    if pos < S:
                        want = (impl.v_sink if value else impl.k_sink)[wslot, h, pos].float().tolist()
                    elif pos < body_end:
                        page = int(block_row[pos // P])
                        want = [float(torch.tensor(x).to(torch.bfloat16)) for x in reference_row(raw, lay, page, pos % P, h, value)]
                    else:
                        want = (impl.v_recent if value else impl.k_recent)[wslot, h, (pos - S) % W].float().tolist()
                    worst = max(worst, max(abs(a - b) for a, b in zip(got[pos, h].float().tolist(), want)))
        check(K.shape == (ctx, H, D) and worst <= 0.0, f"_context at {bits} bits: worst difference {worst} from the layout's decoder")
        print(f"_context, {bits} bits: {ctx} cached positions of a {L}-token sequence over shuffled pages: worst difference {worst}")

    # _attend's torch fallback against a naive causal softmax (positions aligned to the end of each request's keys)
    Hq, H, D = 8, 2, 16
    G = Hq // H
    impl = object.__new__(backend.OscarCovImpl)
    impl.num_heads, impl.num_kv_heads, impl.head_size, impl.scale, impl.fa_version = Hq, H, D, 0.25, None
    lens_q, lens_k = [5, 1, 7], [12, 1, 7]
    cu_q, cu_k = [0], [0]
    for a, b in zip(lens_q, lens_k):
        cu_q.append(cu_q[-1] + a)
        cu_k.append(cu_k[-1] + b)
    q = torch.randn(cu_q[-1], Hq, D, generator=g)
    K = torch.randn(cu_k[-1], H, D, generator=g)
    V = torch.randn(cu_k[-1], H, D, generator=g)
    o = impl._attend(q, K, V, cu_q, cu_k)
    err = 0.0
    for r in range(len(lens_q)):
        for i in range(lens_q[r]):
            pos = lens_k[r] - lens_q[r] + i
            for h in range(Hq):
                k = K[cu_k[r]:cu_k[r] + pos + 1, h // G]
                v = V[cu_k[r]:cu_k[r] + pos + 1, h // G]
                p = torch.softmax((k @ q[cu_q[r] + i, h]) * 0.25, 0)
                err = max(err, (p @ v - o[cu_q[r] + i, h]).abs().max().item())
    check(err < 1e-5, f"_attend (torch fallback): max error {err} against a naive causal softmax")
    print(f"_attend fallback, 3 requests (continued, one-token, fresh), GQA 4: max error {err:.2e}")
    check_step_state(backend, paged)
    if failures:
        print(f"FAILED: {len(failures)} check(s)")
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
