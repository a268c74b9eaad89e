#!/usr/bin/env bash
# gpu_checks.sh DEVBIN OUT [tests|bench|all]: every check of a GPU machine, in one command, on binaries packed by
# pack.sh (DEVBIN = the unpacked folder with bin/ and lib/): every GPU test (gpu_test_ops --slow, gpu_test_eval;
# logs in OUT), compute-sanitizer memcheck on a selection of gpu_test_ops's cases, the kernel benchmark (oscar-bench, Markdown + JSON), PyTorch SDPA side by
# side (bench_vs_sdpa.py, when torch is importable; with large_shape_check.py first), oscar-eval --gpu for oscar-omni and oscar-cov,
# and, where torch and transformers are importable, the Python package's GPU tests (caches, graphs, generate, memcheck).
# The test binaries have the data folder compiled in as the build machine's /work/main: where that path
# does not exist, it is linked to this checkout. Prints one line per step; exits 1 if any step failed.
set -uo pipefail
devbin=$(cd "$1" && pwd); out=$2; what=${3:-all}   # tests: GPU tests, memcheck, oscar-eval; bench: benchmarks
mkdir -p "$out"
root=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH="$devbin/lib:${LD_LIBRARY_PATH:-}"
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$root" /work/main; }
cd "$root"
fails=0
step() {  # step NAME LIMIT_S CMD...: runs CMD with a time limit, output in OUT/NAME.log
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc ($(( $(date +%s) - t0 )) s) $(grep -E 'PASSED|FAILED|ERROR SUMMARY|error' "$out/$name.log" | tail -n 1)"
  [ "$rc" = 0 ] || fails=$((fails + 1))
}
nvidia-smi -L
if [ "$what" != bench ]; then
# The kernel driver: every case, the long-split ones included (one line per case in the log), then the
# model-level oscar-eval check; compute-sanitizer memcheck on a small selection of the driver's cases (every
# op but long/real/rotated, one shape per group (logits: its peaky-g4 and hd64 cases): fwht hd128, prefill/append mix-h3, stress-h2 and the head_dim 64/256
# shapes, decode peaky-g4, stress-g4-appended, stress-g3-hd64-appended, stress-g2-hd256-appended, peaky-g16, the api cases).
step gpu_test_ops 900 "$devbin/bin/gpu_test_ops" --slow
step gpu_test_eval 300 "$devbin/bin/gpu_test_eval"
step memcheck_gpu_test_ops 900 compute-sanitizer --tool memcheck --error-exitcode 1 "$devbin/bin/gpu_test_ops" \
  -o fwht,prefill,append,decode,logits,api -s hd128,mix-h3,stress-h2,mix-hd64-h3,stress-hd256-h2,peaky-g4,stress-g4-appended,stress-g3-hd64-appended,stress-g2-hd256-appended,peaky-g16,bad-input
if python3 -c "import torch, transformers" 2>/dev/null; then  # the Python package: caches, graphs, transformers
  export OSCAR_KERNELS_LIB="$devbin/lib/liboscar_kernels.so" PATH="$devbin/bin:$PATH"
  step gpu_test_python_cache 300 python3 tests/gpu_test_python_cache.py
  step gpu_test_hf 600 python3 tests/gpu_test_hf.py
  step memcheck_generate 400 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/gpu_test_hf.py --arch llama --one
  step memcheck_generate_sinks 400 compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/gpu_test_hf.py --arch gpt_oss --one
fi
fi
if [ "$what" != tests ]; then
step oscar_bench 400 "$devbin/bin/oscar-bench" --reps 30 --json "$out/oscar_bench.json"
if python3 -c "import torch" 2>/dev/null; then
  step large_shape_check 300 python3 experiments/device/large_shape_check.py --lib "$devbin/lib/liboscar_kernels.so"
  step bench_vs_sdpa 500 python3 experiments/bench_vs_sdpa.py --lib "$devbin/lib/liboscar_kernels.so" --reps 30 --json "$out/sdpa.json"
  step bench_decode_graph 500 python3 experiments/bench_decode_graph.py --lib "$devbin/lib/liboscar_kernels.so" --reps 20 \
    --json "$out/decode_graph.json" --markdown "$out/decode_graph.md"
fi
fi
if [ "$what" != bench ]; then
step eval_gpu 400 "$devbin/bin/oscar-eval" --quiet --gpu --model data/kjv-llama-hd128/kjv-llama-hd128.f16 \
  --tokenizer data/stories260K/tok512.bin --text data/text/kjv.txt.gz --offset -404 --calib-offset 0 \
  --recipes fp16,oscar-omni,oscar-cov --bits 2,4 --tokens 2048 --calib-tokens 2048 --out "$out/eval_gpu"
fi
echo "gpu_checks: $fails step(s) failed; logs in $out"
[ "$fails" = 0 ]
