// gpu_kv_cache.cpp: the recipe check, the device buffers (one oscar_cov_cache or oscar_omni_cache per layer,
// batch 1), and
// per token: host rotation and bf16 rounding, one upload, oscar_cov_append, oscar_cov_decode, one download,
// host un-rotation.
#include "oscar/09_cache/gpu_kv_cache.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/ranges.h>

#include "oscar/01_core/error.h"
#include "oscar/float_formats.h"
#include "oscar/omni_format.h"
#include "oscar_kv.h"

namespace oscar {

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void cuda_check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail("GpuKvCache: {} failed: {} ({})", call, cudaGetErrorName(e), cudaGetErrorString(e));
}
#define OSCAR_CUDA(call) cuda_check((call), #call)

void status_check(oscar_status s, const oscar_error& err, const char* call, int layer) {
  if (s != OSCAR_OK) fail("GpuKvCache: {} on layer {} failed: {} ({})", call, layer, err.message, oscar_status_name(s));
}

const char* dtype_label(ScaleDtype t) {
  switch (t) {
    case ScaleDtype::F16: return "fp16";
    case ScaleDtype::BF16: return "bf16";
    default: return "fp32";
  }
}

// What a kernel format takes of a tensor: its axis and group (token-wise: channels; channel-wise: tokens), the zero
// point, and whether the clip and the rounding are the cache's to choose (else: ratio clip 1, half to even).
struct FormatRule {
  QuantAxis axis;
  int group;
  ZeroPoint zero_point;
  bool any_clip_and_rounding;
};

// Why tensor `q` cannot be served by a kernel format `f` on head_dim `hd` (a recipe's `group: head` is hd
// channels); empty when it can.
std::string tensor_reason(const TensorQuant& q, const char* what, const FormatRule& f, int hd) {
  if (!q.quantized()) return fmt::format("{} are kept in fp16 while the other tensor is quantized", what);
  if (q.bits != 2 && q.bits != 4) return fmt::format("{} at {} bits, the kernels have 2 and 4", what, q.bits);
  if (q.codebook != Codebook::Uniform) return fmt::format("{} use the Lloyd-Max codebook", what);
  if (q.axis != f.axis) return fmt::format("{} are quantized per {}", what, q.axis == QuantAxis::PerChannel ? "channel" : "token");
  if (resolved_group(q, hd) != f.group)
    return fmt::format("{} in groups of {} {}, the kernels use {}", what, resolved_group(q, hd), f.axis == QuantAxis::PerToken ? "channels" : "tokens",
                       f.group);
  if (q.symmetric) return fmt::format("{} are quantized symmetrically, the kernels are asymmetric", what);
  if (q.clip_search) return fmt::format("{} use a clip search", what);
  if (q.range_with_zero) return fmt::format("{} widen their range to include 0", what);
  if (q.zero_point != f.zero_point)
    return fmt::format("{} have a{} zero point, the kernels of this format an {}", what, q.zero_point == ZeroPoint::Integer ? "n integer" : " float",
                       f.zero_point == ZeroPoint::Integer ? "integer one (OScaR's)" : "float one (the group minimum)");
  if (!f.any_clip_and_rounding && (q.clip_mode != ClipMode::Ratio || q.clip_ratio != 1.0f))
    return fmt::format("{} are clipped, the kernels of this format do not clip", what);
  if (!f.any_clip_and_rounding && q.rounding != Rounding::HalfEven)
    return fmt::format("{} round half away from zero, the kernels of this format round half to even", what);
  if (q.scale_dtype != ScaleDtype::F16) return fmt::format("{} have {} scales, the kernels store fp16", what, dtype_label(q.scale_dtype));
  return {};
}

