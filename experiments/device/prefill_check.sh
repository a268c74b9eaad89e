#!/usr/bin/env bash
# prefill_check.sh DEVBIN OLD_LIB OUT: the quantize kernels' GPU checks and speed in one call, on binaries packed by
# pack.sh (DEVBIN: the unpacked folder with bin/ and lib/): gpu_test_ops's bit-exact cases (fwht, prefill, append,
# rotated, api) and the decode cases that read what they wrote (decode, logits), compute-sanitizer memcheck on the
# prefill/append cases of every head_dim, then prefill_bench.py with OLD_LIB (a build to compare with) and DEVBIN's
# library side by side, and ncu's executed warp instructions of the oscar-cov prefill kernel per token and KV head
# (batch 8, 8 KV heads, 32K tokens) for both. Logs in OUT; prints one line per step.
set -uo pipefail
devbin=$(cd "$1" && pwd); old=$2; out=$3; mkdir -p "$out"
root=$(cd "$(dirname "$0")/../.." && pwd); here="$root/experiments/device"
export LD_LIBRARY_PATH="$devbin/lib:${LD_LIBRARY_PATH:-}"
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$root" /work/main; }
cd "$root"
step() {  # step NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "$name: rc=$? ($(( $(date +%s) - t0 )) s) $(grep -E 'passed|PASSED|FAILED|ERROR SUMMARY|faster' "$out/$name.log" | tail -n 1)"
}
nvidia-smi -L
step exact 300 "$devbin/bin/gpu_test_ops" -o fwht,prefill,append,rotated,api
step decode 300 "$devbin/bin/gpu_test_ops" -o decode,logits
step memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 1 "$devbin/bin/gpu_test_ops" -o prefill,append \
  -s mix-h3,stress-h2,mix-hd64-h3,stress-hd256-h2
step bench 300 python3 "$here/prefill_bench.py" --lib "old=$old" --lib "new=$devbin/lib/liboscar_kernels.so"
echo "| build | shape | warp instructions | per token per KV head |" > "$out/ncu.md"; echo "|---|---|---|---|" >> "$out/ncu.md"
for lab in old new; do
  lib=$old; [ "$lab" = new ] && lib="$devbin/lib/liboscar_kernels.so"
  for s in "128 2" "128 4" "64 2" "256 2"; do
    set -- $s
    n=$(timeout 120 ncu -k 'regex:prefill_kernel' -c 1 --metrics smsp__inst_executed.sum --csv \
      python3 "$here/profile_decode.py" --lib "$lib" --fmt cov --head-dim "$1" --bits "$2" --batch 8 --ctx 32768 --calls 0 \
      --q-heads $([ "$1" = 256 ] && echo 16 || echo 32) --kv-heads 8 2>/dev/null | grep inst_executed | awk -F'","' '{gsub(/[",]/,"",$NF); print $NF}' | tail -n 1)
    per=$(python3 -c "print(f'{$n / (8 * 8 * 32768):.1f}')" 2>/dev/null || echo "?")
    echo "| $lab | hd$1 INT$2 | ${n:-?} | $per |" >> "$out/ncu.md"
  done
done
cat "$out/ncu.md"
tail -n 40 "$out/bench.log"
