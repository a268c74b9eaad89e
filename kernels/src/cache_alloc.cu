// cache_alloc.cu: the format units' host helpers: allocate and fill, or free, the C struct of either cache
// format, with every array's size taken from its layout function (oscar/cov_format.h, oscar/omni_format.h).
// One zeroed cudaMalloc per cache, carved into 16-byte-aligned arrays in struct order (the first array's
// pointer is the allocation), and a second zeroed one for the decode arrival counters; destroy frees both.
#include <cuda_runtime.h>

#include "api_util.h"
#include "decode/checks.h"
#include "oscar/cov_format.h"
#include "oscar/omni_format.h"
#include "oscar_kv.h"

namespace {

int64_t round16(int64_t b) { return (b + 15) / 16 * 16; }

// Shapes every format allocates for; the kernels' own checks (head_dim compiled, GQA) come at launch.
oscar_status check_shape(const char* fn, int32_t batch, int32_t kv_heads, int32_t head_dim, int32_t bits,
                         int64_t capacity, oscar_error* err) {
  if (batch < 1 || kv_heads < 1)
    return oscar::api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: batch=%d num_kv_heads=%d must be positive", fn, batch, kv_heads);
  if (head_dim < 32 || head_dim % 32 != 0)
    return oscar::api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: head_dim=%d must be a positive multiple of 32", fn, head_dim);
  if (bits != 2 && bits != 4) return oscar::api::fail(err, OSCAR_ERR_UNSUPPORTED, "%s: bits=%d unsupported (2 or 4)", fn, bits);
  if (capacity < 1) return oscar::api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: capacity=%lld must be positive", fn, (long long)capacity);
  return OSCAR_OK;
}

// One allocation carved into `n` arrays of the given byte sizes (each rounded up to 16 bytes).
oscar_status carve(const char* fn, const int64_t* bytes, void** const out[], int n, oscar_error* err) {
  if (oscar_device_count() == 0) return oscar::api::fail(err, OSCAR_ERR_NO_DEVICE, "%s: no CUDA device is visible", fn);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += round16(bytes[i]);
  void* base = nullptr;
  OSCAR_CUDA_TRY(cudaMalloc(&base, static_cast<size_t>(total)), err, fn);
  const cudaError_t e = cudaMemset(base, 0, static_cast<size_t>(total));
  if (e != cudaSuccess) {
    cudaFree(base);
    return oscar::api::fail(err, OSCAR_ERR_CUDA, "%s: CUDA error %s (%s)", fn, cudaGetErrorName(e), cudaGetErrorString(e));
  }
  char* p = static_cast<char*>(base);
  for (int i = 0; i < n; ++i) {
    *out[i] = p;
    p += round16(bytes[i]);
  }
  return OSCAR_OK;
}

// The decode arrival counters of batch x kv_heads (oscar_kv.h): zeroed; frees `base` (the arrays) on failure.
oscar_status make_arrivals(const char* fn, int32_t batch, int32_t kv_heads, void* base, uint32_t** out, oscar_error* err) {
  const size_t n = static_cast<size_t>(batch) * kv_heads * oscar::kernels::kUnitsPerKvHead * sizeof(uint32_t);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, n);
  if (e == cudaSuccess) {
    e = cudaMemset(p, 0, n);
    if (e != cudaSuccess) cudaFree(p);
  }
  if (e != cudaSuccess) {
    cudaFree(base);
    return oscar::api::fail(err, OSCAR_ERR_CUDA, "%s: CUDA error %s (%s)", fn, cudaGetErrorName(e), cudaGetErrorString(e));
  }
  *out = static_cast<uint32_t*>(p);
  return OSCAR_OK;
}

// The struct of a cache of this shape (shape fields set, arrays NULL), after the checks every format shares.
template <class Cache>
oscar_status shaped(const char* fn, const Cache* cache, int32_t batch, int32_t kv_heads, int32_t head_dim, int32_t bits, int64_t capacity,
                    oscar_error* err, Cache& c) {
  if (!cache) return oscar::api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  if (oscar_status st = check_shape(fn, batch, kv_heads, head_dim, bits, capacity, err); st != OSCAR_OK) return st;
  c = Cache{};
  c.batch = batch;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.bits = bits;
  return OSCAR_OK;
}

// Carves c's N arrays (sizes `bytes`, the first one the allocation) and makes its arrival counters; *cache = c on success.
template <class Cache, int N>
oscar_status allocate(const char* fn, Cache& c, const int64_t (&bytes)[N], void** const (&arrays)[N], Cache* cache, oscar_error* err) {
  if (oscar_status st = carve(fn, bytes, arrays, N, err); st != OSCAR_OK) return st;
  if (oscar_status st = make_arrivals(fn, c.batch, c.num_kv_heads, *arrays[0], &c.arrivals, err); st != OSCAR_OK) return st;
  *cache = c;
  return OSCAR_OK;
}

