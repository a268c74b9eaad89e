#!/usr/bin/env python3
"""gpu_test_hf.py [--arch A,B] [--quick]: transformers generate() through the oscar-kv kernels (oscar_kv.hf) on tiny
random models of every supported architecture, with head_dim 64 and 2 query heads per KV head.

For each architecture and recipe (oscar-omni at 2 and 4 bits, oscar-cov at 2 bits with random orthogonal rotations
per layer, oscar-cov-head with one per KV head), a batch of two left-padded prompts (330 and 300 tokens, so that
both formats' bodies, windows and residual blocks are in use) generates 40 tokens greedily. Every decode-kernel call
is checked against an fp32 decode over the same cache read back by tests/python_twins.py (relative error of the
output <= 2e-2; with the layer's soft-capping and sink logits); the layers on the kernels must be the ones layer_plan
names (sliding-window layers stay on an ordinary cache; gemma2's soft-capped and gpt_oss's sink layers use the kernels); a left-padded sequence must decode as when it runs alone (while the greedy
tokens agree, the median relative difference of the cached steps' logits <= 0.05, where attending the pads moves
them by more than 0.5); beam search (2 beams)
runs; crop() raises; any deprecated transformers API raises. Exit 0 passed, 1 failed, 77 skipped (no torch/transformers/CUDA/library).
"""
import argparse
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_python  # noqa: E402
from gpu_python import check  # noqa: E402

oscar_kv = gpu_python.require("transformers")
import torch  # noqa: E402
import oscar_kv.hf as okv  # noqa: E402
from oscar_kv.hf import architectures  # noqa: E402
from strict_transformers import strict  # noqa: E402

strict()  # a deprecated transformers API (calibrate, a cache passed under a deprecated name) fails the test
import python_twins  # noqa: E402


def random_rotations(path, n_layers, heads, d, seed):
    """A rotations file in oscar-rotate's layout with Haar-random orthogonal matrices ([heads][d][d] per layer)."""
    import h5py
    g = torch.Generator().manual_seed(seed)
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["format"], a["version"], a["recipe"] = "oscar-kernel-rotations", 1, "test-random"
        a["n_layers"], a["head_dim"], a["n_kv_heads"], a["per_kv_head"] = n_layers, d, heads, int(heads > 1)
        a["key_kind"], a["value_kind"] = "matrix", "matrix"
        for i in range(n_layers):
            for name in ("key_rotation", "value_rotation"):
                qs = [torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0] for _ in range(heads)]
                f.create_dataset(f"layer_{i:03d}/{name}", data=torch.stack(qs).float().numpy())


class DecodeChecker:
    """Wraps the caches' decode: each call also runs the fp32 reference over the same cache."""

    def __init__(self):
        self.calls, self.worst = 0, 0.0
        self.orig = {}

    def __enter__(self):
        for cls in (oscar_kv.CovKvCache, oscar_kv.OmniKvCache):
            self.orig[cls] = cls.decode
            orig = cls.decode

            def wrapped(kv, q, scale, out=None, max_seq_len=None, _orig=orig):
                o = _orig(kv, q, scale, out, max_seq_len)
                ref = python_twins.reference_decode(kv, q, scale)
                err = ((o - ref).norm() / ref.norm().clamp_min(1e-30)).item()
                self.worst = max(self.worst, err if math.isfinite(err) else math.inf)
                self.calls += 1
                return o
            cls.decode = wrapped
        return self

    def __exit__(self, *exc):
        for cls, f in self.orig.items():
            cls.decode = f


def model_for(arch):
    window = 24
    name = arch
    if arch == "mistral-nowindow":
        arch, window = "mistral", None
    cfg = architectures.tiny_config(arch, head_dim=64, sliding_window=window)
    model = architectures.random_model(arch, "cuda", torch.float32, config=cfg)
    return name, model.eval()


def expected_kernel_layers(arch, n):
    if arch == "mistral":
        return []
    if arch == "gemma2" or arch == "gpt_oss":
        return [1, 3]  # the full-attention layers (soft-capped / with sinks); the sliding ones fall back
    if arch == "gemma3":
        return [3]
    return list(range(n))


