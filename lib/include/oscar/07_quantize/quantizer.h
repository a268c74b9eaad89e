// quantizer.h: the CPU reference quantizers: a head's [tokens, dim] block (already rotated and
// scaled) -> codes + group parameters -> dequantized values, following quant_rules.h exactly.
// Per-token: groups of `group` consecutive channels of one token. Per-channel: groups of `group`
// consecutive tokens of one channel (tokens must be a multiple of group). LloydMax: see recipe.h.
#pragma once
#include <cstdint>
#include <vector>

#include "oscar/05_recipe/recipe.h"

namespace oscar {

struct QuantizedBlock {
  int tokens = 0, dim = 0;
  TensorQuant spec;
  std::vector<uint8_t> codes;        // [tokens * dim], row-major, one code per byte (unpacked)
  std::vector<GroupParams> params;   // per-token: [tokens][dim/group]; per-channel: [tokens/group][dim]
  std::vector<float> clip_used;      // per group: clip ratio chosen (== spec.clip_ratio unless clip_search)
                                     // (clip search: grid 1.00, 0.98, ..., 0.50 and spec.clip_ratio;
                                     // least squared error, ties to the larger ratio); empty for LloydMax
  std::vector<float> token_norms;    // LloydMax only: stored per-token norms (params empty)
};

// LloydMax: n = stored ||x_t||, u = x / n (float), s = 1 / sqrt(dim) (double); code = number of
// float(threshold * s) < u; x^ = float(level[code] * s) * n (a zero norm gives codes 0 and x^ = 0).
// Throws Error for an invalid spec, bits = 16, a non-finite input or parameters overflowing scale_dtype.
QuantizedBlock quantize_block(const float* x, int tokens, int dim, const TensorQuant& spec);
void dequantize_block(const QuantizedBlock& q, float* out);  // [tokens * dim]

// Packed bytes of one token's codes (per-token rows) as the kernels store them (quant_rules.h).
std::vector<uint8_t> pack_row(const uint8_t* codes, int n, int bits);

// Storage of a quantized block, in bits: payload (codes) and metadata (scales, zeros, norms).
struct BitCost {
  double payload = 0, metadata = 0;
  double total() const { return payload + metadata; }
};
BitCost block_bits(const TensorQuant& spec, int tokens, int dim);

// Lloyd-Max reconstruction levels (2^bits, ascending) and decision thresholds (2^bits - 1) for the
// standard normal distribution; scaled by sigma by the caller. bits 1..4; computed once per process.
struct LloydMaxCodebook {
  std::vector<double> levels, thresholds;
};
const LloydMaxCodebook& lloyd_max_normal(int bits);

}  // namespace oscar
