#!/usr/bin/env bash
# regenerate.sh [--quick] [--results FILE] [--build DIR]: rebuilds every table and plot of RESULTS.md from the bundled
# data, SmolLM2-135M-Instruct and Gemma 3 270M (data/fetch_smollm2.sh, data/fetch_gemma3.sh) on a CPU-only machine: the
# TNI and attention-sink tables of SmolLM2 (main.sh) and Gemma 3, the dumps and every shipped sweep (run_sweeps.sh; both
# real models' included), the end-to-end evaluation (run_eval.sh), the long-context tasks on the CPU (run_tasks.sh) and
# the covariance-scope ablation (per-layer vs per-KV-head OSCAR rotations: results/sweep/covariance-scope and
# results/eval/*-scope); then write_results.py writes the new tables, with the readings computed from them, into
# RESULTS.md (or FILE) between its <!-- BEGIN name --> / <!-- END name --> markers. RESULTS.md changes only if every
# step succeeded.
# --quick: reduced evaluation (the CI test): SmolLM2's TNI on 512 tokens, no SmolLM2 sweep, no Gemma 3, no tasks but
# SmolLM2's passkey, no ablation (their sections are kept), and where the GGUF is absent no SmolLM2 at all (its sections
# kept); OSCAR_RESULTS=DIR writes results under DIR; --build DIR (or OSCAR_BUILD=DIR) takes every tool from the build
# folder DIR (default: build/; CTest passes its own).
# Where a GPU is present (nvidia-smi -L succeeds and the build has oscar-bench and oscar-eval), it also runs
# the kernel benchmark (results/kernel_bench.md, .json) and oscar-eval --gpu for oscar-omni and oscar-cov at 2 bits
# (results/eval-gpu-kjv-hd128/), and writes both into RESULTS.md's GPU sections (markers kernel-bench and
# eval-gpu-kjv-hd128); without a GPU those sections keep the last GPU run's tables. The graph-timed kernel benchmarks
# against PyTorch SDPA: BENCHMARKS.md (experiments/bench_decode_graph.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
doc=RESULTS.md; quick=0; build=${OSCAR_BUILD:-build}
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --results) doc=$2; shift ;;
    --build) build=$2; shift ;;
    *) echo "regenerate: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
build=$(mkdir -p "$build" && cd "$build" && pwd)
export OSCAR_BUILD=$build
res=${OSCAR_RESULTS:-results}
start=$(date +%s)
export QUICK=$quick
keep=""  # RESULTS.md sections left as they are (write_results.py)
gguf=data/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ "$quick" = 1 ]; then
  keep="sweep-smollm2 tni-gemma3 sweep-gemma3 eval-gemma3 tasks-smollm2 tasks-gemma3 covariance-scope"
  if [ -f "$gguf" ]; then OSCAR_MAIN_TOKENS=512 bash experiments/main.sh
  else keep="$keep tni eval-smollm2"; echo "regenerate: $gguf absent (bash data/fetch_smollm2.sh fetches it): quick mode keeps RESULTS.md's SmolLM2 sections"; fi
else
  bash experiments/main.sh
fi
[ -x "$build/apps/oscar-sweep" ] || { echo "regenerate: build first (bash .ci/setup $build)" >&2; exit 1; }
experiments/run_sweeps.sh "$build" "$res/sweep"
if [ "$quick" = 0 ]; then  # Gemma 3 270M's token norms and sinks, from the sweep's Revelation dump
  mkdir -p "$res/tni-gemma3"
  "$build/apps/oscar-analyze" "$res/dumps/gemma3-revelation.h5" --csv "$res/tni-gemma3/tni.csv" --json "$res/tni-gemma3/tni.json" \
    --plots "$res/tni-gemma3" --quiet > "$res/tni-gemma3/table.txt"
