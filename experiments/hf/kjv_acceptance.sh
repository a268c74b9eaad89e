#!/usr/bin/env bash
# kjv_acceptance.sh BIN_DIR OUT_DIR [NEEDLE_DISTANCES]: oscar_kv.hf against oscar-eval, on a machine with a CUDA GPU.
# kjv-llama-hd128 (bundled float16 parts) is exported to a Hugging Face folder (export_llama2c.py); oscar-dump gives the
# token ids of held-out Revelation (1024) and Genesis (2048: the first 1024 calibrate, the rest is needle filler);
# oscar-eval (BIN_DIR, CPU reference; and --gpu, its own kernel path) and experiments/hf_eval.py (transformers +
# oscar_kv.hf through the kernels) evaluate oscar-omni and oscar-cov; OUT_DIR/comparison.md holds loss / Δloss / KL /
# top-1 from both and the differences. oscar-cov runs twice on the HF side: with rotations fitted on the HF model by
# oscar_kv.hf.calibrate (oscar-rotate over an hf_dump capture) and with oscar-rotate's rotations of the llama2.c dump
# permuted into the HF key order (export_llama2c.py --rotations; the same matrices oscar-eval fits, so the same codes).
# The needle test at NEEDLE_DISTANCES (default 256,512,1024,1536; oscar-eval's --recall lays out the same sequence,
# run it on the CPU for the reference) runs beside them, one process per distance. BIN_DIR holds oscar-dump, oscar-eval,
# oscar-rotate; OSCAR_KERNELS_LIB names liboscar_kernels.so. Exit 0 when every |Δloss diff| <= 0.01 nats.
set -uo pipefail
bin=$(cd "$1" && pwd); out=$2; needle=${3:-256,512,1024,1536}
here=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-python3}
M=$here/data/kjv-llama-hd128/kjv-llama-hd128.f16; TOK=$here/data/stories260K/tok512.bin; TXT=$here/data/text/kjv.txt.gz
w=$out/work; N=${TOKENS:-1024}  # TOKENS: a shorter passage for a quick run
mkdir -p "$w" || exit 1
export PATH=$bin:$PATH OSCAR_BUILD=${OSCAR_BUILD:-}
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

stamp "export"
$py "$here/experiments/hf/export_llama2c.py" "$M" --out "$w/kjv-hf" --force || exit 1
stamp "oscar-dump"
"$bin/oscar-dump" --model "$M" --tokenizer "$TOK" --text "$TXT" --offset -404 --tokens "$N" --out "$w/rev.h5" 2>/dev/null || exit 1
"$bin/oscar-dump" --model "$M" --tokenizer "$TOK" --text "$TXT" --offset 0 --tokens 2048 --out "$w/gen.h5" 2>/dev/null || exit 1
"$bin/oscar-dump" --model "$M" --tokenizer "$TOK" --text "$TXT" --offset 0 --tokens 1024 --out "$w/gen1024.h5" 2>/dev/null || exit 1
"$bin/oscar-rotate" --calib "$w/gen1024.h5" --recipe oscar-cov --out "$w/rot-l2c.h5" --quiet || exit 1
$py "$here/experiments/hf/export_llama2c.py" --rotations "$w/rot-l2c.h5" --out "$w/rot-hf.h5" || exit 1

common=(--model "$M" --tokenizer "$TOK" --text "$TXT" --offset -404 --tokens "$N" --calib-tokens 1024 --quiet)
stamp "oscar-eval (CPU, background; --gpu after it)"
( "$bin/oscar-eval" "${common[@]}" --recipes fp16,oscar-omni,oscar-cov --bits 2,4 \
    --out "$out/oscar-eval-cpu" > "$w/oscar-eval-cpu.log" 2>&1; echo "rc=$?" >> "$w/oscar-eval-cpu.log" ) &
cpu_pid=$!
( "$bin/oscar-eval" "${common[@]}" --recipes fp16,oscar-omni,oscar-cov --bits 2,4 --gpu \
    --out "$out/oscar-eval-gpu" > "$w/oscar-eval-gpu.log" 2>&1; echo "rc=$?" >> "$w/oscar-eval-gpu.log" ) &
gpu_pid=$!

hf=("$here/experiments/hf_eval.py" --model "$w/kjv-hf" --token-ids "$w/rev.h5" --calib-ids "$w/gen.h5" --calib-tokens 1024)
# The HF runs are bound by Python's per-token overhead, not the GPU: they run side by side (OMP_NUM_THREADS=2 each).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
tmo=(timeout "${HF_LIMIT:-1800}")  # HF_LIMIT: seconds each HF run may take (a bounded device call)
pids=()
stamp "hf_eval: fp16, oscar-omni, oscar-cov (calibrated on the HF model) at 2 and 4 bits, greedy from 16 Revelation tokens"
prompt=$($py -c "import h5py; print('ids:' + ','.join(map(str, h5py.File('$w/rev.h5')['token_ids'][:16])))")
"${tmo[@]}" $py "${hf[@]}" --recipes fp16,oscar-omni,oscar-cov --bits 2,4 --prompt "$prompt" --generate 48 --out "$out/hf-eval" \
  > "$w/hf-eval.log" 2>&1 &
pids+=($!)
stamp "hf_eval: oscar-cov with oscar-rotate's llama2.c rotations permuted to the HF key order"
"${tmo[@]}" $py "${hf[@]}" --recipes oscar-cov --bits 2,4 --rotations "$w/rot-hf.h5" --out "$out/hf-eval-l2crot" \
  > "$w/hf-eval-l2crot.log" 2>&1 &
pids+=($!)
ds=()
if [ -n "$needle" ] && [ "${SKIP_NEEDLE:-0}" != 1 ]; then
  for d in ${needle//,/ }; do  # one run per distance, so that each finished one is kept
    stamp "hf_eval: needle at D = $d (2 bits; oscar-cov with oscar-rotate's rotations)"
    "${tmo[@]}" $py "${hf[@]}" --recipes oscar-omni,oscar-cov --bits 2 --rotations "$w/rot-hf.h5" --tokens $(( N < 128 ? N : 128 )) \
      --needle "$d" --out "$out/hf-needle-$d" > "$w/hf-needle-$d.log" 2>&1 &
    pids+=($!); ds+=("$d")
  done
fi
stamp "waiting"
wait "${pids[@]}" $gpu_pid $cpu_pid
stamp "finished"
for n in hf-eval hf-eval-l2crot; do echo "== $n"; tail -n 30 "$w/$n.log"; done
for d in "${ds[@]}"; do
  echo "== needle D = $d"; sed -n '/^| recipe | D =/,$p' "$out/hf-needle-$d/eval.md" 2>/dev/null || tail -n 5 "$w/hf-needle-$d.log"
done
tail -n 2 "$w/oscar-eval-cpu.log" "$w/oscar-eval-gpu.log"
stamp "comparison"
$py "$here/experiments/hf/compare_evals.py" "$out" hf-eval,hf-eval-l2crot oscar-eval-cpu,oscar-eval-gpu
status=$?
stamp "done"
exit $status
