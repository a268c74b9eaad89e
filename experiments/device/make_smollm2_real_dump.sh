#!/usr/bin/env bash
# make_smollm2_real_dump.sh OUT.h5 [LAYERS] [TOKENS]: the small SmolLM2-135M-Instruct dump that gpu_test_ops's
# `real` op reads with --real-dump (shape smollm2-hd64): oscar-dump over the held-out Revelation passage
# (--offset -404, TOKENS tokens, default 1024; float16 storage), then only the post-RoPE q, k, v of LAYERS
# (default 3,12,20,25: one layer without an attention sink, three sink-heavy ones; shared data README) are
# kept, renumbered layer_000.. in a dump format v2 file with has_pre_rope = 0 and the root attribute
# `source_layers` (int32, the model's layer numbers). ~2 MB a layer at 1024 tokens, so it can travel to the
# GPU machine (carried in an ignored build-* folder). Needs oscar-dump (OSCAR_DUMP, default build/apps/oscar-dump),
# the GGUF (MODEL, default data/models/SmolLM2-135M-Instruct.Q4_1.gguf: data/fetch_smollm2.sh) and h5py
# (PYTHON, default the first python3 that imports it). Written under a temporary name, renamed when complete.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
die() { echo "make_smollm2_real_dump: error: $*" >&2; exit 1; }
[ $# -ge 1 ] || die "usage: $0 OUT.h5 [LAYERS (comma list, default 3,12,20,25)] [TOKENS (default 1024)]"
out=$1; layers=${2:-3,12,20,25}; tokens=${3:-1024}
dump=${OSCAR_DUMP:-$root/build/apps/oscar-dump}
model=${MODEL:-$root/data/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -x "$dump" ] || die "$dump: no oscar-dump there; build it (cmake --build build --target oscar-dump) or set OSCAR_DUMP"
[ -f "$model" ] || die "$model: no such file; fetch it with data/fetch_smollm2.sh or set MODEL"
py=${PYTHON:-}
if [ -z "$py" ]; then
  for c in python3 /usr/bin/python3; do if "$c" -c 'import h5py, numpy' 2>/dev/null; then py=$c; break; fi; done
  [ -n "$py" ] || die "no python3 with h5py and numpy (Debian: apt-get install python3-h5py; or set PYTHON)"
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp" "$out.tmp"' EXIT
"$dump" --model "$model" --text "$root/data/text/kjv.txt.gz" --offset -404 --tokens "$tokens" --dtype float16 --quiet --out "$tmp/full.h5"
"$py" - "$tmp/full.h5" "$out.tmp" "$layers" <<'EOF'
import sys, h5py, numpy as np
src, dst, layers = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
    n = int(f.attrs["n_layers"])
    bad = [l for l in layers if not 0 <= l < n]
    if bad or len(set(layers)) != len(layers):
        sys.exit(f"make_smollm2_real_dump: error: layers {layers}: each must be distinct and in 0..{n - 1}")
    for k, v in f.attrs.items():
        g.attrs[k] = v
    g.attrs["n_layers"] = np.int64(len(layers))
    g.attrs["has_pre_rope"] = np.int64(0)
    g.attrs["source_layers"] = np.array(layers, dtype=np.int32)
    g.attrs["text_source"] = f.attrs["text_source"] + f"; layers {sys.argv[3]} of {n} (make_smollm2_real_dump.sh)"
    for name in ("token_ids", "token_text"):
        if name in f:
            f.copy(f[name], g, name)
    for i, l in enumerate(layers):
        a, b = f[f"layer_{l:03d}"], g.create_group(f"layer_{i:03d}")
        for k, v in a.attrs.items():
            b.attrs[k] = v
        for t in ("q", "k", "v"):
            d = a[t]
            b.create_dataset(t, data=d[...], chunks=d.chunks, dtype=d.dtype)
        if "sinks" in a:
            f.copy(a["sinks"], b, "sinks")
EOF
mv "$out.tmp" "$out"
echo "make_smollm2_real_dump: $out: layers $layers, $tokens tokens, $(stat -c %s "$out") bytes, sha256 $(sha256sum "$out" | cut -d' ' -f1)"
