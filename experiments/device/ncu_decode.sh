#!/usr/bin/env bash
# ncu_decode.sh LIB OUT [decode|prefill|all]: ncu readings of the decode (and prefill-quantize) kernels on the shapes where the bandwidth targets are
# missed (speed of light, occupancy, warp stalls, issue slots, pipes, memory), one CSV per shape in OUT, plus
# the merge kernel's duration. Needs ncu (CUDA toolkit) and torch on the GPU machine.
set -uo pipefail
lib=$1; out=$2; what=${3:-all}; mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats"
run() {  # name fmt hd bits batch ctx [q kv]
  local name=$1; shift
  timeout 120 ncu -k 'regex:decode_kernel|merge_kernel' -s 2 -c 2 $sections --page details --csv \
    python3 "$here/profile_decode.py" --lib "$lib" --fmt "$1" --head-dim "$2" --bits "$3" --batch "$4" --ctx "$5" \
    --q-heads "${6:-32}" --kv-heads "${7:-8}" > "$out/$name.csv" 2> "$out/$name.err"
  echo "$name: rc=$?"
}
if [ "$what" != prefill ]; then
run cov2_hd128_b1_128k cov 128 2 1 131072
run cov2_hd128_b32_32k cov 128 2 32 32768
run cov4_hd128_b32_32k cov 128 4 32 32768
run omni2_hd128_b32_32k omni 128 2 32 32768
run cov2_hd64_b32_32k cov 64 2 32 32768
fi
# prefill-quantize kernels (the first launch of each shape: the whole cache written once)
prefill() {  # name fmt hd bits batch ctx
  local name=$1; shift
  timeout 120 ncu -k 'regex:prefill_kernel' -c 1 $sections --page details --csv \
    python3 "$here/profile_decode.py" --lib "$lib" --fmt "$1" --head-dim "$2" --bits "$3" --batch "$4" --ctx "$5" --calls 1 \
    > "$out/$name.csv" 2> "$out/$name.err"
  echo "$name: rc=$?"
}
if [ "$what" != decode ]; then
  prefill prefill_cov2_hd128_b8_32k cov 128 2 8 32768
  prefill prefill_omni2_hd128_b8_32k omni 128 2 8 32768
fi
