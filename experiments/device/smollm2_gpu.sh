#!/usr/bin/env bash
# smollm2_gpu.sh SUBCOMMAND ...: oscar-eval --gpu and gpu_test_ops's SmolLM2 real case on a GPU machine that
# cannot fetch the 98 MB GGUF and takes ~20-24 MB of carried files per call (64 MiB with the ~43 MB tree):
# the GGUF travels xz-compressed (90.5 MB) in parts over consecutive calls on one warm machine, is gathered in
# $STASH (default /tmp/smollm2), joined and checked against the sha256 of data/fetch_smollm2.sh.
# Run every subcommand from the repository root.
#
# On the build machine (PREFIX e.g. /work/main/build-smollm2-: folders PREFIX0 .. PREFIX4, git-ignored):
#   bash experiments/device/pack.sh BUILD /tmp/pb/dev          # gpu_test_ops, oscar-eval
#   bash experiments/device/make_smollm2_real_dump.sh /tmp/smollm2_real.h5
#   bash experiments/device/smollm2_gpu.sh split PREFIX /tmp/pb/dev.tar.xz /tmp/smollm2_real.h5
# then one device call per folder, back to back (the machine goes back 30 s after a call), carry [PREFIXk]:
#   call 0: bash build-smollm2-0/smollm2_gpu.sh stash build-smollm2-0 && bash /tmp/smollm2/smollm2_gpu.sh real $OUT
#   call k: bash /tmp/smollm2/smollm2_gpu.sh stash build-smollm2-k            (k = 1 .. N-2)
#   last:   bash /tmp/smollm2/smollm2_gpu.sh stash build-smollm2-N-1 && bash /tmp/smollm2/smollm2_gpu.sh eval $OUT
#           (or ... hf $OUT: the same weights through transformers + oscar_kv.hf against oscar-eval;
#            or ... vllm $OUT ROTATIONS TASKS: vLLM serving the same weights through the oscar_kv plugin, beside its BF16
#            cache, on an oscar-tasks file (vllm_carry.sh's stash must be on the machine: experiments/device/vllm_plugin_check.py);
#            or ... vllm-loss $OUT ROTATIONS EVAL_JSON... [--bits 4]: oscar-eval's passages and greedy prompts decoded token by
#            token in the engine (experiments/device/vllm_loss_check.py; --bits 4: oscar_cov_int4 against oscar-cov@4); ... vllm-memcheck $OUT ROTATIONS: compute-sanitizer memcheck
#            of the plugin's kernels in a short engine run; ... vllm-pip $OUT ROTATIONS: pip install of kernels/python into
#            a private folder, then an engine run that loads the plugin only through its vllm.general_plugins entry point)
# Subcommands:
#   split PREFIX DEV_TAR DUMP [FIRST PART]  (DEV_TAR, DUMP: - for none) xz the GGUF (MODEL, default data/models/SmolLM2-135M-Instruct.Q4_1.gguf);
#        PREFIX0 gets DEV_TAR, DUMP (xz), this script, a manifest and the stream's first FIRST bytes (default
#        5,000,000), PREFIX1.. the rest in PART-byte parts (default 21,400,000): each folder stays under ~22 MB.
#        The `gguf` Python package (transformers' GGUF loader needs it; the GPU machine lacks it) goes in PREFIX0
#        when the build machine's python3 has it.
#   stash DIR   copies DIR's files into $STASH (unpacking dev.tar.xz there) and lists the parts present.
#   real OUT    gpu_test_ops -o real with --real-dump (kjv-hd128 and smollm2-hd64 cases), log OUT/real.log.
#   hf OUT      joins the parts as `eval` does, makes a transformers folder of the GGUF (experiments/hf/gguf_to_hf.py),
#               dumps the token ids of 1024 tokens of Revelation and 1024 of Genesis (oscar-dump), and runs
#               oscar-eval (CPU and --gpu, in the background) and experiments/hf_eval.py (transformers + the kernels;
#               oscar-cov calibrated on the Genesis ids through oscar_kv.hf.calibrate) for fp16, oscar-omni and
#               oscar-cov at 2 and 4 bits, then experiments/hf/compare_evals.py: OUT/comparison.md.
#   eval OUT    joins the parts (count and stream sha256 from the manifest, GGUF sha256), then oscar-eval --gpu
#               on 1024 tokens of Revelation (calibration: 1024 tokens of Genesis), recipes fp16,oscar-cov at 2
#               and 4 bits (OUT/eval_gpu/), and oscar-omni alone (its refusal or its run: OUT/eval_omni.log).
# Measured (H100, 2026-11-24; eval step 60 s on 16 cores): oscar-cov@2 (gpu) loss 2.9156, Δ +0.1107, KL 0.1334, top-1
# 0.842; @4 +0.0007, KL 0.00092, 0.980; fp16 2.8050. The CPU reference of the same build: @2 +0.1177, KL 0.1335,
# 0.848; @4 +0.0012, KL 0.0009, 0.987. oscar-omni: refused (its kernels take head_dim 128 only in that build).
# Real op: smollm2-hd64 cov INT2 max rel err 1.4e-3 / 1.5e-3 / 2.1e-3 / 9.2e-4 (layers 3/12/20/25), INT4 1.4e-3 / 1.2e-3 / 9.5e-4 / 9.3e-4.
# The binaries have the build tree's data folder compiled in (BUILD_ROOT, default /work/main): where that
# path does not exist it is linked to this checkout.
set -euo pipefail
root=${OSCAR_ROOT:-$PWD}
stash=${STASH:-/tmp/smollm2}
gguf_name=SmolLM2-135M-Instruct.Q4_1.gguf
die() { echo "smollm2_gpu: error: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
gguf_sha() {  # the sha256 that data/fetch_smollm2.sh checks
  local s; s=$(sed -n 's/^gguf_sha=\([0-9a-f]\{64\}\)$/\1/p' "$root/data/fetch_smollm2.sh")
  [ -n "$s" ] || die "$root/data/fetch_smollm2.sh: no gguf_sha= line; run from the repository root"
  echo "$s"
}
device_env() {
  [ -x "$stash/dev/bin/oscar-eval" ] || die "$stash/dev: no unpacked binaries; stash the folder holding dev.tar.xz first"
  export PATH=/usr/local/cuda/bin:$PATH LD_LIBRARY_PATH="$stash/dev/lib:${LD_LIBRARY_PATH:-}"
  local b=${BUILD_ROOT:-/work/main}
  [ -e "$b" ] || { mkdir -p "$(dirname "$b")" && ln -sfn "$root" "$b"; }
}

join_gguf() {  # the stashed parts -> $stash/$gguf_name, checked (stream and GGUF sha256)
  [ -f "$stash/manifest" ] || die "$stash/manifest: missing; stash the first folder (PREFIX0) first"
  local want have
  want=$(awk '$1 == "parts" {print $2}' "$stash/manifest"); have=$(ls "$stash"/gguf.xz.* | wc -l)
  [ "$have" = "$want" ] || die "$stash: $have of $want parts; stash the missing folders (same warm machine) first"
  cat "$stash"/gguf.xz.* > "$stash/g.xz"
  [ "$(sha "$stash/g.xz")" = "$(awk '$1 == "stream_sha256" {print $2}' "$stash/manifest")" ] || die "$stash/g.xz: joined parts differ from the split stream"
  xz -d -c "$stash/g.xz" > "$stash/$gguf_name"
  [ "$(sha "$stash/$gguf_name")" = "$(gguf_sha)" ] || die "$stash/$gguf_name: sha256 differs from data/fetch_smollm2.sh's"
  echo "join: $stash/$gguf_name sha256 ok ($(stat -c %s "$stash/$gguf_name") bytes)"
}

cmd=${1:-}; shift || true
case "$cmd" in
split)
  [ $# -ge 3 ] || die "usage: smollm2_gpu.sh split PREFIX DEV_TAR DUMP [FIRST PART]"
  prefix=$1; devtar=$2; dump=$3; first=${4:-5000000}; part=${5:-21400000}
  model=${MODEL:-$root/data/models/$gguf_name}
  [ -f "$model" ] || die "$model: no such file; fetch it with data/fetch_smollm2.sh or set MODEL"
  [ "$(sha "$model")" = "$(gguf_sha)" ] || die "$model: sha256 differs from data/fetch_smollm2.sh's; fetch it again"
  [ "$devtar" = - ] || [ -f "$devtar" ] || die "$devtar: no such file (pack.sh makes it; - for none)"
  [ "$dump" = - ] || [ -f "$dump" ] || die "$dump: no such file (make_smollm2_real_dump.sh makes it; - for none)"
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  xz -T2 -6 -c "$model" > "$tmp/g.xz"
  rm -rf "${prefix}"[0-9]*
  mkdir -p "${prefix}0"
  head -c "$first" "$tmp/g.xz" > "${prefix}0/gguf.xz.00"
  (cd "$tmp" && tail -c +$((first + 1)) g.xz | split -b "$part" -d -a 2 --numeric-suffixes=1 - part.)
  n=1
  for p in "$tmp"/part.*; do
    mkdir -p "${prefix}$n"; mv "$p" "${prefix}$n/gguf.xz.$(printf %02d "$n")"; n=$((n + 1))
  done
  [ "$devtar" = - ] || cp "$devtar" "${prefix}0/dev.tar.xz"
  [ "$dump" = - ] || xz -6 -c "$dump" > "${prefix}0/smollm2_real.h5.xz"
  cp "$0" "${prefix}0/smollm2_gpu.sh"
  gdir=$(python3 -c 'import gguf, os; print(os.path.dirname(gguf.__file__))' 2>/dev/null || true)
  if [ -n "$gdir" ]; then  # the module and its dist-info (transformers reads the version from the metadata)
    dest=$(cd "${prefix}0" && pwd)/gguf-py.tar.xz
    (cd "$(dirname "$gdir")" && tar -cJf "$dest" gguf gguf-*.dist-info)
  fi
  printf 'parts %d\nstream_sha256 %s\n' "$n" "$(sha "$tmp/g.xz")" > "${prefix}0/manifest"
  for ((k = 0; k < n; ++k)); do echo "split: ${prefix}$k $(du -sb "${prefix}$k" | cut -f1) bytes"; done
  echo "split: $n folders; carry one per call, in order (see the header)"
  ;;
stash)
  [ $# -ge 1 ] && [ -d "$1" ] || die "usage: smollm2_gpu.sh stash DIR (a carried folder)"
  mkdir -p "$stash"
  cp "$1"/* "$stash"/
  if [ -f "$1/dev.tar.xz" ]; then tar -C "$stash" -xJf "$stash/dev.tar.xz" && rm "$stash/dev.tar.xz"; fi
  if [ -f "$stash/smollm2_real.h5.xz" ]; then xz -d -f "$stash/smollm2_real.h5.xz"; fi
  if [ -f "$stash/gguf-py.tar.xz" ]; then mkdir -p "$stash/pylib" && tar -C "$stash/pylib" -xJf "$stash/gguf-py.tar.xz"; fi
  echo "stash: $(ls "$stash"/gguf.xz.* 2>/dev/null | wc -l) part(s) in $stash: $(cd "$stash" && ls gguf.xz.* 2>/dev/null | tr '\n' ' ')"
  ;;
real)
  [ $# -ge 1 ] || die "usage: smollm2_gpu.sh real OUT"
  out=$1; mkdir -p "$out"; device_env
  nvidia-smi -L || true
  rc=0
  timeout 300 "$stash/dev/bin/gpu_test_ops" -o real --real-dump "$stash/smollm2_real.h5" > "$out/real.log" 2>&1 || rc=$?
  cat "$out/real.log"
  echo "real: rc=$rc"
  [ "$rc" = 0 ]
  ;;
hf)
  [ $# -ge 1 ] || die "usage: smollm2_gpu.sh hf OUT"
  out=$1; mkdir -p "$out"; device_env; join_gguf
  export PYTHONPATH="$stash/pylib${PYTHONPATH:+:$PYTHONPATH}" OSCAR_KERNELS_LIB="$stash/dev/lib/liboscar_kernels.so" OSCAR_BUILD=
  export PATH="$stash/dev/bin:$PATH"
  g=$stash/$gguf_name; txt=$root/data/text/kjv.txt.gz; w=$stash/hfwork; rm -rf "$w"; mkdir -p "$w"
  python3 "$root/experiments/hf/gguf_to_hf.py" "$g" "$w/smollm2-hf" 2>&1 | grep -v -E 'Converting|Loading|Writing' || die "gguf_to_hf failed"
  oscar-dump --quiet --model "$g" --text "$txt" --offset -404 --tokens 1024 --out "$w/rev.h5" || die "oscar-dump (Revelation) failed"
  oscar-dump --quiet --model "$g" --text "$txt" --offset 0 --tokens 1024 --out "$w/gen.h5" || die "oscar-dump (Genesis) failed"
  common=(--quiet --model "$g" --text "$txt" --offset -404 --calib-offset 0 --tokens 1024 --calib-tokens 1024
          --recipes fp16,oscar-omni,oscar-cov --bits 2,4)
  ( timeout 480 oscar-eval "${common[@]}" --out "$out/oscar-eval-cpu" > "$w/oe-cpu.log" 2>&1; echo "rc=$?" >> "$w/oe-cpu.log" ) &
  cpu=$!
  ( timeout 300 oscar-eval "${common[@]}" --gpu --out "$out/oscar-eval-gpu" > "$w/oe-gpu.log" 2>&1; echo "rc=$?" >> "$w/oe-gpu.log" ) &
  gpu=$!
  rc=0
  OMP_NUM_THREADS=4 timeout 480 python3 "$root/experiments/hf_eval.py" --model "$w/smollm2-hf" --token-ids "$w/rev.h5" \
    --calib-ids "$w/gen.h5" --calib-tokens 1024 --recipes fp16,oscar-omni,oscar-cov --bits 2,4 \
    --prompt "The capital of France is" --generate 24 --out "$out/hf-eval" > "$w/hf-eval.log" 2>&1 || rc=$?
  echo "hf_eval: rc=$rc"; tail -n 25 "$w/hf-eval.log"
  wait $cpu $gpu || true
  tail -n 3 "$w/oe-cpu.log" "$w/oe-gpu.log"
  python3 "$root/experiments/hf/compare_evals.py" "$out" hf-eval oscar-eval-cpu,oscar-eval-gpu
  ;;
eval)
  [ $# -ge 1 ] || die "usage: smollm2_gpu.sh eval OUT"
  out=$1; mkdir -p "$out"; device_env; join_gguf
  common=(--model "$stash/$gguf_name" --text "$root/data/text/kjv.txt.gz" --offset -404 --calib-offset 0
          --tokens 1024 --calib-tokens 1024)
  rc=0
  timeout 420 "$stash/dev/bin/oscar-eval" --quiet --gpu "${common[@]}" --recipes fp16,oscar-cov --bits 2,4 --out "$out/eval_gpu" \
    > "$out/eval_gpu.log" 2>&1 || rc=$?
  cat "$out/eval_gpu.log"  # the tables (eval.md, eval.csv in OUT/eval_gpu)
  echo "eval: fp16,oscar-cov rc=$rc"
  orc=0
  timeout 300 "$stash/dev/bin/oscar-eval" --quiet --gpu "${common[@]}" --recipes oscar-omni --bits 2,4 --out "$out/eval_omni" \
    > "$out/eval_omni.log" 2>&1 || orc=$?
  cat "$out/eval_omni.log"
  echo "eval: oscar-omni rc=$orc"
  [ "$rc" = 0 ]
  ;;
vllm|vllm-loss|vllm-memcheck|vllm-pip)
  [ $# -ge 2 ] || die "usage: smollm2_gpu.sh $cmd OUT ROTATIONS [TASKS | EVAL_JSON...]"
  out=$1; rot=$(realpath "$2"); shift 2; mkdir -p "$out"; join_gguf
  [ -f "$rot" ] || die "$rot: no such file (oscar-rotate makes it)"
  export PYTHONPATH="$root/kernels/python:$stash/pylib${PYTHONPATH:+:$PYTHONPATH}" OSCAR_KERNELS_LIB=${OSCAR_KERNELS_LIB:-$stash/dev/lib/liboscar_kernels.so}
  export OSCAR_KV_ROTATIONS="$rot"
  w=$stash/hfwork; mkdir -p "$w"
  [ -f "$w/smollm2-hf/config.json" ] || python3 "$root/experiments/hf/gguf_to_hf.py" "$stash/$gguf_name" "$w/smollm2-hf" 2>&1 \
    | grep -v -E 'Converting|Loading|Writing' || true
  [ -f "$w/smollm2-hf/config.json" ] || die "gguf_to_hf failed"
  run=("$root/experiments/device/vllm_carry.sh" run)
  case "$cmd" in
  vllm)  # TASKS: vLLM BF16 and the plugin on an oscar-tasks file (batch, alone, graphs, broken)
    [ $# -ge 1 ] && [ -f "$1" ] || die "usage: smollm2_gpu.sh vllm OUT ROTATIONS TASKS"
    bash "${run[@]}" "$root/experiments/device/vllm_plugin_check.py" "$out" "$w/smollm2-hf" "$(realpath "$1")" ;;
  vllm-loss)  # EVAL_JSON...: oscar-eval's passages and greedy prompts reproduced in the engine
    [ $# -ge 1 ] || die "usage: smollm2_gpu.sh vllm-loss OUT ROTATIONS EVAL_JSON..."
    bash "${run[@]}" "$root/experiments/device/vllm_loss_check.py" "$out" "$w/smollm2-hf" "$@" ;;
  vllm-memcheck)  # compute-sanitizer memcheck of the plugin's kernels in a short engine run
    export VLLM_ENABLE_V1_MULTIPROCESSING=0
    rc=0
    PATH=/usr/local/cuda/bin:$PATH timeout 540 compute-sanitizer --tool memcheck --target-processes all --kernel-name kns=oscar --error-exitcode 7 --print-limit 20 \
      bash "${run[@]}" "$root/experiments/device/vllm_short_run.py" "$w/smollm2-hf" > "$out/memcheck.log" 2>&1 || rc=$?
    grep -E "RESULT|ERROR SUMMARY|Invalid|error" "$out/memcheck.log" | head -20
    echo "vllm-memcheck: rc=$rc"; [ "$rc" = 0 ] ;;
  vllm-pip)  # pip install of the package into a private folder; vLLM loads the plugin through its entry point
    b=$stash/okv-build; t=$stash/okv-site; rm -rf "$b" "$t"; mkdir -p "$b/kernels"
    cp "$OSCAR_KERNELS_LIB" "$b/kernels/"
    OSCAR_BUILD=$b python3 -m pip install -q --no-deps --no-build-isolation --target "$t" "$root/kernels/python" > "$out/pip.log" 2>&1 \
      || { cat "$out/pip.log"; die "pip install of kernels/python failed"; }
    rc=0
    env -u OSCAR_KERNELS_LIB PYTHONPATH="$t:$stash/pylib" VLLM_ENABLE_V1_MULTIPROCESSING=0 timeout 300 \
      bash "${run[@]}" "$root/experiments/device/vllm_short_run.py" "$w/smollm2-hf" --no-register > "$out/pip-run.log" 2>&1 || rc=$?
    grep RESULT "$out/pip-run.log" || tail -n 30 "$out/pip-run.log"
    echo "vllm-pip: rc=$rc"; [ "$rc" = 0 ] ;;
  esac
  ;;
*) die "usage: smollm2_gpu.sh split|stash|real|hf|eval|vllm|vllm-loss|vllm-memcheck|vllm-pip ... (see the header)" ;;
esac
