// gpu_kv_cache.h: a KvCache whose attention runs on the GPU, through the CUDA decode kernels
// (kernels/include/oscar_kv.h, formats oscar-cov and oscar-omni) over the kernels' own quantized cache, token by token
// as a server would. Each new token's K and V are rotated on the host by the recipe's R_K and R_V
// (layer_rotations, as QuantizedKvCache and cache_sim get them; one per KV head with covariance_scope: kv-head,
// a query head taking its KV head's R_K and its output that head's R_V), rounded to bf16 (nearest even) and
// appended with oscar_cov_append (the kernel quantizes the token leaving the recent window into the
// body); the query is rotated by R_K, oscar_cov_decode attends (the model's softmax scale), and the
// output is un-rotated on the host (o = o' R_V^T). Every CUDA call and oscar_status is checked; a
// failure throws oscar::Error with the layer and the call.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "oscar/07_quantize/cache_sim.h"
#include "oscar/02_model/forward/model.h"

namespace oscar {

// Empty when a CUDA kernel format implements `recipe` (resolved, or with `group: head` = head_dim) for a
// model of config `c`; otherwise what does not fit. Both formats: a head_dim their kernels are compiled for (the C API's
// oscar_*_shape_supported: oscar-cov 64, 128, 256), at most 16 query heads per KV head, bits 2 or 4 on K and V,
// asymmetric uniform fp16 scale/zero, round half to even, bf16 windows, any rotation (applied on the host).
// oscar-cov format: token-wise groups of head_dim, sink + recent window (recent > 0), no residual block,
// no token scaling. oscar-omni format (chosen when the recipe scales tokens or has per-channel keys):
// Omni-Token Scaling with fp16 norms, keys per channel over 32 tokens, values per token in groups of 32,
// clip 1, residual block of 128, no sink or recent window.
std::string gpu_unsupported_reason(const Recipe& recipe, const ModelConfig& c);
// The part of it that depends on the model alone (a head_dim some format takes, at most 16 query heads per KV head), or "":
// checkable before a recipe is resolved for the model's head_dim.
std::string gpu_model_unsupported_reason(const ModelConfig& c);
// What the kernels support, for messages, from the kernels' own tables: "supported: oscar-cov (head_dim 64, 128,
// 256) and oscar-omni (head_dim ...) at 2 or 4 bits, at most 16 query heads per KV head".
std::string gpu_supported_text();

// Throws Error "no CUDA device: ...; run without --gpu" unless a CUDA device is visible.
void require_cuda_device();

class GpuKvCache : public KvCache {
 public:
  // `recipe` resolved for the model's head_dim (it must pass gpu_unsupported_reason); `calib` for
  // calibrated recipes; `capacity`: the most tokens the sequence will hold (device buffers are sized once).
  GpuKvCache(const ModelConfig& c, const Recipe& recipe, const CovarianceRotations* calib, int capacity);
  ~GpuKvCache() override;
  GpuKvCache(const GpuKvCache&) = delete;
  GpuKvCache& operator=(const GpuKvCache&) = delete;

  // Appends the chunk's rows of a global layer to the device cache and attends, row by row (causal within the
  // chunk); a local (sliding-window) layer returns false and attends on the host over its full-precision window.
  bool attend(int layer, const MatrixRM& q, MatrixRM& out) override;
  // A local layer's window; a global layer has no host view of the quantized cache: throws.
  void attention_view(int layer, int n, AttentionView& view) override;
  bool serves_chunks() const override { return false; }

 private:
  struct Device;
  Recipe recipe_;
  int n_heads_, n_kv_, head_dim_, capacity_;
  float scale_;
  std::vector<LayerRotations> rot_;
  std::vector<int> on_device_;  // per layer: tokens appended to the device cache
  std::unique_ptr<Device> dev_;
};

}  // namespace oscar
