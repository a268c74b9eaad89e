// real_activations.h: query/key/value activations of the bundled head_dim-128 model (kjv-llama-hd128) on
// a held-out KJV passage, for GPU tests that check the kernels on real data. Plain C++ (no Eigen in the
// interface) so that .cu test files can include it; implemented by gpu_test_real_host.cpp with lib/.
#pragma once
#include <vector>

struct RealLayer {
  int n_heads = 0, n_kv_heads = 0, tokens = 0, head_dim = 0;
  std::vector<float> q, k, v;  // head-major [heads][tokens][head_dim], after RoPE (q, k)
};

// Runs the CPU forward pass over `tokens` tokens (BOS included) of the held-out Revelation text.
std::vector<RealLayer> real_activations(int tokens);
