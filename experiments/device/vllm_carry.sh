#!/usr/bin/env bash
# vllm_carry.sh SUBCOMMAND ...: vLLM 0.26.0 on a GPU machine that cannot reach PyPI (the feasibility step of the vLLM
# backend): the wheel, stripped of what an H100/H200 offline run does not load, and the runtime dependencies the
# machine lacks travel in parts over consecutive calls on one warm machine, are joined (sha256 checked) and unpacked
# into a private folder (no pip resolution: vLLM pins numba 0.65 where the machine has 0.68), then vllm.LLM generates
# greedily with a Llama-shaped model of dummy weights. Run every subcommand from the repository root.
#
# Here:  bash experiments/device/vllm_carry.sh build PREFIX     (folders PREFIX0 .. PREFIXn, ~55 MB each)
# There: one call per folder, back to back:  bash PREFIXk/vllm_carry.sh stash PREFIXk   (later: /tmp/vllm/vllm_carry.sh)
#        then:  bash /tmp/vllm/vllm_carry.sh smoke $OUT
# Subcommands:
#   build PREFIX [PART]  pip download vllm==0.26.0 (--no-deps) and the dependencies of `deps` below for CPython 3.12 on
#        manylinux x86-64, resolved against the GPU machine's own packages (VLLM_FREEZE: its `pip list --format=freeze`,
#        default experiments/device/gpu_pip_freeze.txt) and keeping only the wheels it lacks; the vLLM wheel loses
#        vllm_flash_attn/_vllm_fa2_C.abi3.so (Hopper runs FlashAttention 3), vllm-rs, third_party/{fmha_sm100,deep_gemm}
#        and the server's static files; everything is tarred, cut into PART-byte parts (default 55,000,000) with a
#        manifest of sha256 values.
#   build-fa2 PREFIX [PART]  FlashAttention 2's library of the same wheel (vLLM's TurboQuant caches need it: vLLM forces
#        FA2 for them), xz-compressed (305 MB -> 79 MB) in PART-byte parts (default 42,000,000) with a manifest
#        (fa2.manifest): stash them like the other parts; smoke and run put it back into the unpacked vLLM.
#   stash DIR    copies DIR's files to $STASH (default /tmp/vllm) and lists the parts there.
#   run SCRIPT [ARGS...]  as smoke, then python3 SCRIPT ARGS with vLLM importable (e.g. experiments/device/vllm_plugin_check.py).
#   smoke OUT    joins and checks the parts, unpacks every wheel into $STASH/site, and runs vllm.LLM (BF16, eager, then
#        CUDA graphs) on a Llama-shaped model of dummy weights (load_format="dummy", a config.json written here, no
#        tokenizer: prompts as token ids), greedy; OUT/smoke.json has what ran, the versions and the times. FlashInfer is
#        not carried: its sampler is switched off (VLLM_USE_FLASHINFER_SAMPLER=0); attention is FlashAttention 3.
# Measured (H200, 2026-11-27): 74 wheels, 170 MB in 4 parts of 50 MB (about 5 s a call), unpacked in 8 s (440 MB);
# eager: engine up in 21.9 s, 4 prompts x 32 greedy tokens in 0.21 s; CUDA graphs (torch.compile 8 s): 31.6 s and
# 0.08 s; the same ids both ways, and again on a second generate.
set -euo pipefail
root=${OSCAR_ROOT:-$PWD}
stash=${STASH:-/tmp/vllm}
die() { echo "vllm_carry: error: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
# Imported by an offline vllm.LLM run (or by modules it imports), missing on the GPU machine. Left out: the server's
# and the multimodal and structured-output backends' heavy packages (xgrammar, llguidance, flashinfer, tilelang,
# cutlass-dsl, torchcodec, ...), which an offline BF16 run of a text model does not import.
deps="cachetools blake3 fastapi[standard]<0.137.0,>=0.133.0 starlette>=1.0.1 openai>=2.0.0 pydantic>=2.12.0
prometheus-fastapi-instrumentator>=8.0.0 lark==1.2.2 partial-json-parser jsonschema>=4.23.0 pyzmq>=25.0.0 msgspec
watchfiles python-json-logger pybase64 cbor2 ijson setproctitle openai-harmony>=0.0.3 anthropic>=0.71.0
model-hosting-container-standards<1.0.0,>=0.1.14 opentelemetry-sdk>=1.27.0 opentelemetry-api>=1.27.0
opentelemetry-exporter-otlp>=1.27.0 opentelemetry-semantic-conventions-ai>=0.4.1"
# Installed without their dependencies (their metadata pins transformers < 5, numpy < 2.4 or torch, which the machine
# has in other versions that work). Found by running the smoke test on the device (2026-11-27): transformers'
# MistralCommonBackend needs mistral_common and pycountry; the structured-output backends' class annotations import
# llguidance and xgrammar at vllm's import; xgrammar 0.2.8 needs apache-tvm-ffi >= 0.1.11 (vLLM pins 0.1.10, which
# lacks load_lib_module's extra_lib_paths).
nodeps="compressed-tensors==0.17.0 depyf==0.20.0 loguru astor dill mistral_common==1.11.7 lm-format-enforcer==0.11.3
outlines_core==0.2.14 interegular pycountry llguidance==1.7.6 xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64
      --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any)

