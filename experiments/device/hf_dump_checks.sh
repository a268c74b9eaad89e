#!/usr/bin/env bash
# hf_dump_checks.sh OUT [STEP...]: experiments/hf_dump.py on a GPU machine, in one command, logs in OUT:
#   versions.log   python/torch/transformers/h5py, the GPU, which of the eleven model types transformers knows
#   bf16.log       --random all, bfloat16 model, 2048 tokens in chunks of 512, the quick check
#   fp32_full.log  --random all, float32 model, 2048 tokens in chunks of 500, --check full (every layer and query)
#   long.log       --random all, float32 model, 16384 tokens in chunks of 1024 (sliding-window caches over many chunks)
#   chunks.log     gemma3 and gpt_oss (float32, 2048 tokens): chunks of 256 vs one pass (compare_dumps.py, 1e-4);
#                  gpt_oss in bfloat16 the same way, per layer, for information
#   8b.log         Llama-3-8B shapes (random bf16 weights), 32768 tokens in chunks of 1024, float16 storage:
#                  time and peak GPU memory (the file is deleted afterwards)
#   test.log       tests/test_hf_dump.py with HF_DUMP_TEST_DEVICE=cuda
# STEPs (default all): bf16 fp32_full 8b long chunks test. Prints one line per step; exits 1 if any step failed.
set -uo pipefail
out=$1; shift
steps=${*:-bf16 fp32_full 8b long chunks test}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export PYTHONUNBUFFERED=1
export text=data/text/kjv.txt.gz
export work=$(mktemp -d /tmp/hfdump.XXXXXX)
fails=0
step() {  # step NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  case " $steps " in *" $name "*) ;; *) return 0 ;; esac
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc ($(( $(date +%s) - t0 )) s) $(grep -E 'worst|failures|error|GiB|diff' "$out/$name.log" | tail -n 1)"
  [ "$rc" = 0 ] || fails=$((fails + 1))
}
python3 - > "$out/versions.log" 2>&1 <<'EOF'
import sys, torch, transformers, h5py
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "h5py", h5py.__version__)
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
archs = ["llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "gemma3_text", "phi3", "olmo2", "granite", "smollm3", "gpt_oss"]
print("known:", [a for a in archs if a in CONFIG_MAPPING_NAMES], "unknown:", [a for a in archs if a not in CONFIG_MAPPING_NAMES])
EOF
cat "$out/versions.log"
step bf16 90 python3 experiments/hf_dump.py --random all --model-dtype bfloat16 --text $text --tokens 2048 --chunk 512 --out "$work/bf16"
step fp32_full 90 python3 experiments/hf_dump.py --random all --model-dtype float32 --check full --text $text --tokens 2048 --chunk 500 --out "$work/fp32"
step 8b 180 python3 experiments/hf_dump.py --random llama-8b --model-dtype bfloat16 --dtype float16 --text $text --tokens 32768 --chunk 1024 --out "$work/8b.h5"
rm -f "$work/8b.h5"
step long 120 python3 experiments/hf_dump.py --random all --model-dtype float32 --text $text --tokens 16384 --chunk 1024 --dtype float16 --out "$work/long"
chunks() {  # float32: the same tensors to rounding; bfloat16 (gpt_oss): printed per layer, not judged (see README)
  for a in gemma3 gpt_oss; do
    python3 experiments/hf_dump.py --random $a --model-dtype float32 --text $text --tokens 2048 --chunk 256 --check off --out "$work/c_$a.h5" &&
    python3 experiments/hf_dump.py --random $a --model-dtype float32 --text $text --tokens 2048 --chunk 0 --check off --out "$work/o_$a.h5" &&
    python3 experiments/hf/compare_dumps.py "$work/c_$a.h5" "$work/o_$a.h5" --tol 1e-4 || return 1
  done
  python3 experiments/hf_dump.py --random gpt_oss --model-dtype bfloat16 --text $text --tokens 2048 --chunk 256 --check off --out "$work/cb.h5" &&
  python3 experiments/hf_dump.py --random gpt_oss --model-dtype bfloat16 --text $text --tokens 2048 --chunk 0 --check off --out "$work/ob.h5" &&
  { python3 experiments/hf/compare_dumps.py "$work/cb.h5" "$work/ob.h5" --per-layer || true; }
}
export -f chunks
step chunks 180 bash -c chunks
step test 330 env HF_DUMP_TEST_DEVICE=cuda python3 tests/test_hf_dump.py
rm -rf "$work"
echo "hf_dump_checks: $fails step(s) failed"
[ "$fails" = 0 ]