fi
QUICK=$quick experiments/run_eval.sh "$build"
tstart=$(date +%s)
QUICK=$quick experiments/run_tasks.sh "$build"
echo "tasks: $(( $(date +%s) - tstart )) s"
# Ablation: covariance rotations per layer (oscar-cov) against per KV head (oscar-cov-head), at 2 and 4 bits on
# SmolLM2 and kjv-llama-hd128: the sweep (experiments/ablations/covariance-scope.yaml) into $res/sweep/covariance-scope,
# oscar-eval (CPU, held-out Revelation, rotations calibrated on Genesis) into $res/eval/{smollm2,kjv-hd128}-scope: RESULTS.md's
# section covariance-scope. Not in --quick mode (it needs the SmolLM2 dumps).
if [ "$quick" = 0 ]; then
  sstart=$(date +%s)
  "$build/apps/oscar-sweep" experiments/ablations/covariance-scope.yaml --quiet --output "$res/sweep/covariance-scope" >/dev/null
  scope=(--text data/text/kjv.txt.gz --offset -404 --calib-offset 0 --recipes fp16,oscar-cov,oscar-cov-head --bits 2,4)
  "$build/apps/oscar-eval" --quiet --model "$gguf" "${scope[@]}" --tokens 2048 --calib-tokens 2048 --out "$res/eval/smollm2-scope" >/dev/null
  "$build/apps/oscar-eval" --quiet --model data/kjv-llama-hd128/kjv-llama-hd128.f16 --tokenizer data/stories260K/tok512.bin "${scope[@]}" \
    --tokens 2048 --calib-tokens 2048 --out "$res/eval/kjv-hd128-scope" >/dev/null
  echo "covariance scope ablation: $(( $(date +%s) - sstart )) s ($res/sweep/covariance-scope, $res/eval/{smollm2,kjv-hd128}-scope)"
fi
mode=""; if [ "$quick" = 1 ]; then mode=", quick mode"; fi
gpu_stamp=""
if nvidia-smi -L >/dev/null 2>&1 && [ -x "$build/apps/oscar-bench" ] && [ -x "$build/apps/oscar-eval" ]; then
  gstart=$(date +%s)
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
  if [ "$quick" = 1 ]; then bench=(--batch 1 8 --ctx 32768 --reps 10); toks=(--tokens 384 --calib-tokens 512)
  else bench=(--batch 1 8 32 --ctx 32768 131072 --reps 30); toks=(--tokens 2048 --calib-tokens 2048); fi
  "$build/apps/oscar-bench" "${bench[@]}" --json "$res/kernel_bench.json.tmp" > "$res/kernel_bench.md.tmp"
  echo "oscar-bench ${bench[*]}" > "$res/kernel_bench.cmd"
  "$build/apps/oscar-eval" --quiet --gpu --model data/kjv-llama-hd128/kjv-llama-hd128.f16 --tokenizer data/stories260K/tok512.bin \
    --text data/text/kjv.txt.gz --offset -404 --calib-offset 0 --recipes fp16,oscar-omni,oscar-cov --bits 2 "${toks[@]}" \
    --out "$res/eval-gpu-kjv-hd128" >/dev/null
  echo "oscar-eval --gpu --recipes fp16,oscar-omni,oscar-cov --bits 2 ${toks[*]}" > "$res/eval-gpu-kjv-hd128/cmd"
  mv "$res/kernel_bench.md.tmp" "$res/kernel_bench.md"
  mv "$res/kernel_bench.json.tmp" "$res/kernel_bench.json"
  gpu_stamp="$(date -u +%Y-%m-%d), $device, $(( $(date +%s) - gstart )) s$mode"
else
  echo "regenerate: no GPU (nvidia-smi -L failed, or $build/apps/oscar-bench or oscar-eval missing): kept the last GPU tables in $doc (kernel-bench, eval-gpu-kjv-hd128)"
fi
stamp="$(date -u +%Y-%m-%d), $(nproc) cores, $(( $(date +%s) - start )) s in all$mode"
OSCAR_KEEP_SECTIONS="$keep" OSCAR_GPU_STAMP="$gpu_stamp" python3 experiments/write_results.py "$doc" "$stamp" "$res"
echo "regenerate: $doc updated ($stamp${gpu_stamp:+; GPU sections: $gpu_stamp})"
