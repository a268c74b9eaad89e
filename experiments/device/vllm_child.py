"""vllm_child.py: what the vLLM experiment scripts (experiments/vllm_bench.py, vllm_plugin_check.py, vllm_smoke.py)
share: the Llama configurations of their dummy-weight engines, written as a model folder's config.json, and
run_child(), one engine run in a fresh interpreter (its own CUDA context and time limit) that reports on a line
'RESULT <json>'."""
import json
import os
import subprocess
import sys
import time

SMALL_LLAMA = {  # a small Llama: 4 layers, 16 query / 8 KV heads of head_dim 128, vocab 32000
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
    "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 32000, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "torch_dtype": "bfloat16", "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
}
# Llama-3-8B's shapes: hidden 4096, 32 layers, 32 query / 8 KV heads of head_dim 128, vocab 128256
LLAMA3_8B = dict(SMALL_LLAMA, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                 vocab_size=128256, max_position_embeddings=131072)


def write_config(folder, config):
    """A model folder for load_format="dummy": its config.json alone."""
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)


def run_child(code, args, timeout, env=None):
    """`python -c code args...` with vLLM in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0): (the dict of its RESULT line,
    or None when it printed none; the exit status, or "timeout"; seconds; its stdout and stderr)."""
    t0 = time.time()
    env = dict(os.environ if env is None else env, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    try:
        p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                           env=env)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = "timeout", ((e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace"))
    line = next((ln for ln in text.splitlines() if ln.startswith("RESULT ")), None)
    return (json.loads(line[7:]) if line else None), rc, round(time.time() - t0, 1), text