// The oscar-cov kernel format: token-wise groups of head_dim, the cache's clip and rounding, BF16 sink + recent windows
// (compiled head_dims: gpu_unsupported_reason).
std::string cov_reason(const Recipe& r, int hd) {
  const FormatRule f{QuantAxis::PerToken, hd, ZeroPoint::Float, true};
  if (auto s = tensor_reason(r.key, "keys", f, hd); !s.empty()) return s;
  if (auto s = tensor_reason(r.value, "values", f, hd); !s.empty()) return s;
  if (r.key.bits != r.value.bits) return fmt::format("keys at {} bits and values at {}", r.key.bits, r.value.bits);
  if (r.key.clip_mode != r.value.clip_mode) return "keys and values clipped in different modes";
  if (r.key.rounding != r.value.rounding) return "keys and values rounded differently";
  if (r.omni_token_scaling) return "keys are scaled by their token norm (Omni-Token Scaling)";
  if (!r.windows.shared()) return "keys and values with windows of their own";
  const TensorWindows& w = r.windows.key;
  if (w.residual != 0) return fmt::format("a residual block of {} tokens", w.residual);
  if (w.recent <= 0) return "no recent window, the kernels keep one of at least one token";
  if (w.sink < 0) return "a negative sink";
  if (r.windows.window_dtype != ScaleDtype::BF16)
    return fmt::format("{} windows, the kernels keep them in bf16", dtype_label(r.windows.window_dtype));
  return {};
}

// The oscar-omni kernel format (omni_format.h): keys per channel over 32 tokens with fp16 token norms,
// values per token in groups of 32 channels, clip 1, BF16 residual block of 128, no sink or recent window.
std::string omni_reason(const Recipe& r, int hd) {
  if (auto s = tensor_reason(r.key, "keys", {QuantAxis::PerChannel, omnifmt::kKeyBlock, ZeroPoint::Integer, false}, hd); !s.empty()) return s;
  if (auto s = tensor_reason(r.value, "values", {QuantAxis::PerToken, omnifmt::kValueGroup, ZeroPoint::Integer, false}, hd); !s.empty()) return s;
  if (r.key.bits != r.value.bits) return fmt::format("keys at {} bits and values at {}", r.key.bits, r.value.bits);
  if (!r.omni_token_scaling) return "per-channel keys without Omni-Token Scaling";
  if (r.norm_dtype != ScaleDtype::F16) return fmt::format("{} token norms, the kernels store fp16", dtype_label(r.norm_dtype));
  if (!r.windows.shared()) return "keys and values with windows of their own";
  const TensorWindows& w = r.windows.key;
  if (w.residual != omnifmt::kResidual) return fmt::format("a residual block of {} tokens, the kernels use {}", w.residual, omnifmt::kResidual);
  if (w.sink != 0 || w.recent != 0) return "sink or recent windows besides the residual block";
  if (r.windows.window_dtype != ScaleDtype::BF16)
    return fmt::format("{} windows, the kernels keep them in bf16", dtype_label(r.windows.window_dtype));
  return {};
}

}  // namespace

bool gpu_uses_omni_format(const Recipe& r) { return r.omni_token_scaling || r.key.axis == QuantAxis::PerChannel; }

namespace {

// The head_dims the kernels of a format are compiled for (at 2 bits, as the C API reports them).
std::vector<int> compiled_head_dims(bool omni) {
  std::vector<int> hds;
  for (int hd = 32; hd <= 512; hd *= 2)
    if (omni ? oscar_omni_shape_supported(hd, 2) : oscar_cov_shape_supported(hd, 2)) hds.push_back(hd);
  return hds;
}
std::string head_dim_reason(bool omni, int hd, int bits) {
  if (omni ? oscar_omni_shape_supported(hd, bits) : oscar_cov_shape_supported(hd, bits)) return {};
  return fmt::format("the model's head_dim is {} and the {} kernels take head_dim {}", hd, omni ? "oscar-omni" : "oscar-cov",
                     fmt::join(compiled_head_dims(omni), ", "));
}

}  // namespace

