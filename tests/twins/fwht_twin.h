// fwht_twin.h: the CPU twin of oscar_fwht_f32 (kernels/src/fwht.cu): `rows` contiguous float rows of
// length head_dim transformed by the shared oscar::fwht_inplace (oscar/fwht_math.h), which fixes the order
// of every butterfly, so the kernel's result must equal it bit for bit.
#pragma once
#include <cstdint>
#include <vector>

#include "oscar/fwht_math.h"

namespace fwht_twin {

inline std::vector<float> transform(std::vector<float> x, int64_t rows, int head_dim, bool normalize) {
  for (int64_t r = 0; r < rows; ++r) oscar::fwht_inplace(x.data() + r * head_dim, head_dim, normalize);
  return x;
}

}  // namespace fwht_twin
