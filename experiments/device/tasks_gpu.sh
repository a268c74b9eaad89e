#!/usr/bin/env bash
# tasks_gpu.sh SUBCOMMAND ...: long-context task accuracy through transformers and the oscar-kv kernels
# (experiments/hf_eval.py --tasks) on a GPU machine that cannot fetch the models: SmolLM2-135M-Instruct (98 MB) and
# Gemma 3 270M (253 MB) travel as raw parts of PART bytes over consecutive calls on one warm machine (each call
# carries one folder beside the working tree; move the 35 MB data/kjv-llama-hd128/ out of the tree for these calls so
# that ~58 MB of parts fit the 64 MiB limit), are gathered in $STASH (default /tmp/tasks), joined and checked against
# the sha256 values of data/fetch_smollm2.sh and data/fetch_gemma3.sh. Run every subcommand from the repository root.
#
# Here (PREFIX e.g. /work/main/carry-tasks-: folders PREFIX0 .. PREFIXn, git-ignored):
#   cmake -S . -B /tmp/build-dev && cmake --build /tmp/build-dev --target oscar-tasks oscar-dump \
#       oscar-rotate oscar-eval oscar_kernels
#   PACK_ONLY="oscar-tasks oscar-dump oscar-rotate oscar-eval" bash experiments/device/pack.sh /tmp/build-dev /tmp/pt/dev
#   bash experiments/device/tasks_gpu.sh split PREFIX /tmp/pt/dev.tar.xz
# There, one call per folder, in order (carry [PREFIXk]):
#   bash PREFIXk/tasks_gpu.sh stash PREFIXk    (the first folder holds the script; later calls: /tmp/tasks/tasks_gpu.sh)
#   ... && bash /tmp/tasks/tasks_gpu.sh run smollm2 $OUT     once SmolLM2's parts are stashed
#   ... && bash /tmp/tasks/tasks_gpu.sh run gemma3 $OUT      once Gemma's are
# Subcommands:
#   split PREFIX DEV_TAR [PART]  PREFIX0 gets DEV_TAR, the gguf Python package (transformers' GGUF loader needs it), this
#        script and a manifest; the two GGUFs (SmolLM2 first) are concatenated into one stream cut into PART-byte parts
#        (default 55,000,000), one per folder from PREFIX0 on (PREFIX0's part shorter, beside the tools).
#   stash DIR   copies DIR's files into $STASH (unpacking dev.tar.xz and the gguf package there) and lists the parts.
#   run MODEL OUT   joins the stream if all parts are there (sha256 of each GGUF checked), makes a transformers folder of
#        the GGUF (experiments/hf/gguf_to_hf.py), writes the tasks with oscar-tasks (the model's own token ids) at
#        $LENGTHS (default smollm2: 1024 2048 4096 8192, gemma3: 1024 .. 32768) x depths 0.1 0.5 0.9 x $SAMPLES
#        samples (default 2; TASKS_FILE=FILE takes a task file written elsewhere instead), dumps 2048 Genesis tokens for oscar-cov's calibration, checks the transformers model
#        against the GGUF facts (the full-precision loss of 2048 Revelation tokens from oscar-dump's ids), then runs
#        hf_eval.py --tasks for $RECIPES (default bf16,oscar-omni,oscar-cov) at 2 bits into OUT/MODEL/.
set -euo pipefail
root=${OSCAR_ROOT:-$PWD}
stash=${STASH:-/tmp/tasks}
die() { echo "tasks_gpu: error: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
fetch_sha() { sed -n 's/^gguf_sha=\([0-9a-f]\{64\}\)$/\1/p' "$root/data/$1"; }
smollm2=data/models/SmolLM2-135M-Instruct.Q4_1.gguf
gemma3=data/models/gemma-3-270m-q4_k_m.gguf

cmd=${1:-}; shift || true
case "$cmd" in
split)
  [ $# -ge 2 ] || die "usage: tasks_gpu.sh split PREFIX DEV_TAR [PART]"
  prefix=$1; devtar=$2; part=${3:-55000000}
  for m in $smollm2 $gemma3; do [ -f "$root/$m" ] || die "$m: missing; run data/fetch_smollm2.sh and data/fetch_gemma3.sh"; done
  [ -f "$devtar" ] || die "$devtar: no such file (pack.sh makes it)"
  rm -rf "${prefix}"[0-9]*
  mkdir -p "${prefix}0"
  cp "$devtar" "${prefix}0/dev.tar.xz"
  cp "$0" "${prefix}0/tasks_gpu.sh"
  gdir=$(python3 -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')
  (cd "$(dirname "$gdir")" && tar -cJf "$(cd "${prefix}0" && pwd)/gguf-py.tar.xz" gguf gguf-*.dist-info)
  first=$(( part - $(du -cb "${prefix}0"/* | tail -1 | cut -f1) ))
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  cat "$root/$smollm2" "$root/$gemma3" | (cd "$tmp" && head -c "$first" > p.00 && split -b "$part" -d -a 2 --numeric-suffixes=1 - p.)
  n=0
  for p in "$tmp"/p.*; do mkdir -p "${prefix}$n"; mv "$p" "${prefix}$n/gguf.$(printf %02d "$n")"; n=$((n + 1)); done
  { echo "parts $n"; echo "smollm2_bytes $(stat -c %s "$root/$smollm2")"; echo "gemma3_bytes $(stat -c %s "$root/$gemma3")"
    echo "smollm2_sha $(fetch_sha fetch_smollm2.sh)"; echo "gemma3_sha $(fetch_sha fetch_gemma3.sh)"; } > "${prefix}0/manifest"
  for ((k = 0; k < n; ++k)); do echo "split: ${prefix}$k $(du -sb "${prefix}$k" | cut -f1) bytes"; done
  ;;
stash)
  [ $# -ge 1 ] && [ -d "$1" ] || die "usage: tasks_gpu.sh stash DIR"
  mkdir -p "$stash"; cp "$1"/* "$stash"/
  if [ -f "$stash/dev.tar.xz" ]; then tar -C "$stash" -xJf "$stash/dev.tar.xz" && rm "$stash/dev.tar.xz"; fi
  if [ -f "$stash/gguf-py.tar.xz" ]; then mkdir -p "$stash/pylib" && tar -C "$stash/pylib" -xJf "$stash/gguf-py.tar.xz" && rm "$stash/gguf-py.tar.xz"; fi
  echo "stash: $(ls "$stash"/gguf.* 2>/dev/null | wc -l) part(s): $(cd "$stash" && ls gguf.* 2>/dev/null | tr '\n' ' ')"
  ;;
run)
  [ $# -ge 2 ] || die "usage: tasks_gpu.sh run smollm2|gemma3 OUT"
  model=$1; out=$2/$model; mkdir -p "$out"
  [ -f "$stash/manifest" ] || die "$stash/manifest: missing; stash the first folder first"
  get() { awk -v k="$1" '$1 == k {print $2}' "$stash/manifest"; }
  sb=$(get smollm2_bytes)
  case $model in
    smollm2) g=$stash/SmolLM2-135M-Instruct.Q4_1.gguf; skip=0; bytes=$sb; want=$(get smollm2_sha)
             lengths=${LENGTHS:-1024 2048 4096 8192} ;;
    gemma3) g=$stash/gemma-3-270m-q4_k_m.gguf; skip=$sb; bytes=$(get gemma3_bytes); want=$(get gemma3_sha)
            lengths=${LENGTHS:-1024 2048 4096 8192 16384 32768} ;;
    *) die "model $model: smollm2 or gemma3" ;;
  esac
  if [ ! -f "$g" ]; then  # the model's bytes from the joined parts present (a prefix of the stream suffices for SmolLM2)
    (set +o pipefail; cat "$stash"/gguf.* 2>/dev/null | tail -c +$((skip + 1)) | head -c "$bytes" > "$g")  # head ends the pipe early
    [ "$(stat -c %s "$g")" = "$bytes" ] && [ "$(sha "$g")" = "$want" ] || { rm -f "$g"; die "$g: parts missing or damaged (stash them all first)"; }
  fi
  echo "run: $g sha256 ok"
  export PATH="$stash/dev/bin:/usr/local/cuda/bin:$PATH" LD_LIBRARY_PATH="$stash/dev/lib:${LD_LIBRARY_PATH:-}"
  export PYTHONPATH="$stash/pylib${PYTHONPATH:+:$PYTHONPATH}" OSCAR_KERNELS_LIB="$stash/dev/lib/liboscar_kernels.so" OSCAR_BUILD=
  nvidia-smi -L || true
  w=$stash/work-$model; mkdir -p "$w"; txt=$root/data/text/kjv.txt.gz  # a second run reuses the conversion and dumps
  t0=$(date +%s)
  [ -f "$w/hf/config.json" ] || python3 "$root/experiments/hf/gguf_to_hf.py" "$g" "$w/hf" 2>&1 | grep -v -E 'Converting|Loading|Writing' || true
  [ -f "$w/hf/config.json" ] || die "gguf_to_hf failed"
  if [ -n "${TASKS_FILE:-}" ]; then cp "$TASKS_FILE" "$w/tasks.jsonl"  # written here by oscar-tasks for this model
  else oscar-tasks --model "$g" --lengths $lengths --samples "${SAMPLES:-2}" --out "$w/tasks.jsonl"; fi
  [ -f "$w/gen.h5" ] || oscar-dump --quiet --model "$g" --text "$txt" --offset 0 --tokens 2048 --out "$w/gen.h5"
  [ -f "$w/rev.h5" ] || oscar-dump --quiet --model "$g" --text "$txt" --offset -404 --tokens 2048 --out "$w/rev.h5" | tee "$out/oscar-dump-rev.txt"
  echo "run: conversion, tasks and dumps in $(( $(date +%s) - t0 )) s"
  # The transformers model against the GGUF path: the full-precision loss on the same 2048 Revelation ids.
  python3 - "$w/hf" "$w/rev.h5" <<'PY' | tee "$out/hf-check.txt"
import sys, h5py, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32, attn_implementation="sdpa").cuda().eval()
ids = torch.tensor(h5py.File(sys.argv[2], "r")["token_ids"][...][None].astype("int64")).cuda()
with torch.inference_mode():
    lg = m(input_ids=ids).logits[0, :-1].double()
loss = torch.nn.functional.cross_entropy(lg, ids[0, 1:]).item()
cfg = m.config.get_text_config(decoder=True)
print(f"transformers fp32 loss on oscar-dump's 2048 Revelation ids: {loss:.4f}; layer types "
      f"{getattr(cfg, 'layer_types', None)}; sliding_window {getattr(cfg, 'sliding_window', None)}")
PY
  t1=$(date +%s)
  OMP_NUM_THREADS=8 python3 "$root/experiments/hf_eval.py" --model "$w/hf" --tasks "$w/tasks.jsonl" --calib-ids "$w/gen.h5" \
    --recipes "${RECIPES:-bf16,oscar-omni,oscar-cov}" --bits 2 --out "$out/hf-tasks" 2>&1 | tee "$out/hf-tasks.log" | tail -n 60
  echo "run: hf_eval --tasks in $(( $(date +%s) - t1 )) s"
  cp "$w/tasks.jsonl" "$out/" 2>/dev/null || true
  ;;
*) die "usage: tasks_gpu.sh split|stash|run ... (see the header)" ;;
esac