std::string gpu_supported_text() {
  return fmt::format("supported: oscar-cov (head_dim {}) and oscar-omni (head_dim {}) at 2 or 4 bits, at most {} query heads per KV head",
                     fmt::join(compiled_head_dims(false), ", "), fmt::join(compiled_head_dims(true), ", "), oscar_max_query_group());
}

std::string gpu_model_unsupported_reason(const ModelConfig& c) {
  const int hd = c.head_dim();
  if (!oscar_cov_shape_supported(hd, 2) && !oscar_omni_shape_supported(hd, 2))
    return fmt::format("the model's head_dim is {}, the kernels take head_dim {}", hd, fmt::join(compiled_head_dims(false), ", "));
  const int gmax = oscar_max_query_group();
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0 || c.n_heads / c.n_kv_heads > gmax)
    return fmt::format("{} query heads on {} KV heads, at most {} per KV head", c.n_heads, c.n_kv_heads, gmax);
  return "";
}

std::string gpu_unsupported_reason(const Recipe& r, const ModelConfig& c) {
  if (std::string why = gpu_model_unsupported_reason(c); !why.empty()) return why;
  const int hd = c.head_dim();
  const bool omni = gpu_uses_omni_format(r);
  if (std::string why = omni ? omni_reason(r, hd) : cov_reason(r, hd); !why.empty()) return why;
  return head_dim_reason(omni, hd, r.key.bits);
}

void require_cuda_device() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    fail("no CUDA device: --gpu attends on the GPU and none is visible (cudaGetDeviceCount: {}); run without --gpu",
         e != cudaSuccess ? std::string(cudaGetErrorString(e)) : std::string("0 devices"));
}

// Device memory of every layer, one staging buffer for the uploads (k, v, q as bf16; two lengths) and
// the decode output and workspace, shared by the layers (one stream, synchronous per token).
struct GpuKvCache::Device {
  bool omni = false;
  std::vector<oscar_cov_cache> layers;        // oscar-cov format
  std::vector<oscar_omni_cache> omni_layers;  // oscar-omni format
  std::vector<void*> owned;
  size_t off_v = 0, off_q = 0, off_len = 0, staging_bytes = 0;
  std::vector<unsigned char> host;  // the staging buffer's host twin
  void* staging = nullptr;
  float* out = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::vector<float> out_host, row;

  void* alloc(size_t bytes) {
    void* p = nullptr;
    if (bytes == 0) return nullptr;
    OSCAR_CUDA(cudaMalloc(&p, bytes));
    owned.push_back(p);
    OSCAR_CUDA(cudaMemset(p, 0, bytes));
    return p;
  }
  void grow_workspace(size_t bytes) {
    std::erase(owned, workspace);
    OSCAR_CUDA(cudaFree(workspace));
    workspace = nullptr;
    workspace = alloc(bytes);
    workspace_bytes = bytes;
  }
  ~Device() {  // no throw from a destructor; errors surfaced by earlier calls
    for (auto& c : layers) oscar_cov_cache_destroy(&c, nullptr);
    for (auto& c : omni_layers) oscar_omni_cache_destroy(&c, nullptr);
    for (void* p : owned) cudaFree(p);
  }
};

