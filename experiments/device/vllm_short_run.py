#!/usr/bin/env python3
"""vllm_short_run.py MODEL_DIR [--no-register]: a short vllm.LLM run with kv_cache_dtype oscar_cov_int2 (eager), small
enough to run under compute-sanitizer: three prompts of mixed lengths, chunked prefill of 256-token chunks (so later
chunks attend to a cached prefix that is partly in 2-bit pages), 24 greedy tokens each; prints one RESULT line.
--no-register: do not call oscar_kv.vllm.register(); vLLM must load the plugin itself through its
`vllm.general_plugins` entry point (the check of an installed package)."""
import json
import sys
import time

folder = sys.argv[1]
if "--no-register" not in sys.argv:
    import oscar_kv.vllm
    oscar_kv.vllm.register()
from importlib.metadata import entry_points  # noqa: E402

from vllm import LLM, SamplingParams  # noqa: E402

plugins = sorted(f"{e.name}={e.value}" for e in entry_points(group="vllm.general_plugins"))
t0 = time.time()
llm = LLM(model=folder, dtype="bfloat16", max_model_len=2048, gpu_memory_utilization=0.3, enforce_eager=True, seed=0,
          kv_cache_dtype="oscar_cov_int2", enable_prefix_caching=False, max_num_seqs=4, max_num_batched_tokens=256,
          skip_tokenizer_init=True)
init_s = time.time() - t0
lens = [900, 333, 1400]
prompts = [{"prompt_token_ids": [1] + [(7 * i + 13 * t) % 30000 + 100 for t in range(n - 1)]} for i, n in enumerate(lens)]
outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True, detokenize=False))
ids = [list(o.outputs[0].token_ids) for o in outs]
import oscar_kv  # noqa: E402  (where the plugin came from)
print("RESULT " + json.dumps({"init_s": init_s, "generate_s": time.time() - t0 - init_s, "ids": ids, "entry_points": plugins,
                              "oscar_kv_from": oscar_kv.__file__}))
