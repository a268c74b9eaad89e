// quantizer.cpp: CPU reference quantizers of a [tokens, dim] block (uniform per-token / per-channel
// groups with optional clip search, and the LloydMax codebook). Every uniform code and parameter comes
// from quant_rules.h, so these codes are the ones the CUDA kernels must reproduce bit for bit.
#include "oscar/07_quantize/quantizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>

#include "oscar/01_core/error.h"

namespace oscar {
namespace {

const char* dtype_name(ScaleDtype t) {
  return t == ScaleDtype::F16 ? "f16" : t == ScaleDtype::BF16 ? "bf16" : "f32";
}

// Element i of a group sits at x[base + i * stride].
struct GroupView {
  size_t base, stride;
  int n;
};

size_t group_count(const TensorQuant& s, int tokens, int dim) {
  return static_cast<size_t>(tokens) * static_cast<size_t>(dim) / static_cast<size_t>(s.group);
}

// Group gi in params order: per-token gi = t * (dim/G) + g; per-channel gi = tg * dim + c.
GroupView group_at(const TensorQuant& s, int dim, size_t gi) {
  const size_t G = static_cast<size_t>(s.group), D = static_cast<size_t>(dim);
  if (s.axis == QuantAxis::PerToken) {
    const size_t per_token = D / G;
    return {(gi / per_token) * D + (gi % per_token) * G, 1, s.group};
  }
  return {(gi / D) * G * D + gi % D, D, s.group};
}

// The clip ratios clip search tries, descending: 1.00, 0.98, ..., 0.50 plus `extra` if off the grid.
std::vector<float> clip_candidates(float extra) {
  static const std::array<float, 26> grid = [] {
    std::array<float, 26> g{};
    for (int k = 0; k < 26; ++k) g[k] = static_cast<float>((100 - 2 * k) / 100.0);
    return g;
  }();
  std::vector<float> c(grid.begin(), grid.end());
  if (std::find(c.begin(), c.end(), extra) == c.end()) c.push_back(extra);
  std::sort(c.begin(), c.end(), [](float a, float b) { return a > b; });
  return c;
}

// The parameters of one group and the rule that codes it (float or integer zero point).
struct GroupRule {
  GroupParams p;
  float z = 0;  // integer zero point, in steps
  bool int_zero = false;
  uint8_t code(float x, const TensorQuant& s) const {
    return int_zero ? quantize_value_int_zero(x, IntZeroParams{p, z}, s.bits, s.rounding) : quantize_value(x, p, s.bits, s.symmetric, s.rounding);
  }
};

GroupRule checked_params(float mn, float mx, float clip, const TensorQuant& s) {
  if (s.range_with_zero) {  // QuaRot: the range always holds 0
    mn = std::min(mn, 0.0f);
    mx = std::max(mx, 0.0f);
  }
  GroupRule g;
  if (s.zero_point == ZeroPoint::Integer && !s.symmetric) {
    const IntZeroParams q = int_zero_params(mn, mx, s.bits, clip, s.scale_dtype);
    g = GroupRule{q.p, q.z, true};
  } else {
    g.p = group_params(mn, mx, s.bits, s.symmetric, clip, s.scale_dtype);
  }
  if (!std::isfinite(g.p.scale) || !std::isfinite(g.p.zero))
    fail("group parameters overflow {}: group range [{}, {}] with clip {} gives scale {}, zero {}; "
         "use scale_dtype bf16 or f32",
         dtype_name(s.scale_dtype), mn, mx, clip, g.p.scale, g.p.zero);
  return g;
}

// Squared reconstruction error of one group under rule g.
double group_sq_error(const float* x, GroupView v, const GroupRule& g, const TensorQuant& s) {
  double err = 0.0;
  for (int i = 0; i < v.n; ++i) {
    const float xi = x[v.base + i * v.stride];
    const double d = static_cast<double>(xi) - dequantize_value(g.code(xi, s), g.p, s.bits, s.symmetric);
    err += d * d;
  }
  return err;
}

// OSCAR's quantile clip of every token row of a [tokens, dim] block (quant_rules.h: quantile_clip_index,
// clamp_to_threshold), as a new block.
std::vector<float> quantile_clamped(const float* x, int tokens, int dim, float ratio) {
  const int k = quantile_clip_index(ratio, dim);
  std::vector<float> out(x, x + static_cast<size_t>(tokens) * dim), mag(static_cast<size_t>(dim));
  for (int t = 0; t < tokens; ++t) {
    float* row = out.data() + static_cast<size_t>(t) * dim;
    for (int c = 0; c < dim; ++c) mag[c] = std::fabs(row[c]);
    std::nth_element(mag.begin(), mag.begin() + k, mag.end());
    const float threshold = mag[k];
    for (int c = 0; c < dim; ++c) row[c] = clamp_to_threshold(row[c], threshold);
  }
  return out;
}

void quantize_uniform(const float* x_in, QuantizedBlock& q) {
  const TensorQuant& s = q.spec;
  std::vector<float> clamped;
  const float* x = x_in;
  if (s.clip_mode == ClipMode::Quantile) {
    clamped = quantile_clamped(x_in, q.tokens, q.dim, s.clip_ratio);
    x = clamped.data();
  }
  const float ratio = s.clip_mode == ClipMode::Ratio ? s.clip_ratio : 1.0f;
  const size_t groups = group_count(s, q.tokens, q.dim);
  q.params.resize(groups);
  q.clip_used.resize(groups);
  const std::vector<float> cands = s.clip_search ? clip_candidates(ratio) : std::vector<float>{};
  for (size_t gi = 0; gi < groups; ++gi) {
    const GroupView v = group_at(s, q.dim, gi);
    float mn = x[v.base], mx = x[v.base];
    for (int i = 1; i < v.n; ++i) {
      const float xi = x[v.base + i * v.stride];
      mn = std::min(mn, xi);
      mx = std::max(mx, xi);
    }
    float clip = ratio;
    GroupRule g = checked_params(mn, mx, clip, s);
    if (s.clip_search) {
      double best = -1.0;
      for (float c : cands) {  // descending, strict improvement only: ties keep the larger ratio
        const GroupRule gc = checked_params(mn, mx, c, s);
        const double e = group_sq_error(x, v, gc, s);
        if (best < 0.0 || e < best) {
          best = e;
          clip = c;
          g = gc;
        }
      }
    }
    q.params[gi] = g.p;
    q.clip_used[gi] = clip;
    for (int i = 0; i < v.n; ++i) {
      const size_t k = v.base + i * v.stride;
      q.codes[k] = g.code(x[k], s);
    }
  }
}

// Codebook scaled to N(0, 1/dim), in float (the precision codes are decided and values rebuilt in).
struct ScaledCodebook {
  std::vector<float> levels, thresholds;
};
ScaledCodebook scaled_codebook(int bits, int dim) {
  const LloydMaxCodebook& cb = lloyd_max_normal(bits);
  const double sigma = 1.0 / std::sqrt(static_cast<double>(dim));
  ScaledCodebook out;
  for (double l : cb.levels) out.levels.push_back(static_cast<float>(l * sigma));
  for (double t : cb.thresholds) out.thresholds.push_back(static_cast<float>(t * sigma));
  return out;
}

void quantize_lloyd_max(const float* x, QuantizedBlock& q) {
  const TensorQuant& s = q.spec;
  const ScaledCodebook cb = scaled_codebook(s.bits, q.dim);
  q.token_norms.resize(q.tokens);
  for (int t = 0; t < q.tokens; ++t) {
    const float* row = x + static_cast<size_t>(t) * q.dim;
    uint8_t* codes = q.codes.data() + static_cast<size_t>(t) * q.dim;
    double ss = 0.0;
    for (int c = 0; c < q.dim; ++c) ss += static_cast<double>(row[c]) * row[c];
    const float n = store_param(static_cast<float>(std::sqrt(ss)), s.scale_dtype);
    if (!std::isfinite(n))
      fail("token {} has L2 norm {} which overflows {}; use scale_dtype bf16 or f32 for the LloydMax norms",
           t, std::sqrt(ss), dtype_name(s.scale_dtype));
    q.token_norms[t] = n;
    for (int c = 0; c < q.dim; ++c) {
      if (n == 0.0f) {
        codes[c] = 0;
        continue;
      }
      const float u = row[c] / n;  // code = number of thresholds strictly below u
      codes[c] = static_cast<uint8_t>(
          std::lower_bound(cb.thresholds.begin(), cb.thresholds.end(), u) - cb.thresholds.begin());
    }
  }
}

}  // namespace

QuantizedBlock quantize_block(const float* x, int tokens, int dim, const TensorQuant& spec) {
  validate_spec(spec, tokens, dim);
  if (!spec.quantized())
    fail("quantize_block called with bits {} (not quantized); keep such a tensor in fp16 instead", spec.bits);
  const size_t n = static_cast<size_t>(tokens) * static_cast<size_t>(dim);
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      fail("value {} at token {}, channel {} is not finite; the block to quantize must be finite",
           x[i], i / dim, i % dim);
  QuantizedBlock q;
  q.tokens = tokens;
  q.dim = dim;
  q.spec = spec;
  q.codes.assign(n, 0);
  if (spec.codebook == Codebook::LloydMax)
    quantize_lloyd_max(x, q);
  else
    quantize_uniform(x, q);
  return q;
}

void dequantize_block(const QuantizedBlock& q, float* out) {
  const TensorQuant& s = q.spec;
  validate_spec(s, q.tokens, q.dim);
  if (!s.quantized()) fail("dequantize_block called with bits {} (not quantized)", s.bits);
  const size_t n = static_cast<size_t>(q.tokens) * static_cast<size_t>(q.dim);
  if (q.codes.size() != n)
    fail("quantized block holds {} codes for {} x {}; it was not made by quantize_block", q.codes.size(),
         q.tokens, q.dim);
  if (s.codebook == Codebook::LloydMax) {
    if (q.token_norms.size() != static_cast<size_t>(q.tokens))
      fail("LloydMax block holds {} token norms for {} tokens; it was not made by quantize_block",
           q.token_norms.size(), q.tokens);
    const ScaledCodebook cb = scaled_codebook(s.bits, q.dim);
    for (size_t i = 0; i < n; ++i) {
      const float norm = q.token_norms[i / q.dim];
      out[i] = norm == 0.0f ? 0.0f : cb.levels.at(q.codes[i]) * norm;
    }
    return;
  }
  const size_t groups = group_count(s, q.tokens, q.dim);
  if (q.params.size() != groups)
    fail("quantized block holds {} group parameters, expected {}; it was not made by quantize_block",
         q.params.size(), groups);
  for (size_t gi = 0; gi < groups; ++gi) {
    const GroupView v = group_at(s, q.dim, gi);
    for (int i = 0; i < v.n; ++i) {
      const size_t k = v.base + i * v.stride;
      out[k] = dequantize_value(q.codes[k], q.params[gi], s.bits, s.symmetric);
    }
  }
}

std::vector<uint8_t> pack_row(const uint8_t* codes, int n, int bits) {
  if (bits < 1 || bits > 8) fail("cannot pack {}-bit codes; use 1..8 bits", bits);
  if (n < 0) fail("cannot pack {} codes; the count must be >= 0", n);
  std::vector<uint8_t> out(static_cast<size_t>(packed_bytes(n, bits)), 0);
  for (int i = 0; i < n; ++i) {
    if (codes[i] > max_code(bits))
      fail("code {} at index {} does not fit in {} bits (max {})", codes[i], i, bits, max_code(bits));
    pack_code(out.data(), i, codes[i], bits);
  }
  return out;
}

BitCost block_bits(const TensorQuant& spec, int tokens, int dim) {
  validate_spec(spec, tokens, dim);
  const double elems = static_cast<double>(tokens) * dim;
  BitCost c;
  c.payload = elems * spec.bits;
  if (!spec.quantized()) return c;
  const double param_bits = 8.0 * scale_dtype_bytes(spec.scale_dtype);
  if (spec.codebook == Codebook::LloydMax) {
    c.metadata = tokens * param_bits;
  } else {
    const double groups = elems / spec.group;
    c.metadata = groups * (spec.symmetric ? 1 : 2) * param_bits;
  }
  return c;
}

}  // namespace oscar
