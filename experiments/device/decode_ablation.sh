#!/usr/bin/env bash
# decode_ablation.sh build BUILD_DIR OUT_DIR: builds one liboscar_kernels.so per lever variant of kernels/src/decode/levers.h
#   (all on; all off; each lever alone) from BUILD_DIR's kernel objects, cov_decode.cu recompiled with the variant's
#   switches (the oscar-cov decode is where every lever acts), and the static SASS mix of each variant's body loop
#   (experiments/diagnostics/sass_loop.py, when cuobjdump is found) and its registers (ptxas) in OUT_DIR/sass.md.
# decode_ablation.sh run OUT_DIR RESULTS_DIR: on the GPU machine: decode_ablation.py over the variants (graph and per-call
#   timings, share of copy, ratios to SDPA and to our BF16 kernel) into RESULTS_DIR/ablation.md.
# decode_ablation.sh ncu OUT_DIR RESULTS_DIR: ncu's executed warp instructions of the decode kernel per variant (hd128 and
#   hd64 at batch 32, hd256 at batch 8, 32K), per token per KV head, into RESULTS_DIR/ncu.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
. "$here/variant_lib.sh"
variants="all:|base:-DOSCAR_LEVER_LOP3=0 -DOSCAR_LEVER_EX2=0 -DOSCAR_LEVER_SCORE=0 -DOSCAR_LEVER_LAZY=0|lop3:-DOSCAR_LEVER_EX2=0 -DOSCAR_LEVER_SCORE=0 -DOSCAR_LEVER_LAZY=0|ex2:-DOSCAR_LEVER_LOP3=0 -DOSCAR_LEVER_SCORE=0 -DOSCAR_LEVER_LAZY=0|score:-DOSCAR_LEVER_LOP3=0 -DOSCAR_LEVER_EX2=0 -DOSCAR_LEVER_LAZY=0|lazy:-DOSCAR_LEVER_LOP3=0 -DOSCAR_LEVER_EX2=0 -DOSCAR_LEVER_SCORE=0"
case "$1" in
build)
  build=$(cd "$2" && pwd); out=$3; mkdir -p "$out"
  cuobjdump=$(command -v cuobjdump || true)
  : > "$out/sass.md"
  IFS='|'; for v in $variants; do
    name=${v%%:*}; flags=${v#*:}
    IFS=' ' read -r -a fl <<< "$flags"
    build_variant "$build" "$out" "$name" "$root/kernels" cov "${fl[@]}"
    regs=$(variant_registers "$out" "$name")
    echo "### $name (${flags:-all levers on}); registers: $regs" >> "$out/sass.md"
    [ -n "$cuobjdump" ] && python3 "$root/experiments/diagnostics/sass_loop.py" "$out/cov_decode_$name.o" --cuobjdump "$cuobjdump" >> "$out/sass.md"
    echo "decode_ablation: built $name"
  done ;;
run)
  out=$(cd "$2" && pwd); res=$3; mkdir -p "$res"
  args=(); IFS='|'; for v in $variants; do args+=(--variant "${v%%:*}=$out/liboscar_kernels_${v%%:*}.so"); done; IFS=' '
  python3 "$here/decode_ablation.py" "${args[@]}" > "$res/ablation.md" 2>&1 || echo "decode_ablation: the timing run failed ($res/ablation.md)"
  tail -n 40 "$res/ablation.md" ;;
ncu)
  out=$(cd "$2" && pwd); res=$3; mkdir -p "$res"
  echo "| variant | shape | warp instructions | per token per KV head |" > "$res/ncu.md"; echo "|---|---|---|---|" >> "$res/ncu.md"
  IFS='|'; for v in $variants; do
    name=${v%%:*}; IFS=' '
    for s in "128 32 32768" "64 32 32768" "256 8 32768"; do
      set -- $s
      n=$(timeout 120 ncu -k 'regex:decode_kernel' -s 1 -c 1 --metrics smsp__inst_executed.sum --csv \
        python3 "$here/profile_decode.py" --lib "$out/liboscar_kernels_$name.so" --fmt cov --head-dim "$1" --bits 2 --batch "$2" --ctx "$3" \
        --q-heads $([ "$1" = 256 ] && echo 16 || echo 32) --kv-heads 8 --calls 2 2>/dev/null | grep inst_executed | awk -F'","' '{gsub(/[",]/,"",$NF); print $NF}' | tail -n 1)
      per=$(python3 -c "print(f'{$n / ($2 * 8 * $3):.2f}')" 2>/dev/null || echo "?")
      echo "| $name | hd$1 B=$2 ctx $3 | ${n:-?} | $per |" >> "$res/ncu.md"
    done
    IFS='|'
  done; IFS=' '
  cat "$res/ncu.md" ;;
*) echo "usage: decode_ablation.sh build BUILD_DIR OUT_DIR | run OUT_DIR RESULTS_DIR | ncu OUT_DIR RESULTS_DIR" >&2; exit 2 ;;
esac
