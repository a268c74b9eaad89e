// tensor.h: the activation tensors that statistics, quantizers and metrics work on, independent of
// where they came from (a model's forward pass, a dump file). Plain float32, head-major.
#pragma once
#include <cstddef>
#include <vector>

namespace oscar {

// One tensor of one layer, head-major: element (h, t, c) at data[(h*T + t)*head_dim + c].
struct HeadTensor {
  int heads = 0, tokens = 0, head_dim = 0;
  std::vector<float> data;
  const float* head(int h) const { return data.data() + static_cast<size_t>(h) * tokens * head_dim; }
  float* head(int h) { return data.data() + static_cast<size_t>(h) * tokens * head_dim; }
};

}  // namespace oscar
