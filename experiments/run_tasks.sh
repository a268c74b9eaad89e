#!/usr/bin/env bash
# run_tasks.sh [BUILD_DIR]: long-context task accuracy on the CPU reference caches (oscar-eval --tasks) for the two real
# models, SmolLM2-135M-Instruct and Gemma 3 270M (skipped with a note where a GGUF is absent): passkey and single-needle
# tasks (oscar-tasks, the models' own tokenizers) at 1K and 2K tokens, needles at depths 0.1 / 0.5 / 0.9, 2 samples each;
# full precision, naive@2 (no rotation, no window: the broken baseline), kivi, turboquant, oscar-omni and oscar-cov at 2
# bits (oscar-cov calibrated on Genesis), into ${OSCAR_RESULTS:-results}/tasks/<model>/. The multi-key and
# variable-tracking tasks and the longer lengths run on the GPU (experiments/device/tasks_gpu.sh): these small models
# fail them at full precision, and a 2-core CPU would take hours for 4K-32K prompts. QUICK=1: passkey at 1024 tokens,
# one sample per depth, full precision and oscar-omni@2 on SmolLM2 only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-${OSCAR_BUILD:-$root/build}}" && pwd)
cd "$root"
res=${OSCAR_RESULTS:-results}/tasks
text=data/text/kjv.txt.gz
if [ "${QUICK:-0}" = 1 ]; then
  models="smollm2"; tasks=(passkey); lengths=(1024); samples=1; recipes=oscar-omni
else
  models="smollm2 gemma3"; tasks=(passkey niah_single); lengths=(1024 2048); samples=2
  recipes=naive,kivi,turboquant,oscar-omni,oscar-cov
fi
for m in $models; do
  case $m in
    smollm2) gguf=data/models/SmolLM2-135M-Instruct.Q4_1.gguf; fetch=data/fetch_smollm2.sh ;;
    gemma3) gguf=data/models/gemma-3-270m-q4_k_m.gguf; fetch=data/fetch_gemma3.sh ;;
  esac
  if [ ! -f "$gguf" ]; then echo "tasks: $gguf absent (bash $fetch fetches it): no $m tasks"; continue; fi
  start=$(date +%s)
  mkdir -p "$res/$m"
  "$build/apps/oscar-tasks" --model "$gguf" --tasks "${tasks[@]}" --lengths "${lengths[@]}" --samples $samples \
    --out "$res/$m/tasks.jsonl" >/dev/null
  "$build/apps/oscar-eval" --quiet --model "$gguf" --text $text --calib-offset 0 --calib-tokens 2048 \
    --tasks "$res/$m/tasks.jsonl" --recipes $recipes --bits 2 --out "$res/$m" >/dev/null
  echo "tasks $m: $(( $(date +%s) - start )) s ($res/$m/tasks.md)"
done