GpuKvCache::GpuKvCache(const ModelConfig& c, const Recipe& recipe, const CovarianceRotations* calib, int capacity)
    : KvCache(c), recipe_(recipe), n_heads_(c.n_heads), n_kv_(c.n_kv_heads), head_dim_(c.head_dim()), capacity_(capacity),
      // as the CPU forward pass computes it (ops.cpp): 1/sqrt(head_dim) in float, or the architecture's own scale
      scale_(c.attention_scale > 0 ? static_cast<float>(c.attention_scale) : 1.0f / std::sqrt(static_cast<float>(c.head_dim()))),
      on_device_(c.n_layers, 0), dev_(std::make_unique<Device>()) {
  if (const std::string why = gpu_unsupported_reason(recipe, c); !why.empty())
    fail("recipe '{}' is not supported by the CUDA kernels ({}; {}); run it without --gpu", recipe.name, why, gpu_supported_text());
  if (recipe.calibrated() && !calib) fail("recipe {} needs calibration rotations (a calibration passage)", recipe.name);
  if (capacity < 1) fail("internal: GpuKvCache capacity {} must be positive", capacity);
  require_cuda_device();
  for (int l = 0; l < c.n_layers; ++l) {  // rotated on the host, per KV head where the recipe fits them per KV head
    rot_.push_back(layer_rotations(recipe, head_dim_, l, calib));
    rot_.back().check_heads(n_kv_);
  }

  Device& d = *dev_;
  const int bits = recipe.key.bits, D = head_dim_;
  const size_t H = static_cast<size_t>(n_kv_);
  d.omni = gpu_uses_omni_format(recipe);
  oscar_error err{};
  for (int l = 0; l < c.n_layers; ++l) {
    if (d.omni) {
      oscar_omni_cache k{};
      if (oscar_omni_cache_create(&k, 1, n_kv_, D, bits, capacity, &err) != OSCAR_OK) fail("GpuKvCache: {}", err.message);
      d.omni_layers.push_back(k);
      continue;
    }
    oscar_cov_cache k{};
    if (oscar_cov_cache_create(&k, 1, n_kv_, D, bits, recipe.windows.key.sink, recipe.windows.key.recent, capacity, &err) != OSCAR_OK)
      fail("GpuKvCache: {}", err.message);
    k.clip_k = recipe.key.clip_ratio;  // the recipe's row rule (cov_reason: the same mode and rounding for K and V)
    k.clip_v = recipe.value.clip_ratio;
    k.clip_mode = recipe.key.clip_mode == ClipMode::Quantile ? OSCAR_CLIP_QUANTILE : OSCAR_CLIP_RATIO;
    k.rounding = recipe.key.rounding == Rounding::HalfAway ? OSCAR_ROUND_HALF_AWAY : OSCAR_ROUND_HALF_EVEN;
    d.layers.push_back(k);
  }
  const size_t kv_bytes = H * D * 2, q_bytes = static_cast<size_t>(n_heads_) * D * 2;
  d.off_v = align_up(kv_bytes);
  d.off_q = d.off_v + align_up(kv_bytes);
  d.off_len = d.off_q + align_up(q_bytes);
  d.staging_bytes = d.off_len + 2 * sizeof(int32_t);
  d.host.assign(d.staging_bytes, 0);
  d.staging = d.alloc(d.staging_bytes);
  d.out = static_cast<float*>(d.alloc(static_cast<size_t>(n_heads_) * D * sizeof(float)));
  d.out_host.resize(static_cast<size_t>(n_heads_) * D);
  d.row.resize(D);
  d.workspace_bytes = std::max<size_t>(oscar_decode_workspace_bytes(1, n_heads_, n_kv_, D, capacity, 1), kAlign);
  d.workspace = d.alloc(d.workspace_bytes);
}

GpuKvCache::~GpuKvCache() = default;

void GpuKvCache::attention_view(int layer, int n, AttentionView& view) {
  if (windows_[layer] > 0) return KvCache::attention_view(layer, n, view);
  fail("internal: GpuKvCache attends on the GPU (attend()); it has no host view of layer {}", layer);
}

