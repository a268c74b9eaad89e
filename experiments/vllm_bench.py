#!/usr/bin/env python3
"""vllm_bench.py OUT [--dtypes auto,fp8,...] [--prompt N] [--output N] [--max-seqs N] [--layers N]: vLLM serving a
Llama-3-8B-shaped model of dummy weights (hidden 4096, 32 layers, 32 query / 8 KV heads of head_dim 128, vocab 128256;
--layers fewer for a quick look) with each kv_cache_dtype in turn, the same engine settings for all (CUDA graphs,
chunked prefill, no prefix caching, gpu_memory_utilization 0.9, max_num_seqs): vLLM's own BF16 ("auto"), fp8,
int4_per_token_head, turboquant_4bit_nc, and the oscar_kv plugin's oscar_cov_int2.

Per dtype, in its own process:
  * KV capacity in tokens as vLLM reports it (blocks x block size), and the concurrency that fits: requests of
    prompt + output tokens that the capacity holds (capped by max_num_seqs);
  * a decode-heavy load: that many requests of --prompt random token ids, up to --output greedy tokens each
    (ignore_eos), all submitted at once and stepped through vLLM's engine: TTFT per request (submission to first
    token; chunked prefills interleave with the decodes of requests already started), then --measure-steps decode
    steps once every request is past its prefill (the whole batch decoding): output tokens/s and TPOT (mean step
    time); then --profile-steps more under the torch profiler: the step's GPU time by kernel kind (attention, KV write,
    GEMM, other; kernels inside CUDA graphs included); then the requests are aborted (the decode budget only sizes the
    cache and keeps early requests running).
Writes OUT/bench.json and OUT/bench.md (the table, ratios to BF16 and fp8); prints a line per dtype.
Needs vLLM 0.26 importable (experiments/device/vllm_carry.sh run) and, for oscar_cov_int2, the oscar_kv package with its
kernel library (OSCAR_KERNELS_LIB); rotations: random orthogonal (dummy weights)."""
import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "device"))
from vllm_child import LLAMA3_8B, run_child, write_config  # noqa: E402

# A profiled kernel's kind by its name, the first pattern that matches (KV writes before "flash": vLLM's
# reshape_and_cache_flash; TurboQuant's Triton decode is _tq_decode_stage1 + _fwd_kernel_stage2).
KERNEL_KINDS = [("kv write", r"paged_write|reshape_and_cache|cache_kernel|append_kernel|quantize|_store"),
                ("attention", r"decode_kernel|decode_stage|kernel_stage|combine|merge|flash|fmha|attn|attention|split_kv"),
                ("GEMM", r"gemm|nvjet|cutlass|xmma|cublas|matmul|sm90_|wgmma")]


def kernel_kind(name):
    return next((k for k, rx in KERNEL_KINDS if re.search(rx, name, re.I)), "other kernels")


