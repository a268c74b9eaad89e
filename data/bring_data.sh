#!/usr/bin/env bash
# Brings the bundled real data into data/ from ../shared/data (see data/README.md), in compact form:
# the small files verbatim, the head_dim-128 checkpoint as lossless float16 parts (oscar-pack, which
# checks that the float32 file rebuilt from them hashes to the original's sha256).
# Usage: data/bring_data.sh [BUILD_DIR]   (BUILD_DIR holds oscar-pack; default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
src=${OSCAR_SHARED_DATA:-$root/../shared/data}
[ -d "$src" ] || { echo "bring_data: $src not found (set OSCAR_SHARED_DATA)" >&2; exit 1; }
[ -x "$build/apps/oscar-pack" ] || { echo "bring_data: $build/apps/oscar-pack not built; build the project first" >&2; exit 1; }
check() {  # file expected-sha256
  echo "$2  $1" | sha256sum -c --quiet - || { echo "bring_data: $1 does not match its recorded sha256" >&2; exit 1; }
}
mkdir -p "$root/data/stories260K" "$root/data/kjv-llama-hd128" "$root/data/text"
check "$src/stories260K/stories260K.bin" b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696
check "$src/stories260K/tok512.bin" 037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312
check "$src/text/kjv.txt.gz" 3165a4fd892e66fd3b3c3c37813ffde4c1153f1b2b7e6c1781a00bee52d3559d
check "$src/kjv-llama-hd128/kjv-llama-hd128.bin" 45680e960b34309b74b33fc51bd7771728bf31c8f57fe074f5358f06b3a510ae
cp "$src/stories260K/stories260K.bin" "$src/stories260K/tok512.bin" "$root/data/stories260K/"
cp "$src/text/kjv.txt.gz" "$root/data/text/"
rm -f "$root"/data/kjv-llama-hd128/kjv-llama-hd128.f16.part*
"$build/apps/oscar-pack" "$src/kjv-llama-hd128/kjv-llama-hd128.bin" "$root/data/kjv-llama-hd128/kjv-llama-hd128.f16"
cp "$src/kjv-llama-hd128/report.json" "$root/data/kjv-llama-hd128/training_report.json"
chmod 644 "$root"/data/*/*
echo "bring_data: done"
