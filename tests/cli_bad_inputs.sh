#!/usr/bin/env bash
# cli_bad_inputs.sh BUILD SRC: the tools on real and bad inputs: one clear message, non-zero exit,
# no output left behind; and a real end-to-end dump -> analyze (table, CSV, JSON, plots).
set -u
build=$1; src=$2
dump=$build/apps/oscar-dump; analyze=$build/apps/oscar-analyze
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
expect_fail() {  # name, grep pattern for stderr, command...
  local name=$1 pat=$2; shift 2
  if "$@" >"$tmp/out" 2>"$tmp/err"; then echo "FAIL $name: exit status 0"; fails=$((fails+1)); return; fi
  if ! grep -q -- "$pat" "$tmp/err"; then echo "FAIL $name: stderr lacks '$pat':"; cat "$tmp/err"; fails=$((fails+1)); return; fi
  if [ "$(grep -c 'error' "$tmp/err")" -ne 1 ]; then echo "FAIL $name: expected one error line:"; cat "$tmp/err"; fails=$((fails+1)); return; fi
  echo "ok   $name: $(grep error "$tmp/err")"; passes=$((passes+1))
}
expect_ok() {
  local name=$1; shift
  if "$@" >"$tmp/out" 2>"$tmp/err"; then echo "ok   $name"; passes=$((passes+1)); else echo "FAIL $name:"; cat "$tmp/err"; fails=$((fails+1)); fi
}
M=$src/data/stories260K/stories260K.bin; T=$src/data/stories260K/tok512.bin; X=$src/data/text/kjv.txt.gz

expect_fail "missing model" "no such file" $dump --model $tmp/none.bin --tokenizer $T --text $X --out $tmp/a.h5 --quiet
expect_fail "missing text" "no such file" $dump --model $M --tokenizer $T --text $tmp/none.txt --out $tmp/a.h5 --quiet
head -c 50000 $M > $tmp/trunc.bin
expect_fail "truncated checkpoint" "disagrees with its header" $dump --model $tmp/trunc.bin --tokenizer $T --text $X --out $tmp/a.h5 --quiet
head -c 3000 $T > $tmp/tok.bin
expect_fail "tokenizer/model vocab mismatch" "vocab_size" $dump --model $M --tokenizer $tmp/tok.bin --text $X --out $tmp/a.h5 --quiet
expect_fail "tokens beyond seq_len" "beyond the model's context" $dump --model $M --tokenizer $T --text $X --tokens 4096 --out $tmp/a.h5 --quiet
expect_fail "tokens beyond the text" "beyond the text" $dump --model $M --tokenizer $T --text $X --offset -1 --tokens 300 --out $tmp/a.h5 --quiet
head -c 100000 $X > $tmp/trunc.txt.gz
expect_fail "truncated gzip text" "truncated" $dump --model $M --tokenizer $T --text $tmp/trunc.txt.gz --out $tmp/a.h5 --quiet
expect_fail "output folder missing" "does not exist" $dump --model $M --tokenizer $T --text $X --out $tmp/no/such/dir/a.h5 --quiet
[ -e $tmp/a.h5 ] && { echo "FAIL: a failed dump left $tmp/a.h5"; fails=$((fails+1)); }

expect_ok "real dump" $dump --model $M --tokenizer $T --text $X --offset -404 --tokens 256 --out $tmp/good.h5 --quiet
grep -q "mean next-token loss" $tmp/out || { echo "FAIL: dump did not print the loss"; fails=$((fails+1)); }
expect_ok "analyze with csv/json/plots" $analyze $tmp/good.h5 --csv $tmp/t.csv --json $tmp/t.json --plots $tmp/plots --quiet
grep -q "TNI summary" $tmp/out || { echo "FAIL: analyze printed no summary"; fails=$((fails+1)); }
[ "$(wc -l < $tmp/t.csv)" -eq $((1 + 5*4*3)) ] || { echo "FAIL: csv rows"; fails=$((fails+1)); }
for f in token_norms.png channel_absmax.png; do [ -s $tmp/plots/$f ] || { echo "FAIL: plot $f missing"; fails=$((fails+1)); }; done

expect_fail "analyze missing dump" "no such file" $analyze $tmp/none.h5 --quiet
head -c 4000 $tmp/good.h5 > $tmp/trunc.h5
expect_fail "analyze truncated dump" "trunc.h5" $analyze $tmp/trunc.h5 --quiet --csv $tmp/trunc.csv
[ -e $tmp/trunc.csv ] && { echo "FAIL: analyze left a csv for a bad dump"; fails=$((fails+1)); }
echo "not hdf5" > $tmp/text.h5
expect_fail "analyze non-HDF5" "not an HDF5 file" $analyze $tmp/text.h5 --quiet

# A dump written by another tool (h5py: int64 and fixed-length string attributes, float16, no token text).
py=${OSCAR_PYTHON:-/usr/bin/python3}
if $py -c "import h5py, numpy" 2>/dev/null; then
  $py $src/tests/make_foreign_dump.py $tmp/foreign.h5
  expect_ok "analyze a foreign dump" $analyze $tmp/foreign.h5 --json $tmp/foreign.json --quiet
  $py - $tmp/foreign.json <<'PY' && passes=$((passes+1)) || { echo "FAIL foreign dump numbers"; fails=$((fails+1)); }
import json, sys
r = json.load(open(sys.argv[1]))["rows"]
v = [x for x in r if x["tensor"] == "v"][0]
assert abs(v["tni"] - 8.0) < 1e-9, v["tni"]
assert abs(v["norm"]["median"] - 3.0) < 1e-9, v["norm"]["median"]   # norms 1 2 4 8: median 3
assert abs(v["channel_spread"] - 8.0 / 3.0) < 1e-9, v["channel_spread"]  # absmax 8 4 2 1: median 3
assert v["norm"]["min_over_median"] == 1.0 / 3.0
k = [x for x in r if x["tensor"] == "k"][0]
assert k["tni"] == 1.0 and k["n_outliers"] == 0
print("ok   foreign dump numbers: TNI 8, median 3, channel spread 8/3")
PY
else
  echo "skip foreign dump: no Python with h5py (install python3-h5py)"
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
