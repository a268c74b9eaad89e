// gguf_dequant.cpp: ggml block layouts and their dequantization. Each block type has one function that
// expands one block into float32 through plain fixed-length loops (the compiler vectorises them); the
// operations and their order per value are the reference ones, so results are bit-exact:
//   Q8_0: q*d   Q4_0/Q5_0: d*(q-off)   Q4_1/Q5_1: d*q + m   Q4_K/Q5_K: (d*sc)*q - dmin*m   Q6_K: (d*sc)*(q-32)
// (lib/ compiles with -ffp-contract=off, so `a*b + c` is never fused into one rounding).
#include "oscar/02_model/formats/gguf_dequant.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "oscar/01_core/error.h"

namespace oscar {

namespace {

struct TypeInfo {
  uint32_t id;
  const char* name;
  int64_t block_size;
  int64_t block_bytes;
  bool dequantizable;
};

// Block sizes and byte counts of ggml's types (ggml.c's type traits; QK_K = 256).
constexpr TypeInfo kTypes[] = {
    {0, "F32", 1, 4, true},         {1, "F16", 1, 2, true},         {2, "Q4_0", 32, 18, true},
    {3, "Q4_1", 32, 20, true},      {6, "Q5_0", 32, 22, true},      {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},      {9, "Q8_1", 32, 36, false},     {10, "Q2_K", 256, 84, false},
    {11, "Q3_K", 256, 110, false},  {12, "Q4_K", 256, 144, true},   {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true},   {15, "Q8_K", 256, 292, false},  {16, "IQ2_XXS", 256, 66, false},
    {17, "IQ2_XS", 256, 74, false}, {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
    {20, "IQ4_NL", 32, 18, false},  {21, "IQ3_S", 256, 110, false}, {22, "IQ2_S", 256, 82, false},
    {23, "IQ4_XS", 256, 136, false}, {24, "I8", 1, 1, false},       {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},       {27, "I64", 1, 8, false},       {28, "F64", 1, 8, false},
    {29, "IQ1_M", 256, 56, false},  {30, "BF16", 1, 2, true},       {34, "TQ1_0", 256, 54, false},
    {35, "TQ2_0", 256, 66, false},  {39, "MXFP4", 32, 17, false},
};

// kTypes indexed by type id (O(1) look-up: dequantize() is called once per row).
constexpr uint32_t kMaxId = 40;
struct ById {
  const TypeInfo* at[kMaxId] = {};
  constexpr ById() {
    for (const auto& t : kTypes) at[t.id] = &t;
  }
};
constexpr ById kById{};

const TypeInfo* find_type(uint32_t id) { return id < kMaxId ? kById.at[id] : nullptr; }

const TypeInfo& known_type(uint32_t id) {
  const TypeInfo* t = find_type(id);
  if (!t) fail("ggml tensor type {} is unknown to oscar-kv; supported types: {}", id, ggml_dequantizable_types());
  return *t;
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float load_half(const uint8_t* p) { return fp16_to_fp32(load_u16(p)); }

constexpr int QK = 32;    // values per block of the Q*_0 / Q*_1 types
constexpr int QKK = 256;  // values per K-quant super-block

// Q8_0: fp16 d, 32 int8.
inline void block_q8_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_half(b);
  const int8_t* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < QK; ++j) y[j] = static_cast<float>(q[j]) * d;
}

// Q4_0: fp16 d, 16 bytes: value j in the low nibble of byte j, value j+16 in its high nibble; offset 8.
// (Loops run over one half at a time, with a loop-invariant shift, so that they vectorise.)
inline void block_q4_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_half(b);
  const uint8_t* qs = b + 2;
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < QK / 2; ++j) y[16 * k + j] = d * static_cast<float>(((qs[j] >> (4 * k)) & 0x0F) - 8);
}

// Q4_1: fp16 d, fp16 m, 16 bytes of nibbles as Q4_0; value d*q + m.
inline void block_q4_1(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_half(b), m = load_half(b + 2);
  const uint8_t* qs = b + 4;
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < QK / 2; ++j) y[16 * k + j] = d * static_cast<float>((qs[j] >> (4 * k)) & 0x0F) + m;
}