def run_arch(arch, quick, tmp, one=False):
    name, model = model_for(arch)
    cfg = model.config.get_text_config()
    n = cfg.num_hidden_layers
    g = torch.Generator().manual_seed(7)
    P = 330
    ids = torch.randint(3, cfg.vocab_size, (2, P), generator=g).cuda()
    mask = torch.ones_like(ids)
    mask[1, :30] = 0  # the second prompt: 300 real tokens, left-padded
    ids[1, :30] = 0
    new = 40
    # full precision with eager attention (transformers' SDPA function drops gemma2's soft-cap) and the model's own
    # cache: the reference of the fallback layers
    model.set_attn_implementation("eager")
    with torch.no_grad():
        full = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, do_sample=False,
                              min_new_tokens=new, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    okv.enable(model)
    recipes = [("oscar-omni", 2), ("oscar-omni", 4), ("oscar-cov", 2), ("oscar-cov-head", 2)]
    if quick:
        recipes = recipes[:1] + recipes[2:3]
    if one:
        recipes = recipes[:1]
    for recipe, bits in recipes:
        rot = None
        if recipe.startswith("oscar-cov"):
            rot = os.path.join(tmp, f"{name}-{recipe}.h5")
            random_rotations(rot, n, cfg.num_key_value_heads if recipe == "oscar-cov-head" else 1, 64, seed=11)
        cache = okv.OscarCache(model, recipe, bits=bits, max_cache_len=P + new + 8, rotations=rot)
        want = expected_kernel_layers(name, n)
        check(cache.kernel_layers() == want, f"{name} {recipe}: kernel layers {cache.kernel_layers()}, expected {want}")
        with DecodeChecker() as chk, torch.no_grad():
            gen = model.generate(input_ids=ids, attention_mask=mask, **okv.cache_argument(model, cache), max_new_tokens=new,
                                 do_sample=False, min_new_tokens=new, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        out = gen.sequences
        fp_agree = (out[:, -new:] == full.sequences[:, -new:]).float().mean().item()
        if not want:  # every layer on an ordinary cache: exactly the model without oscar-kv
            dl = max(((a - b).norm() / b.norm()).item() for a, b in zip(gen.logits, full.logits))
            check(fp_agree == 1.0 and dl <= 1e-4, f"{name} {recipe}@{bits}: all layers fall back, yet tokens agree "
                  f"{fp_agree:.2f} and logits differ {dl:.1e} from the model with eager attention")
        steps = new - 1
        check(chk.calls == len(want) * steps, f"{name} {recipe}@{bits}: {chk.calls} decode calls, expected "
              f"{len(want)} layers x {steps} steps")
        check(chk.worst <= 2e-2, f"{name} {recipe}@{bits}: decode vs fp32 reference rel err {chk.worst:.2e} > 2e-2")
        if one:
            print(f"{name} {recipe}@{bits}: {chk.calls} decode calls, worst rel err {chk.worst:.1e}")
            return
        # The padded sequence alone (no padding): while its tokens agree, the logits of each step (the cache read
        # through the kernels) agree up to rounding; attending a pad would move them by O(1).
        alone = okv.OscarCache(model, recipe, bits=bits, max_cache_len=P + new + 8, rotations=rot)
        with torch.no_grad():
            gen1 = model.generate(input_ids=ids[1:, 30:], **okv.cache_argument(model, alone), max_new_tokens=new, do_sample=False, min_new_tokens=new,
                                  pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        a, b = gen.sequences[1, -new:], gen1.sequences[0, -new:]
        agree = int((a != b).nonzero()[0, 0]) if bool((a != b).any()) else new
        diffs = [((gen.logits[t][1] - gen1.logits[t][0]).norm() / gen1.logits[t][0].norm()).item()
                 for t in range(1, min(agree + 1, new))]
        worst_pad = statistics.median(diffs) if diffs else float("nan")
        check(len(diffs) >= 1 and worst_pad <= 0.05, f"{name} {recipe}@{bits}: padded vs alone: {agree} tokens agree, "
              f"median logits rel diff {worst_pad:.2e} over the {len(diffs)} cached steps (bound 0.05)")
        if name == "llama" and recipe == "oscar-omni" and bits == 2:  # the measure sees attended pads
            unmasked = okv.OscarCache(model, recipe, bits=bits, max_cache_len=P + new + 8, rotations=rot)
            with torch.no_grad():
                gen2 = model.generate(input_ids=ids, attention_mask=torch.ones_like(mask), **okv.cache_argument(model, unmasked),
                                      max_new_tokens=2, do_sample=False, min_new_tokens=2, pad_token_id=0, output_logits=True,
                                      return_dict_in_generate=True)
            control = ((gen2.logits[1][1] - gen1.logits[1][0]).norm() / gen1.logits[1][0].norm()).item()
            check(control > 0.5, f"control: with the pads attended the logits moved only {control:.2e}")
            print(f"control (pads attended): logits rel diff {control:.2e}")
        print(f"{name:17s} {recipe:14s}@{bits}: {cache.summary()}; {chk.calls} decode calls, worst rel err "
              f"{chk.worst:.1e}; padded vs alone: {agree} of {new} tokens equal, median logits diff {worst_pad:.1e}; "
              f"tokens equal to full precision's: {fp_agree:.2f}", flush=True)
        for c in (cache, alone):
            for layer in c.layers:
                if isinstance(layer, okv.OscarLayer) and layer.kv is not None:
                    layer.kv.close()
    if name in ("llama", "qwen3", "gemma3"):  # oscar-cov calibrated through the C++ reference (oscar-rotate)
        import h5py
        calib = torch.randint(3, cfg.vocab_size, (512,), generator=torch.Generator().manual_seed(3)).tolist()
        for recipe in ("oscar-cov", "oscar-cov-head"):
            path = os.path.join(tmp, f"{name}-{recipe}-calibrated.h5")
            rot = okv.calibrate(model, calib, path, recipe=recipe)
            with h5py.File(path, "r") as f:
                heads = f["layer_000/key_rotation"].shape[0]
                ids_back = f["calibration_token_ids"][...].tolist()
                label = f.attrs["calibration"]
            check("oscar_kv.hf.calibrate" in str(label), f"{name} {recipe}: calibration attribute {label!r}")
            check(heads == (cfg.num_key_value_heads if recipe == "oscar-cov-head" else 1), f"{name} {recipe}: {heads} matrices")
            check(ids_back == calib, f"{name} {recipe}: calibration ids not recorded")
            # the rotations calibrate returned (oscar-cov) or the file it wrote (oscar-cov-head)
            cache = okv.OscarCache(model, recipe, bits=2, max_cache_len=P + new + 8,
                                   rotations=rot if recipe == "oscar-cov" else path)
            with DecodeChecker() as chk, torch.no_grad():
                model.generate(input_ids=ids, attention_mask=mask, **okv.cache_argument(model, cache), max_new_tokens=new,
                               do_sample=False, min_new_tokens=new, pad_token_id=0)
            check(chk.calls > 0 and chk.worst <= 2e-2, f"{name} {recipe} calibrated: {chk.calls} calls, rel err {chk.worst:.2e}")
            print(f"{name:17s} {recipe:14s}@2 calibrated by oscar-rotate on 512 tokens: {chk.calls} decode calls, "
                  f"worst rel err {chk.worst:.1e}", flush=True)
    # beam search and crop, once per architecture
    cache = okv.OscarCache(model, "oscar-omni", bits=2, max_cache_len=P + new + 8)
    try:
        with torch.no_grad():
            out = model.generate(input_ids=ids[:1, 30:], **okv.cache_argument(model, cache), max_new_tokens=8, num_beams=2,
                                 do_sample=False, min_new_tokens=8, pad_token_id=0)
        check(tuple(out.shape) == (1, P - 30 + 8), f"{name}: beam search output {tuple(out.shape)}")
    except Exception as e:
        check(False, f"{name}: beam search raised {type(e).__name__}: {e}")
    if cache.kernel_layers():
        try:
            cache.layers[cache.kernel_layers()[0]].crop(-1)
            check(False, f"{name}: crop() did not raise")
        except NotImplementedError as e:
            check("assisted" in str(e), f"{name}: crop message {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="all")
    ap.add_argument("--quick", action="store_true", help="oscar-omni@2 and oscar-cov@2 only")
    ap.add_argument("--one", action="store_true", help="one generate per architecture (oscar-omni@2), for memcheck")
    args = ap.parse_args()
    archs = list(architectures.NAMES) + ["mistral-nowindow"] if args.arch == "all" else args.arch.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        for arch in archs:
            try:
                run_arch(arch, args.quick, tmp, args.one)
            except Exception as e:
                import traceback
                traceback.print_exc()
                check(False, f"{arch}: {type(e).__name__}: {e}")
    return gpu_python.finish()


if __name__ == "__main__":
    sys.exit(main())