// Frees the allocation (its first array, `base`) and the arrival counters of *cache, and clears the struct.
template <class Cache>
oscar_status release(const char* fn, Cache* cache, void* Cache::*base, oscar_error* err) {
  if (!cache) return oscar::api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  if (cache->*base) OSCAR_CUDA_TRY(cudaFree(cache->*base), err, fn);
  if (cache->arrivals) OSCAR_CUDA_TRY(cudaFree(cache->arrivals), err, fn);
  *cache = Cache{};
  return OSCAR_OK;
}

}  // namespace

extern "C" int64_t oscar_cov_cache_bytes(int32_t batch, int32_t num_kv_heads, int32_t head_dim, int32_t bits, int32_t sink,
                                         int32_t recent, int64_t capacity) {
  if (check_shape("", batch, num_kv_heads, head_dim, bits, capacity, nullptr) != OSCAR_OK || sink < 0 || recent < 1) return 0;
  const oscar::covfmt::Layout l = oscar::covfmt::layout(batch, num_kv_heads, head_dim, bits, capacity, sink, recent);
  return 2 * (round16(l.sink_bytes) + round16(l.recent_bytes) + round16(l.codes_bytes) + round16(l.params_bytes));
}

extern "C" oscar_status oscar_cov_cache_create(oscar_cov_cache* cache, int32_t batch, int32_t num_kv_heads, int32_t head_dim,
                                               int32_t bits, int32_t sink, int32_t recent, int64_t capacity, oscar_error* err) {
  const char* fn = "oscar_cov_cache_create";
  oscar_cov_cache c;
  if (oscar_status st = shaped(fn, cache, batch, num_kv_heads, head_dim, bits, capacity, err, c); st != OSCAR_OK) return st;
  if (sink < 0 || recent < 1)
    return oscar::api::fail(err, OSCAR_ERR_INVALID_ARGUMENT, "%s: sink=%d recent=%d (sink >= 0, recent >= 1)", fn, sink, recent);
  const oscar::covfmt::Layout l = oscar::covfmt::layout(batch, num_kv_heads, head_dim, bits, capacity, sink, recent);
  c.sink = sink;
  c.recent = recent;
  c.body_capacity = l.body_capacity;
  c.clip_k = oscar::covfmt::kClipK;
  c.clip_v = oscar::covfmt::kClipV;
  c.clip_mode = static_cast<int32_t>(oscar::covfmt::default_clip_mode(bits));
  c.rounding = static_cast<int32_t>(oscar::covfmt::kRounding);
  const int64_t bytes[8] = {l.sink_bytes, l.sink_bytes, l.recent_bytes, l.recent_bytes,
                            l.codes_bytes, l.codes_bytes, l.params_bytes, l.params_bytes};
  void** const arrays[8] = {&c.k_sink, &c.v_sink, &c.k_recent, &c.v_recent, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params};
  return allocate(fn, c, bytes, arrays, cache, err);
}

extern "C" oscar_status oscar_cov_cache_destroy(oscar_cov_cache* cache, oscar_error* err) {
  return release("oscar_cov_cache_destroy", cache, &oscar_cov_cache::k_sink, err);
}

extern "C" int64_t oscar_omni_cache_bytes(int32_t batch, int32_t num_kv_heads, int32_t head_dim, int32_t bits, int64_t capacity) {
  if (check_shape("", batch, num_kv_heads, head_dim, bits, capacity, nullptr) != OSCAR_OK) return 0;
  const oscar::omnifmt::Layout l = oscar::omnifmt::layout(batch, num_kv_heads, head_dim, bits, capacity);
  return 2 * (round16(l.res_bytes) + round16(l.codes_bytes)) + round16(l.k_params_bytes) + round16(l.v_params_bytes) +
         round16(l.norms_bytes);
}

extern "C" oscar_status oscar_omni_cache_create(oscar_omni_cache* cache, int32_t batch, int32_t num_kv_heads, int32_t head_dim,
                                                int32_t bits, int64_t capacity, oscar_error* err) {
  const char* fn = "oscar_omni_cache_create";
  oscar_omni_cache c;
  if (oscar_status st = shaped(fn, cache, batch, num_kv_heads, head_dim, bits, capacity, err, c); st != OSCAR_OK) return st;
  const oscar::omnifmt::Layout l = oscar::omnifmt::layout(batch, num_kv_heads, head_dim, bits, capacity);
  c.body_capacity = l.body_capacity;
  const int64_t bytes[7] = {l.res_bytes, l.res_bytes, l.codes_bytes, l.codes_bytes, l.k_params_bytes, l.v_params_bytes, l.norms_bytes};
  void** const arrays[7] = {&c.k_res, &c.v_res, &c.k_codes, &c.v_codes, &c.k_params, &c.v_params, &c.k_norms};
  return allocate(fn, c, bytes, arrays, cache, err);
}

extern "C" oscar_status oscar_omni_cache_destroy(oscar_omni_cache* cache, oscar_error* err) {
  return release("oscar_omni_cache_destroy", cache, &oscar_omni_cache::k_res, err);
}
