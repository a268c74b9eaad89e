#!/usr/bin/env python3
"""vllm_smoke.py OUT: vllm.LLM generates greedily from a Llama-shaped model of dummy weights (load_format="dummy"; a
config.json written to a temporary folder; no tokenizer, prompts as token ids), BF16 cache, first eager, then with
vLLM's CUDA graphs; each configuration in its own process with a time limit. Writes OUT/smoke.json (versions, what
ran, the generated ids, times) and prints a line per configuration. Needs vllm importable (vllm_carry.sh smoke sets
PYTHONPATH)."""
import json
import os
import sys
import tempfile

from vllm_child import SMALL_LLAMA as CONFIG, run_child, write_config

CHILD = r'''
import json, sys, time
t0 = time.time()
import vllm
from vllm import LLM, SamplingParams
t_import = time.time() - t0
folder, eager = sys.argv[1], sys.argv[2] == "eager"
t0 = time.time()
llm = LLM(model=folder, skip_tokenizer_init=True, load_format="dummy", dtype="bfloat16", max_model_len=4096,
          gpu_memory_utilization=0.3, enforce_eager=eager, seed=0)
t_init = time.time() - t0
prompts = [{"prompt_token_ids": list(range(10 + i, 10 + i + 200))} for i in range(4)]
sp = SamplingParams(temperature=0.0, max_tokens=32, detokenize=False, ignore_eos=True)
t0 = time.time()
outs = llm.generate(prompts, sp)
t_gen = time.time() - t0
ids = [list(o.outputs[0].token_ids) for o in outs]
again = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, sp)]
print("RESULT " + json.dumps({"vllm": vllm.__version__, "import_s": t_import, "init_s": t_init, "generate_s": t_gen,
                              "ids": ids, "deterministic": ids == again}))
'''


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    res = {"config": CONFIG, "runs": {}}
    with tempfile.TemporaryDirectory() as d:
        write_config(d, CONFIG)
        for mode, limit in (("eager", 420), ("graphs", 420)):
            line, rc, wall, text = run_child(CHILD, [d, mode], limit)
            r = dict(line or {}, rc=rc, wall_s=wall)
            if not line:
                r["log_tail"] = text[-4000:]
            res["runs"][mode] = r
            with open(os.path.join(out, f"{mode}.log"), "w") as f:
                f.write(text)
            print(f"{mode}: rc {rc}, {r.get('wall_s')} s" + (f", vllm {r['vllm']}, init {r['init_s']:.1f} s, 4 x 32 tokens in "
                  f"{r['generate_s']:.2f} s, deterministic {r['deterministic']}, first ids {r['ids'][0][:8]}" if line else
                  "; log tail:\n" + text[-2500:]), flush=True)
            if not line:
                break
    with open(os.path.join(out, "smoke.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