// Q5_0: fp16 d, 32-bit little-endian high-bit mask (bit j = fifth bit of value j), 16 bytes of nibbles
// as Q4_0; offset 16.
inline void block_q5_0(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_half(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < QK / 2; ++j) {
      const uint32_t q = ((qs[j] >> (4 * k)) & 0x0Fu) | (((qh >> (16 * k + j)) & 1u) << 4);
      y[16 * k + j] = d * static_cast<float>(static_cast<int>(q) - 16);
    }
}

// Q5_1: fp16 d, fp16 m, then as Q5_0 without the offset; value d*q + m.
inline void block_q5_1(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_half(b), m = load_half(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < QK / 2; ++j) {
      const uint32_t q = ((qs[j] >> (4 * k)) & 0x0Fu) | (((qh >> (16 * k + j)) & 1u) << 4);
      y[16 * k + j] = d * static_cast<float>(q) + m;
    }
}

// The 12 bytes of 6-bit scales and mins of Q4_K/Q5_K for their 8 sub-blocks of 32: sub-blocks 0-3 keep
// scale and min in the low 6 bits of bytes 0-3 and 4-7; sub-blocks 4-7 keep their low 4 bits in the
// nibbles of bytes 8-11 and their top 2 bits in the top 2 bits of bytes 0-3 (scales) and 4-7 (mins).
inline void unpack_k_scales(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((s[j + 8] & 0x0F) | ((s[j] >> 6) << 4));
    mn[j + 4] = static_cast<uint8_t>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}

// Q4_K: fp16 d, fp16 dmin, 12 bytes of scales, 128 bytes: 4 chunks of 32 bytes, chunk c holding
// sub-block 2c in its low nibbles and 2c+1 in its high nibbles.
inline void block_q4_k(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_half(b), dmin = load_half(b + 2);
  uint8_t sc[8], mn[8];
  unpack_k_scales(b + 4, sc, mn);
  const uint8_t* qs = b + 16;
  for (int c = 0; c < 4; ++c) {
    const float d0 = d * static_cast<float>(sc[2 * c]), m0 = dmin * static_cast<float>(mn[2 * c]);
    const float d1 = d * static_cast<float>(sc[2 * c + 1]), m1 = dmin * static_cast<float>(mn[2 * c + 1]);
    const uint8_t* q = qs + 32 * c;
    float* y0 = y + 64 * c;
    for (int l = 0; l < 32; ++l) {
      y0[l] = d0 * static_cast<float>(q[l] & 0x0F) - m0;
      y0[l + 32] = d1 * static_cast<float>(q[l] >> 4) - m1;
    }
  }
}

// Q5_K: fp16 d, fp16 dmin, 12 bytes of scales, 32 bytes of high bits (bit i of byte l = fifth bit of
// value l of sub-block i), then the nibbles as Q4_K.
inline void block_q5_k(const uint8_t* __restrict b, float* __restrict y) {
  const float d = load_half(b), dmin = load_half(b + 2);
  uint8_t sc[8], mn[8];
  unpack_k_scales(b + 4, sc, mn);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int c = 0; c < 4; ++c) {
    const float d0 = d * static_cast<float>(sc[2 * c]), m0 = dmin * static_cast<float>(mn[2 * c]);
    const float d1 = d * static_cast<float>(sc[2 * c + 1]), m1 = dmin * static_cast<float>(mn[2 * c + 1]);
    const uint8_t* q = qs + 32 * c;
    float* y0 = y + 64 * c;
    const int s0 = 2 * c, s1 = 2 * c + 1;
    for (int l = 0; l < 32; ++l) {
      const int lo = (q[l] & 0x0F) | (((qh[l] >> s0) & 1) << 4);
      const int hi = (q[l] >> 4) | (((qh[l] >> s1) & 1) << 4);
      y0[l] = d0 * static_cast<float>(lo) - m0;
      y0[l + 32] = d1 * static_cast<float>(hi) - m1;
    }
  }
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 int8 scales (one per 16 values),
// fp16 d. Each half of 128 values uses 64 low-nibble bytes and 32 high bytes: value r (0..127) of the
// half takes nibble r/64 of low byte r%64 and bit pair r/32 of high byte r%32; offset 32.
inline void block_q6_k(const uint8_t* __restrict b, float* __restrict y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_half(b + 208);
  for (int h = 0; h < 2; ++h) {
    // Quarter g (32 values) of this half: low nibbles (g = 0, 1) or high nibbles (g = 2, 3) of low
    // bytes 32*(g&1) .., bit pair g of high bytes 0..31; each run of 16 values shares one scale.
    for (int g = 0; g < 4; ++g) {
      const uint8_t* lo = ql + 64 * h + 32 * (g & 1);
      const uint8_t* hi = qh + 32 * h;
      const int lshift = 4 * (g >> 1), hshift = 2 * g;
      for (int k = 0; k < 2; ++k) {
        const float ds = d * static_cast<float>(sc[8 * h + 2 * g + k]);
        float* yo = y + 128 * h + 32 * g + 16 * k;
        for (int l = 0; l < 16; ++l) {
          const int i = 16 * k + l;
          const int q = ((lo[i] >> lshift) & 0x0F) | (((hi[i] >> hshift) & 3) << 4);
          yo[l] = ds * static_cast<float>(q - 32);
        }
      }
    }
  }
}