bool GpuKvCache::attend(int layer, const MatrixRM& q, MatrixRM& out) {
  if (windows_[layer] > 0) return false;  // a local layer: its window in full precision, on the host
  Device& d = *dev_;
  const int n = static_cast<int>(q.rows()), D = head_dim_;
  const int first = rows_[layer] - n;  // host rows [first, rows_) are this chunk's keys and values
  if (first != on_device_[layer] || q.cols() != static_cast<Eigen::Index>(n_heads_) * D)
    fail("internal: GpuKvCache layer {}: {} queries for rows {}..{}, {} tokens on the device", layer, n, first, rows_[layer],
         on_device_[layer]);
  const LayerRotations& rot = rot_[layer];
  auto* kdst = reinterpret_cast<uint16_t*>(d.host.data());
  auto* vdst = reinterpret_cast<uint16_t*>(d.host.data() + d.off_v);
  auto* qdst = reinterpret_cast<uint16_t*>(d.host.data() + d.off_q);
  auto* lens = reinterpret_cast<int32_t*>(d.host.data() + d.off_len);
  unsigned char* dbase = static_cast<unsigned char*>(d.staging);
  const float scale = scale_;
  const int group = n_heads_ / n_kv_;
  // Rotates row segment `src` (D floats) by `r` (inverse when `inverse`) into d.row.
  auto rotate = [&](const float* src, const Rotation& r, bool inverse) {
    std::memcpy(d.row.data(), src, sizeof(float) * D);
    inverse ? r.apply_inverse(d.row.data(), 1) : r.apply(d.row.data(), 1);
  };
  for (int t = 0; t < n; ++t) {
    const int L = on_device_[layer], row = first + t;
    if (L + 1 > capacity_) fail("GpuKvCache: token {} is beyond the {} tokens the cache was sized for", L, capacity_);
    for (int h = 0; h < n_kv_; ++h) {
      rotate(&k_[layer](row, h * D), rot.key(h), false);
      for (int i = 0; i < D; ++i) kdst[h * D + i] = float_to_bf16_bits(d.row[i]);
      rotate(&v_[layer](row, h * D), rot.value(h), false);
      for (int i = 0; i < D; ++i) vdst[h * D + i] = float_to_bf16_bits(d.row[i]);
    }
    for (int h = 0; h < n_heads_; ++h) {
      rotate(&q(t, h * D), rot.key(h / group), false);  // query head h reads KV head h / group
      for (int i = 0; i < D; ++i) qdst[h * D + i] = float_to_bf16_bits(d.row[i]);
    }
    lens[0] = L;      // append writes token L
    lens[1] = L + 1;  // decode attends to tokens 0..L
    OSCAR_CUDA(cudaMemcpy(d.staging, d.host.data(), d.staging_bytes, cudaMemcpyHostToDevice));
    const auto* dlens = reinterpret_cast<const int32_t*>(dbase + d.off_len);
    oscar_error err{};
    if (d.omni)
      status_check(oscar_omni_append_plain(&d.omni_layers[layer], dbase, dbase + d.off_v, dlens, L, nullptr, &err), err, "oscar_omni_append",
                   layer);
    else
      status_check(oscar_cov_append_plain(&d.layers[layer], dbase, dbase + d.off_v, dlens, L, nullptr, &err), err, "oscar_cov_append",
                   layer);
    if (const size_t need = oscar_decode_workspace_bytes(1, n_heads_, n_kv_, D, L + 1, 1); need > d.workspace_bytes)
      d.grow_workspace(need);  // sized for the capacity at construction; grown if a shorter length needs more
    if (d.omni)
      status_check(oscar_omni_decode_plain(&d.omni_layers[layer], dbase + d.off_q, n_heads_, dlens + 1, L + 1, scale, d.out, d.workspace,
                                     d.workspace_bytes, nullptr, &err),
                   err, "oscar_omni_decode", layer);
    else
      status_check(oscar_cov_decode_plain(&d.layers[layer], dbase + d.off_q, n_heads_, dlens + 1, L + 1, scale, d.out, d.workspace,
                                   d.workspace_bytes, nullptr, &err),
                   err, "oscar_cov_decode", layer);
    OSCAR_CUDA(cudaMemcpy(d.out_host.data(), d.out, d.out_host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    OSCAR_CUDA(cudaGetLastError());
    for (int h = 0; h < n_heads_; ++h) {
      rotate(&d.out_host[static_cast<size_t>(h) * D], rot.value(h / group), true);
      for (int i = 0; i < D; ++i) out(t, h * D + i) = d.row[i];
    }
    on_device_[layer] = L + 1;
  }
  return true;
}

}  // namespace oscar
