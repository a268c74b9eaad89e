#!/usr/bin/env bash
# install_check.sh BUILD SRC: the installed tools work without the source tree (and without the build tree).
# Installs BUILD into a temporary prefix, makes a small stories260K dump with the build's oscar-dump, then,
# with SRC and BUILD hidden (an empty tmpfs mounted over them in a private mount namespace, where the
# system allows unprivileged ones), runs the installed oscar-analyze --plots on a copy of the dump and the
# installed oscar-sweep --list-presets from a folder outside both: the plots must be written (scripts from
# PREFIX/share/oscar-kv/plots) and every preset load (embedded). Also: no installed tool contains SRC's path.
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
tmp=$(mktemp -d /tmp/oscar-install-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix; work=$tmp/work
mkdir -p "$work"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/oscar-analyze bin/oscar-sweep bin/oscar-bench share/oscar-kv/plots/tni_plots.py share/oscar-kv/plots/pareto.py; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done

# The installed tools name no path of the source tree.
leaks=$(for t in "$prefix"/bin/*; do strings -a "$t" | grep -F "$src" | sed "s|^|$(basename "$t"): |"; done || true)
if [ -n "$leaks" ]; then echo "FAIL: installed tools contain the source path $src:"; echo "$leaks" | head; exit 1; fi
echo "ok: no installed tool contains $src"

"$build/apps/oscar-dump" --quiet --model "$src/data/stories260K/stories260K.bin" --tokenizer "$src/data/stories260K/tok512.bin" \
  --text "$src/data/text/kjv.txt.gz" --offset 0 --tokens 64 --out "$work/small.h5" >/dev/null

# The run, as a script for the (maybe private) namespace: every OSCAR_* override unset, cwd outside both trees.
cat > "$tmp/run.sh" <<RUN
set -euo pipefail
unset OSCAR_PLOTS_DIR OSCAR_PRESETS_DIR OSCAR_PYTHON
export MPLCONFIGDIR="$work/mpl" HOME="$work"
cd "$work"
if [ -e "$src/plots" ] || [ -e "$build/apps" ]; then echo "note: the source and build trees are visible (no private mount namespace here)"; fi
"$prefix/bin/oscar-analyze" small.h5 --quiet --plots plots_out > analyze.txt
test -s plots_out/token_norms.png && test -s plots_out/channel_absmax.png
echo "ok: installed oscar-analyze wrote \$(ls plots_out | tr '\n' ' ')"
"$prefix/bin/oscar-sweep" --list-presets > presets.txt
for p in fp16 naive kivi quarot turboquant oscar-cov oscar-omni; do grep -q "^\$p " presets.txt || { echo "FAIL: preset \$p missing:"; cat presets.txt; exit 1; }; done
echo "ok: installed oscar-sweep loads \$(wc -l < presets.txt) built-in presets"
mkdir -p mine && printf 'name: mine\nsource: "from OSCAR_PRESETS_DIR"\nbits: 16\n' > mine/mine.yaml
OSCAR_PRESETS_DIR=\$PWD/mine "$prefix/bin/oscar-sweep" --list-presets > mine.txt
[ "\$(wc -l < mine.txt)" = 1 ] && grep -q '^mine .*from OSCAR_PRESETS_DIR' mine.txt || { echo "FAIL: OSCAR_PRESETS_DIR not honoured:"; cat mine.txt; exit 1; }
echo "ok: OSCAR_PRESETS_DIR replaces the built-in presets"
RUN
hide="mount -t tmpfs none '$src'"
case "$build" in "$src"/*) ;; *) hide="$hide && mount -t tmpfs none '$build'" ;; esac
if unshare -r -m true 2>/dev/null; then
  unshare -r -m bash -c "$hide && bash '$tmp/run.sh'"
else
  echo "note: no unprivileged mount namespace; running with the trees in place (the tools still look only beside themselves)"
  bash "$tmp/run.sh"
fi
echo "install_check: PASSED"
