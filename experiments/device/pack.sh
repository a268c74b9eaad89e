#!/usr/bin/env bash
# pack.sh BUILD_DIR OUT_DIR: gathers the built tools, test binaries and the shared libraries they need
# (all but glibc's) into OUT_DIR, for running on a GPU machine that has the CUDA driver but not the
# project's Debian -dev packages; also packed as OUT_DIR.tar.xz (carry that). The default build's host code (x86-64-v3) runs on the device machines.
# PACK_ONLY="gpu_test_ops gpu_test_eval" packs only those binaries (the carry limit leaves ~20 MB beside the tree).
set -euo pipefail
build=$1; out=$2
rm -rf "$out"; mkdir -p "$out/bin" "$out/lib"
for f in "$build"/apps/oscar-* "$build"/tests/test_* "$build"/tests/gpu_test_*; do
  if [ -n "${PACK_ONLY:-}" ] && ! [[ " $PACK_ONLY " == *" $(basename "$f") "* ]]; then continue; fi
  if [ -x "$f" ] && [ -f "$f" ]; then cp "$f" "$out/bin/"; fi
done
cp "$build"/kernels/liboscar_kernels.so* "$out/lib/" 2>/dev/null || true
mkdir -p "$out/share/oscar-kv" && cp -r "$build/share/oscar-kv/plots" "$out/share/oscar-kv/"  # found from bin/ by the tools
for f in "$out"/bin/* "$out"/lib/*.so*; do
  ldd "$f" 2>/dev/null | awk '$3 ~ /^\// {print $3}'  || true
done | sort -u | grep -v -E '/(libc|libm|libresolv|libpthread|libdl|librt)\.so' | while read -r lib; do
  cp -L "$lib" "$out/lib/"
done
strip "$out"/bin/* 2>/dev/null || true
tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
echo "pack: $(ls "$out/bin" | wc -l) binaries, $(ls "$out/lib" | wc -l) libraries, $(du -sh "$out.tar.xz" | cut -f1) packed in $out.tar.xz"
