#!/usr/bin/env bash
# lever_variants.sh BUILD_DIR OUT_DIR SPEC...: one liboscar_kernels.so per SPEC, each BUILD_DIR's kernel objects with one
#   decode unit recompiled: SPEC = NAME:UNIT[:FLAGS[:REV]], UNIT cov or omni (kernels/src/UNIT/UNIT_decode.cu), FLAGS
#   nvcc flags (e.g. -DOSCAR_LEVER_BULK=0, spaces as commas), REV a git revision whose kernels/ the unit is taken from
#   (the code before a change that has no switch). Writes OUT_DIR/liboscar_kernels_NAME.so, the unit's registers
#   (ptxas) and its body loop's static SASS mix (experiments/diagnostics/sass_loop.py, when cuobjdump is found) in
#   OUT_DIR/sass.md. Time the libraries with decode_ablation.py --variant NAME=OUT_DIR/liboscar_kernels_NAME.so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd); out=$2; shift 2
mkdir -p "$out"; out=$(cd "$out" && pwd)
. "$here/variant_lib.sh"
cuobjdump=$(command -v cuobjdump || true)
: > "$out/sass.md"
for spec in "$@"; do
  IFS=: read -r name unit flags rev <<< "$spec"
  case "$unit" in cov|omni) ;; *) echo "lever_variants: error: $spec: unit must be cov or omni" >&2; exit 2 ;; esac
  src=$root/kernels
  if [ -n "${rev:-}" ]; then
    src=$out/src_$name; rm -rf "$src"; mkdir -p "$src"
    git -C "$root" archive "$rev" kernels | tar -x -C "$src"; src=$src/kernels
  fi
  IFS=, read -r -a fl <<< "${flags:-}"
  build_variant "$build" "$out" "$name" "$src" "$unit" "${fl[@]}"
  regs=$(variant_registers "$out" "$name")
  echo "### $name ($unit ${flags:-default}${rev:+ at $rev}); registers: $regs" >> "$out/sass.md"
  kern=$([ "$unit" = omni ] && echo omni_decode_kernel || echo decode_kernel)
  [ -n "$cuobjdump" ] && python3 "$root/experiments/diagnostics/sass_loop.py" "$out/${unit}_decode_$name.o" --cuobjdump "$cuobjdump" \
    --kernel "$kern" | grep -E "^\| kernel|^\|---|INT2" >> "$out/sass.md"
  echo "lever_variants: built $name"
done
