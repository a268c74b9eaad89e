// cache_image.h: a cache format's device arrays as host bytes, named and shaped, with a flag per element
// that says whether the element is live (holds a token of some sequence) and so is part of the format's
// contract. The CPU twins (cov_twin.h, omni_twin.h) build images; the GPU driver downloads the kernels'
// arrays into images of the same shape and compares the live elements bit for bit (compare below).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "oscar/float_formats.h"
#include "oscar/quant_rules.h"

namespace twins {

// A group's (scale, zero) as the kernels store it: two fp16 in one 32-bit word, scale in the low half.
inline uint32_t pack_params(oscar::GroupParams p) {
  return uint32_t(oscar::float_to_half_bits(p.scale)) | (uint32_t(oscar::float_to_half_bits(p.zero)) << 16);
}

// One device array: elements of `elem_bytes` bytes, row-major over `dims` (dim_names label them in messages).
struct Array {
  std::string name;
  int elem_bytes = 1;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_names;
  std::vector<uint8_t> data;  // elements() * elem_bytes bytes
  std::vector<uint8_t> live;  // one flag per element

  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  void init(std::string n, int eb, std::vector<int64_t> d, std::vector<std::string> names) {
    name = std::move(n); elem_bytes = eb; dims = std::move(d); dim_names = std::move(names);
    data.assign(size_t(elements()) * eb, 0);
    live.assign(size_t(elements()), 0);
  }
  int64_t bytes() const { return int64_t(data.size()); }
  template <class T> T* as() { return reinterpret_cast<T*>(data.data()); }
  template <class T> const T* as() const { return reinterpret_cast<const T*>(data.data()); }
  uint64_t element(int64_t i) const {
    uint64_t v = 0;
    std::memcpy(&v, &data[size_t(i) * elem_bytes], size_t(elem_bytes));
    return v;
  }
  // "k_codes[bh=3][t=17][byte=5]" for flat element index i.
  std::string where(int64_t i) const {
    std::vector<int64_t> idx(dims.size());
    for (size_t d = dims.size(); d-- > 0;) { idx[d] = i % dims[d]; i /= dims[d]; }
    std::string s = name;
    for (size_t d = 0; d < dims.size(); ++d) s += "[" + dim_names[d] + "=" + std::to_string(idx[d]) + "]";
    return s;
  }
};

struct Image {
  std::vector<Array> arrays;
  // Appends an array of `elem_bytes`-byte elements over dims; aborts (naming the twin) unless it holds exactly the
  // layout's `layout_bytes`.
  Array& add(const char* twin, const char* n, int elem_bytes, std::vector<int64_t> dims, std::vector<std::string> names,
             int64_t layout_bytes) {
    arrays.emplace_back();
    Array& a = arrays.back();
    a.init(n, elem_bytes, std::move(dims), std::move(names));
    if (a.bytes() != layout_bytes) {
      std::fprintf(stderr, "%s: %s holds %lld bytes, the layout says %lld\n", twin, n, (long long)a.bytes(), (long long)layout_bytes);
      std::abort();
    }
    return a;
  }
  // The K and V arrays k_<stem> and v_<stem>, both of this shape.
  void add_kv(const char* twin, const std::string& stem, int elem_bytes, const std::vector<int64_t>& dims,
              const std::vector<std::string>& names, int64_t layout_bytes) {
    add(twin, ("k_" + stem).c_str(), elem_bytes, dims, names, layout_bytes);
    add(twin, ("v_" + stem).c_str(), elem_bytes, dims, names, layout_bytes);
  }
  Array& get(const std::string& n) {
    for (Array& a : arrays) if (a.name == n) return a;
    std::fprintf(stderr, "cache_image: no array %s\n", n.c_str());
    std::abort();
  }
  const Array& get(const std::string& n) const { return const_cast<Image*>(this)->get(n); }
};

// Live elements of `got` that differ from `want` (same shapes; `want`'s live flags decide). Returns the
// number of mismatching elements; the first `report` of them are appended to *log, one line each, with
// the array, the index and both values in hex.
inline int64_t compare(const Image& want, const Image& got, std::string* log, int report = 8) {
  int64_t bad = 0;
  for (size_t a = 0; a < want.arrays.size(); ++a) {
    const Array& w = want.arrays[a];
    const Array& g = got.arrays[a];
    if (g.name != w.name || g.data.size() != w.data.size()) {
      ++bad;
      if (log) *log += "  array " + w.name + ": shape differs (" + std::to_string(w.bytes()) + " vs " + std::to_string(g.bytes()) + " bytes)\n";
      continue;
    }
    const int64_t n = w.elements();
    int64_t bad_here = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!w.live[size_t(i)]) continue;
      if (std::memcmp(&w.data[size_t(i) * w.elem_bytes], &g.data[size_t(i) * w.elem_bytes], size_t(w.elem_bytes)) == 0) continue;
      ++bad_here;
      if (log && bad < report) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "  %s: twin 0x%0*llx, got 0x%0*llx\n", w.where(i).c_str(), 2 * w.elem_bytes,
                      (unsigned long long)w.element(i), 2 * w.elem_bytes, (unsigned long long)g.element(i));
        *log += buf;
      }
      ++bad;
    }
    if (log && bad_here) *log += "  " + w.name + ": " + std::to_string(bad_here) + " live element(s) differ\n";
  }
  return bad;
}

// Rows [0, L) of one (sequence, KV head) of a twin cache with D channels, dequantized into K, V ([L][D], double) by
// value(is_v, t, ch): the decode reference's cache.
template <class Value>
void dequant_rows(int D, int64_t L, std::vector<double>& K, std::vector<double>& V, Value value) {
  K.resize(size_t(L) * D);
  V.resize(K.size());
  for (int64_t t = 0; t < L; ++t)
    for (int ch = 0; ch < D; ++ch) {
      K[size_t(t) * D + ch] = value(false, t, ch);
      V[size_t(t) * D + ch] = value(true, t, ch);
    }
}

// A bf16 tensor [B][H][T][D] (raw bits) with T the row stride: the kernels' K/V input layout.
struct Bf16Rows {
  int B = 0, H = 0, T = 0, D = 0;
  std::vector<uint16_t> x;
  void init(int b, int h, int t, int d) { B = b; H = h; T = t; D = d; x.assign(size_t(b) * h * t * d, 0); }
  uint16_t& at(int b, int h, int64_t t, int c) { return x[((size_t(b) * H + h) * T + size_t(t)) * D + c]; }
  uint16_t at(int b, int h, int64_t t, int c) const { return x[((size_t(b) * H + h) * T + size_t(t)) * D + c]; }
  const uint16_t* row(int b, int h, int64_t t) const { return &x[((size_t(b) * H + h) * T + size_t(t)) * D]; }
};

}  // namespace twins