CHILD = r'''
import json, sys, time
folder, dtype, prompt, output, max_seqs, util, measure, profile = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), float(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
if dtype.startswith("oscar"):
    import oscar_kv.vllm
    oscar_kv.vllm.register()
from vllm import LLM, SamplingParams
t0 = time.time()
llm = LLM(model=folder, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16", kv_cache_dtype=dtype,
          max_model_len=prompt + output, gpu_memory_utilization=util, max_num_seqs=max_seqs, enable_prefix_caching=False,
          seed=0)
init_s = time.time() - t0
cc = llm.llm_engine.vllm_config.cache_config
cap = cc.num_gpu_blocks * cc.block_size
fits = min(max_seqs, cap // (prompt + output))
engine = llm.llm_engine
sp = SamplingParams(temperature=0.0, max_tokens=output, ignore_eos=True, detokenize=False)
t_sub = time.perf_counter()
for i in range(fits):
    engine.add_request(f"r{i}", {"prompt_token_ids": [(i * 7919 + 31 * t) % 120000 + 100 for t in range(prompt)]}, sp)
first, steps, split = {}, [], None

def profile_steps(engine, n):
    """GPU time of n more full-batch steps by kernel kind (torch profiler; kernels inside CUDA graphs included)."""
    import re
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    kinds = __KERNEL_KINDS__
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as pr:
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            engine.step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t
    ms = {k: 0.0 for k, _ in kinds}
    ms["other kernels"] = 0.0
    top = {}
    for e in pr.key_averages():
        if getattr(e, "device_type", None) != DeviceType.CUDA:
            continue
        us = getattr(e, "self_device_time_total", None)
        us = us if us is not None else e.self_cuda_time_total
        kind = next((k for k, rx in kinds if re.search(rx, e.key, re.I)), "other kernels")
        ms[kind] += us / 1e3 / n
        top[e.key[:80]] = top.get(e.key[:80], 0) + us / 1e3 / n
    busy = sum(ms.values())
    return {"steps": n, "wall_ms_per_step_profiled": 1e3 * wall / n, "gpu_ms_per_step": ms, "gpu_busy_ms": busy,
            "top_kernels_ms": dict(sorted(top.items(), key=lambda kv: -kv[1])[:8])}

while engine.has_unfinished_requests():
    a = time.perf_counter()
    outs = engine.step()
    b = time.perf_counter()
    all_started = len(first) == fits
    for o in outs:
        if o.outputs[0].token_ids and o.request_id not in first:
            first[o.request_id] = b - t_sub
    if all_started:  # every request past its prefill: full-batch decode steps
        steps.append((b - a, sum(1 for o in outs if o.outputs[0].token_ids)))
        if len(steps) >= measure:
            try:
                split = profile_steps(engine, profile) if profile else None
            except Exception as e:  # the timing stands without its split
                split = {"error": f"{type(e).__name__}: {e}"}
            engine.abort_request([f"r{i}" for i in range(fits)])
            break
decode_s = sum(s for s, _ in steps)
decode_tokens = sum(n for _, n in steps)
ttft = sorted(first.values())
import torch
split_tokens = None
if dtype.startswith("oscar"):
    from oscar_kv import paged
    split_tokens = paged.decode_split_tokens(prompt + output)  # what the backend decodes with (max_model_len)
print("RESULT " + json.dumps({"dtype": dtype, "device": torch.cuda.get_device_name(), "decode_split_tokens": split_tokens, "init_s": init_s, "capacity_tokens": cap, "block_size": cc.block_size,
      "num_gpu_blocks": cc.num_gpu_blocks, "concurrency": fits, "ttft_mean_s": sum(ttft) / max(len(ttft), 1),
      "ttft_p50_s": ttft[len(ttft) // 2] if ttft else None, "ttft_max_s": ttft[-1] if ttft else None,
      "decode_steps": len(steps), "decode_s": decode_s, "decode_tokens": decode_tokens,
      "output_tok_s": decode_tokens / decode_s if decode_s else None, "tpot_ms": 1e3 * decode_s / len(steps) if steps else None,
      "decode_batch_mean": decode_tokens / len(steps) if steps else None, "total_s": time.perf_counter() - t_sub, "split": split}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--dtypes", default="auto,fp8,int4_per_token_head,turboquant_4bit_nc,oscar_cov_int2",
                    help="kv_cache_dtypes in turn; NAME:N gives that one max_num_seqs N (default --max-seqs)")
    ap.add_argument("--prompt", type=int, default=32768)
    ap.add_argument("--output", type=int, default=2048, help="decode budget per request (sizes max_model_len and the concurrency)")
    ap.add_argument("--measure-steps", type=int, default=32, help="decode steps timed once every request is past its prefill")
    ap.add_argument("--max-seqs", type=int, default=128)
    ap.add_argument("--profile-steps", type=int, default=4, help="full-batch steps profiled after the timed ones: the step's GPU time "
                    "by kernel kind (attention, KV write, GEMM, other); 0: none")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--util", type=float, default=0.9)
    ap.add_argument("--timeout", type=int, default=540)
    ap.add_argument("--render", action="store_true", help="only write OUT/bench.md again from OUT/bench.json")
    a = ap.parse_args()
    if a.render:
        src = os.path.join(a.out, "bench.json")
        try:
            with open(src) as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"vllm_bench: error: {src}: cannot read a benchmark's results ({e}); give the folder a run wrote")
        write_md(res, os.path.join(a.out, "bench.md"))
        return
    os.makedirs(a.out, exist_ok=True)
    cfg = dict(LLAMA3_8B, num_hidden_layers=a.layers, max_position_embeddings=max(131072, a.prompt + a.output))
    path = os.path.join(a.out, "bench.json")
    res = json.load(open(path)) if os.path.exists(path) else {"config": cfg, "settings": vars(a), "runs": {}}
    child = CHILD.replace("__KERNEL_KINDS__", repr(KERNEL_KINDS))
    with tempfile.TemporaryDirectory() as d:
        write_config(d, cfg)
        for item in a.dtypes.split(","):
            dtype, _, cap = item.partition(":")  # NAME:N caps this cache's max_num_seqs (a prefill that would not fit the time)
            max_seqs = int(cap) if cap else a.max_seqs
            env = dict(os.environ)
            env.setdefault("OSCAR_KV_ROTATIONS", "random")
            line, rc, wall, text = run_child(child, [d, dtype, a.prompt, a.output, max_seqs, a.util, a.measure_steps,
                                                     a.profile_steps], a.timeout, env)
            r = dict(line or {"dtype": dtype}, rc=rc, wall_s=wall, prompt=a.prompt, output=a.output, layers=a.layers,
                     max_seqs=max_seqs)
            if not line:
                r["log_tail"] = text[-3000:]
            res["runs"][dtype] = r
            with open(os.path.join(a.out, f"{dtype}.log"), "w") as f:
                f.write(text)
            with open(path, "w") as f:
                json.dump(res, f, indent=1)
            if line:
                print(f"{dtype}: capacity {r['capacity_tokens']} tokens, {r['concurrency']} concurrent, TTFT mean {r['ttft_mean_s']:.1f} s, "
                      f"decode {r['output_tok_s']:.0f} tok/s, TPOT {r['tpot_ms']:.1f} ms ({r['wall_s']} s)", flush=True)
                if (r.get("split") or {}).get("gpu_ms_per_step"):
                    g = r["split"]["gpu_ms_per_step"]
                    print(f"  step GPU time (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in g.items()) +
                          f"; busy {r['split']['gpu_busy_ms']:.1f} of TPOT {r['tpot_ms']:.1f}", flush=True)
            else:
                print(f"{dtype}: rc {rc} ({r['wall_s']} s); log tail:\n{text[-2500:]}", flush=True)
    write_md(res, os.path.join(a.out, "bench.md"))


def write_md(res, path):
    runs = res["runs"]
    base, fp8 = runs.get("auto", {}), runs.get("fp8", {})

    def ratio(r, b, k):
        return f"{r[k] / b[k]:.2f}x" if r.get(k) and b.get(k) else "-"
    s = res["settings"]
    caps = ", ".join(f"{k}: {r['max_seqs']}" for k, r in runs.items() if r.get("max_seqs") not in (None, s["max_seqs"]))
    device = next((r["device"] for r in runs.values() if r.get("device")), None)
    lines = [f"Llama-3-8B-shaped ({res['config']['num_hidden_layers']} layers, dummy weights){' on ' + device if device else ''}, "
             f"prompts {s['prompt']} + {s['output']} output tokens, max_num_seqs {s['max_seqs']}{' (' + caps + ')' if caps else ''}, "
             f"gpu_memory_utilization {s['util']}:", "",
             "| kv_cache_dtype | quantized | KV capacity (tokens) | vs BF16 | vs fp8 | concurrency | TTFT mean (s) | output tok/s | vs BF16 | "
             "vs fp8 | TPOT (ms) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for k, r in runs.items():
        if not r.get("capacity_tokens"):
            lines.append(f"| {k} | {quantized(k, s)} | failed (rc {r.get('rc')}){': ' + r['note'] if r.get('note') else ''} | | | | | | | | |")
            continue
        fits = r["capacity_tokens"] // (s["prompt"] + s["output"])
        conc = f"{r['concurrency']}" + (f" of {fits} that fit" if fits > r["concurrency"] else "")
        lines.append(f"| {k} | {quantized(k, s)} | {r['capacity_tokens']:,} | {ratio(r, base, 'capacity_tokens')} | {ratio(r, fp8, 'capacity_tokens')} | "
                     f"{conc} | {r['ttft_mean_s']:.1f} | {r['output_tok_s']:.0f} | {ratio(r, base, 'output_tok_s')} | "
                     f"{ratio(r, fp8, 'output_tok_s')} | {r['tpot_ms']:.1f} |")
    lines += [f"{k}: decode split {r['decode_split_tokens']} tokens (oscar_kv.paged.decode_split_tokens)"
              for k, r in runs.items() if r.get("decode_split_tokens")]
    split = [(k, r) for k, r in runs.items() if (r.get("split") or {}).get("gpu_ms_per_step")]
    if split:
        kinds = list(split[0][1]["split"]["gpu_ms_per_step"])
        lines += ["", "Step time split (full-batch decode steps under the torch profiler; GPU time per step; host: TPOT minus GPU busy, "
                  "the time the GPU waits on the scheduler and Python):", "",
                  "| kv_cache_dtype | TPOT (ms) | " + " | ".join(kinds) + " | GPU busy | host |", "|---" * (len(kinds) + 4) + "|"]
        for k, r in split:
            g = r["split"]["gpu_ms_per_step"]
            lines.append(f"| {k} | {r['tpot_ms']:.1f} | " + " | ".join(f"{g[x]:.1f}" for x in kinds) +
                         f" | {r['split']['gpu_busy_ms']:.1f} | {max(0.0, r['tpot_ms'] - r['split']['gpu_busy_ms']):.1f} |")
        lines += [f"{k}: {r['split_note']}" for k, r in split if r.get("split_note")]
    for k, r in runs.items():  # the targets of an oscar cache against vLLM's own, in this run
        if k.startswith("oscar_cov") and r.get("capacity_tokens") and base.get("capacity_tokens") and fp8.get("capacity_tokens"):
            got = [("KV capacity", r["capacity_tokens"] / base["capacity_tokens"], r["capacity_tokens"] / fp8["capacity_tokens"], 6.5, 3.0),
                   ("decode tok/s", r["output_tok_s"] / base["output_tok_s"], r["output_tok_s"] / fp8["output_tok_s"], 6.0, 3.0)]
            lines += ["", f"{k} against the targets: " + "; ".join(
                f"{what} {b:.2f}x BF16 ({'met' if b >= tb else 'missed'}: >= {tb}x), {f:.2f}x fp8 ({'met' if f >= tf else 'missed'}: >= {tf}x)"
                for what, b, f, tb, tf in got)]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


KERNELS_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels", "python")  # oscar_kv, for the table


def quantized(dtype, settings):
    """What of the cache a kv_cache_dtype stores in fewer bits than BF16 (the plugin keeps oscar_kv.paged's BF16 sink and
    recent windows)."""
    if dtype == "auto":
        return "none (BF16)"
    if dtype.startswith("oscar_cov_int"):
        if KERNELS_PY not in sys.path:
            sys.path.insert(0, KERNELS_PY)
        from oscar_kv import paged
        ctx = settings["prompt"] + settings.get("measure_steps", 0)
        return f"{100 * (1 - min(ctx, paged.SINK + paged.RECENT) / ctx):.1f}% at {dtype[-1]} bits"
    return f"vLLM's {dtype}"


if __name__ == "__main__":
    main()