cmd=${1:-}; shift || true
case "$cmd" in
build)
  [ $# -ge 1 ] || die "usage: vllm_carry.sh build PREFIX [PART]"
  prefix=$1; part=${2:-55000000}
  freeze=${VLLM_FREEZE:-$root/experiments/device/gpu_pip_freeze.txt}
  [ -f "$freeze" ] || die "$freeze: the GPU machine's pip freeze is missing (python3 -m pip list --format=freeze there)"
  w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
  mkdir -p "$w/wheels"
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$w/dl" vllm==0.26.0
  cp "$w"/dl/vllm-0.26.0-*.whl "$w/wheels/vllm-0.26.0-stripped.whl"
  zip -q -d "$w/wheels/vllm-0.26.0-stripped.whl" 'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/vllm-rs' \
    'vllm/third_party/fmha_sm100/*' 'vllm/third_party/deep_gemm/*' 'vllm/entrypoints/serve/instrumentator/static/*'
  grep -v -E '^(numba|llvmlite)==' "$freeze" | grep '==' > "$w/constraints.txt"
  # shellcheck disable=SC2086
  python3 -m pip download -q "${plat[@]}" -c "$w/constraints.txt" -d "$w/deps" $deps
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$w/deps" $nodeps
  python3 - "$freeze" "$w/deps" "$w/wheels" <<'PY'
import os, re, shutil, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n.lower())
have = {norm(l.split("==")[0]) for l in open(sys.argv[1]) if "==" in l}
for f in sorted(os.listdir(sys.argv[2])):
    if norm(f.split("-")[0]) not in have:  # the machine lacks it
        shutil.move(os.path.join(sys.argv[2], f), sys.argv[3])
PY
  (cd "$w" && tar -cf carry.tar wheels)
  rm -rf "${prefix}"[0-9]*
  (cd "$w" && split -b "$part" -d -a 2 carry.tar part.)
  n=0
  for p in "$w"/part.*; do mkdir -p "${prefix}$n"; mv "$p" "${prefix}$n/carry.$(printf %02d "$n")"; n=$((n + 1)); done
  cp "$0" "${prefix}0/vllm_carry.sh"
  { echo "parts $n"; echo "tar_sha256 $(sha "$w/carry.tar")"; echo "wheels $(ls "$w/wheels" | wc -l)"; } > "${prefix}0/manifest"
  ls "$w/wheels" > "${prefix}0/wheels.txt"
  echo "build: $(ls "$w/wheels" | wc -l) wheels, $(du -sh "$w/carry.tar" | cut -f1) in $n parts:"
  for ((k = 0; k < n; ++k)); do echo "  ${prefix}$k $(du -sb "${prefix}$k" | cut -f1) bytes"; done
  ;;
