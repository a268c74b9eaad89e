# variant_lib.sh: what decode_ablation.sh and lever_variants.sh share (sourced by both): one liboscar_kernels.so per
# variant, a build's kernel objects with one decode unit recompiled.
# build_variant BUILD OUT NAME SRC UNIT [FLAG...]: compiles SRC/src/UNIT/UNIT_decode.cu (SRC: a kernels/ tree; UNIT cov or
#   omni) with the nvcc FLAGs into OUT/UNIT_decode_NAME.o, ptxas's report in OUT/ptxas_NAME.log, and links it with BUILD's
#   kernel objects but that unit's into OUT/liboscar_kernels_NAME.so.
# variant_registers OUT NAME: the registers of the variant's decode kernels from its ptxas report ("hdD INTb: N;" each).
build_variant() {
  local build=$1 out=$2 name=$3 src=$4 unit=$5 nvcc=${NVCC:-/usr/local/cuda/bin/nvcc} objs
  shift 5
  mapfile -t objs < <(find "$build/kernels/CMakeFiles/oscar_kernels.dir" -name '*.cu.o' ! -name "${unit}_decode.cu.o")
  "$nvcc" -O3 -DNDEBUG --generate-code=arch=compute_90a,code=[compute_90a,sm_90a] -Xcompiler=-fPIC --expt-relaxed-constexpr -std=c++17 \
    -Xptxas -v "$@" -I"$src/include" -I"$src/src" -c "$src/src/$unit/${unit}_decode.cu" -o "$out/${unit}_decode_$name.o" \
    2> "$out/ptxas_$name.log"
  "$nvcc" -shared -o "$out/liboscar_kernels_$name.so" "${objs[@]}" "$out/${unit}_decode_$name.o" -lcudart
}

variant_registers() {
  grep -E 'Compiling entry|Used' "$1/ptxas_$2.log" | paste - - | grep decode_kernel \
    | sed -E 's/.*decode_kernelILi([0-9]+)ELi([0-9])E.*Used ([0-9]+) registers.*/hd\1 INT\2: \3/' | tr '\n' ';'
}