template <int BlockValues, int BlockBytes, class F>
inline void blocks(const uint8_t* src, float* dst, int64_t n, F&& f) {
  const int64_t nb = n / BlockValues;
  for (int64_t i = 0; i < nb; ++i) f(src + i * BlockBytes, dst + i * BlockValues);
}

}  // namespace

uint16_t fp32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

const char* ggml_type_name(uint32_t type) {
  const TypeInfo* t = find_type(type);
  return t ? t->name : "unknown";
}

bool ggml_type_known(uint32_t type) { return find_type(type) != nullptr; }

bool ggml_type_dequantizable(uint32_t type) {
  const TypeInfo* t = find_type(type);
  return t && t->dequantizable;
}

std::string ggml_dequantizable_types() { return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"; }

int64_t ggml_block_size(uint32_t type) { return known_type(type).block_size; }
int64_t ggml_block_bytes(uint32_t type) { return known_type(type).block_bytes; }

int64_t ggml_row_bytes(uint32_t type, int64_t n) {
  const TypeInfo& t = known_type(type);
  if (n < 0 || n % t.block_size != 0)
    fail("{} values of ggml type {} do not fill whole blocks of {}; rows of this type must be a multiple of {} long",
         n, t.name, t.block_size, t.block_size);
  return n / t.block_size * t.block_bytes;
}

void dequantize(GgmlType type, const void* src_v, float* dst, int64_t n) {
  const uint32_t id = static_cast<uint32_t>(type);
  const TypeInfo* t = find_type(id);
  if (!t || !t->dequantizable)
    fail("ggml tensor type {} ({}) cannot be dequantized by oscar-kv; supported types: {}", t ? t->name : "unknown", id,
         ggml_dequantizable_types());
  if (n < 0 || n % t->block_size != 0) ggml_row_bytes(id, n);  // throws: not whole blocks
  const auto* src = static_cast<const uint8_t*>(src_v);
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_half(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(src + 2 * i));
      return;
    case GgmlType::Q8_0: return blocks<32, 34>(src, dst, n, block_q8_0);
    case GgmlType::Q4_0: return blocks<32, 18>(src, dst, n, block_q4_0);
    case GgmlType::Q4_1: return blocks<32, 20>(src, dst, n, block_q4_1);
    case GgmlType::Q5_0: return blocks<32, 22>(src, dst, n, block_q5_0);
    case GgmlType::Q5_1: return blocks<32, 24>(src, dst, n, block_q5_1);
    case GgmlType::Q4_K: return blocks<256, 144>(src, dst, n, block_q4_k);
    case GgmlType::Q5_K: return blocks<256, 176>(src, dst, n, block_q5_k);
    case GgmlType::Q6_K: return blocks<256, 210>(src, dst, n, block_q6_k);
    default: break;
  }
  fail("internal: ggml type {} marked dequantizable without a kernel", t->name);
}

void dequantize_bf16(GgmlType type, const void* src_v, uint16_t* dst, int64_t n) {
  const uint32_t id = static_cast<uint32_t>(type);
  ggml_row_bytes(id, n);
  const int64_t bs = ggml_block_size(id), bb = ggml_block_bytes(id);
  // Chunks of whole blocks through a small float buffer on the stack.
  constexpr int64_t kChunk = 1024;  // a multiple of every block size (1, 32, 256)
  float buf[kChunk];
  const auto* src = static_cast<const uint8_t*>(src_v);
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    dequantize(type, src + i / bs * bb, buf, m);
    for (int64_t j = 0; j < m; ++j) dst[i + j] = fp32_to_bf16(buf[j]);
  }
}

}  // namespace oscar