build-fa2)
  [ $# -ge 1 ] || die "usage: vllm_carry.sh build-fa2 PREFIX [PART]"
  prefix=$1; part=${2:-42000000}; so=vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so
  w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
  if [ -n "${VLLM_WHEEL:-}" ]; then cp "$VLLM_WHEEL" "$w/"; else python3 -m pip download -q --no-deps "${plat[@]}" -d "$w" vllm==0.26.0; fi
  (cd "$w" && python3 -m zipfile -l vllm-0.26.0-*.whl | grep -q "$so") || die "the vllm 0.26.0 wheel has no $so"
  (cd "$w" && unzip -q vllm-0.26.0-*.whl "$so" && xz -T2 -9e -c "$so" > fa2.xz && split -b "$part" -d -a 2 fa2.xz fa2.xz.)
  rm -rf "${prefix}"[0-9]*
  n=0
  for p in "$w"/fa2.xz.[0-9]*; do mkdir -p "${prefix}$n"; mv "$p" "${prefix}$n/"; n=$((n + 1)); done
  printf 'fa2_parts %d\nfa2_xz_sha256 %s\nfa2_so_sha256 %s\n' "$n" "$(sha "$w/fa2.xz")" "$(sha "$w/$so")" > "${prefix}0/fa2.manifest"
  for ((k = 0; k < n; ++k)); do echo "build-fa2: ${prefix}$k $(du -sb "${prefix}$k" | cut -f1) bytes"; done
  ;;
stash)
  [ $# -ge 1 ] && [ -d "$1" ] || die "usage: vllm_carry.sh stash DIR"
  mkdir -p "$stash"; cp "$1"/* "$stash"/
  echo "stash: $(ls "$stash"/carry.* 2>/dev/null | wc -l) of $(awk '$1 == "parts" {print $2}' "$stash/manifest" 2>/dev/null || echo '?') parts"
  ;;
smoke|run)
  [ $# -ge 1 ] || die "usage: vllm_carry.sh smoke OUT | run SCRIPT [ARGS...]"
  [ -f "$stash/manifest" ] || die "$stash/manifest: missing; stash the first folder first"
  want=$(awk '$1 == "parts" {print $2}' "$stash/manifest"); have=$(ls "$stash"/carry.* | wc -l)
  [ "$have" = "$want" ] || die "$stash: $have of $want parts; stash the missing folders first"
  if [ ! -d "$stash/site/vllm" ]; then
    cat "$stash"/carry.* > "$stash/carry.tar"
    [ "$(sha "$stash/carry.tar")" = "$(awk '$1 == "tar_sha256" {print $2}' "$stash/manifest")" ] || die "joined parts differ"
    tar -C "$stash" -xf "$stash/carry.tar" && rm "$stash/carry.tar"
    mkdir -p "$stash/site"
    t0=$(date +%s)
    for whl in "$stash"/wheels/*.whl; do python3 -m zipfile -e "$whl" "$stash/site" >/dev/null; done
    echo "vllm_carry: $(ls "$stash"/wheels | wc -l) wheels unpacked into $stash/site in $(( $(date +%s) - t0 )) s ($(du -sh "$stash/site" | cut -f1))"
  fi
  fa2=$stash/site/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so
  if [ -f "$stash/fa2.manifest" ] && [ ! -f "$fa2" ]; then  # FlashAttention 2, carried apart (build-fa2)
    want=$(awk '$1 == "fa2_parts" {print $2}' "$stash/fa2.manifest"); have=$(ls "$stash"/fa2.xz.* | wc -l)
    [ "$have" = "$want" ] || die "$stash: $have of $want FlashAttention 2 parts; stash the missing folders first"
    cat "$stash"/fa2.xz.* > "$stash/fa2.xz"
    [ "$(sha "$stash/fa2.xz")" = "$(awk '$1 == "fa2_xz_sha256" {print $2}' "$stash/fa2.manifest")" ] || die "joined FlashAttention 2 parts differ"
    xz -d -c "$stash/fa2.xz" > "$fa2.tmp" && rm "$stash/fa2.xz"
    [ "$(sha "$fa2.tmp")" = "$(awk '$1 == "fa2_so_sha256" {print $2}' "$stash/fa2.manifest")" ] || { rm -f "$fa2.tmp"; die "$fa2: sha256 differs"; }
    mv "$fa2.tmp" "$fa2"; echo "vllm_carry: FlashAttention 2 library restored ($(stat -c %s "$fa2") bytes)"
  fi
  # FlashInfer is not carried: its sampler off (greedy decoding does not use it)
  export PYTHONPATH="$stash/site${PYTHONPATH:+:$PYTHONPATH}" VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0
  if [ "$cmd" = smoke ]; then python3 "$root/experiments/device/vllm_smoke.py" "$1"; else python3 "$@"; fi
  ;;
*) die "usage: vllm_carry.sh build|stash|smoke|run ... (see the header)" ;;
esac
