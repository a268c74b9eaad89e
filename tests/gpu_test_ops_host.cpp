// gpu_test_ops_host.cpp: the GPU driver's body (main is in gpu_test_ops.cu): every kernel entry point
// against its CPU twin, in the spirit of llama.cpp's test-backend-ops. A table of cases
//   op ∈ {fwht, prefill, append, decode, long, real, api, rotated, logits, paged} × format ∈ {cov, omni, bf16} × bits ∈ {2, 4} × shape
// is built from the shape lists below (a new shape, head_dim or GQA group is one line there); each case runs
// on the GPU, is compared with its twin (tests/twins/, proven equal to lib's reference by test_twins) and
// prints one line; the run ends with "N passed, N failed, N skipped". This file is compiled by the host
// compiler with lib's flags (-ffp-contract=off), exactly as test_twins compiles the same twins.
//
// Checks and tolerances (unchanged from the separate GPU tests this driver replaces):
//   fwht, prefill, append: bit for bit (FWHT output; every live element of every cache array: codes,
//     fp16 scale/zero, BF16 windows / residual, key norms), after poisoning the cov cache's arrays.
//   decode (after prefill, and after prefill + single-token appends): the device cache first equals the
//     twin bit for bit, then max over (sequence, query head) of ||out - ref||_2 / ||ref||_2 <= 1e-2 with
//     ref the float64 attention over the dequantized cache (bf16: over the bf16 rows) and the bf16 query.
//     The kernels' own roundings: (i) the query bf16 -> fp16 for the packed-body score MMA (2^-11 relative
//     per element; exact for |q| >= 2^-14); (ii) the softmax weights p (and p * scale_v) rounded to bf16
//     before the P V MMA: at most 2^-9 ~ 2e-3 relative per weight, hence at most 2^-9 max|v| / |o| of the
//     output (values with a non-zero mean keep |o| ~ max|v| / 4: <= ~8e-3 even when one token dominates;
//     ~2e-3 / sqrt(n) for spread weights); (iii) fp32 accumulation and exp2f (~1e-6); oscar-omni adds the
//     block query fragment q^ * scale_k as an exact fp16 pair hi + lo (no rounding left) and code * scale_v and
//     the weights in fp16 (2^-11 each). 1e-2 covers the worst case of (ii) and stays several times above
//     the measured errors (3e-4 .. 8.4e-3), while a wrong index, block, norm, group, dropped window,
//     mis-merged split or missed large-value rescaling moves the output far more.
//   long (32 sequences x 8 KV heads x 65,529 tokens, spread attention, zero-mean values; sequences 0 and
//     B-1 checked): every warp accumulates thousands of tokens and |out| ~ |v| / 150, so this relative error
//     is ~150x harsher than on peaky attention. Measured on the H100 (2026-11-23, BENCHMARKS.md, decode
//     accuracy): bf16 1.9e-3 (its bf16 P: the floor of a bf16 P V), cov INT2 2.4e-3, INT4 2.2e-3, omni INT2
//     7.3e-4, INT4 8.9e-4; a value offset left in the accumulators reads 9.1e-3 .. 0.243. Bound 5e-3: above the bf16-weight floor
//     (1.8e-3 emulated in experiments/diagnostics/cov_value_rounding.cpp) with margin, below every fault.
//   real: every layer of kjv-llama-hd128 on held-out Revelation (Hadamard-rotated q/k/v, bf16; batch of
//     lengths 1536, 1459, 301, each sequence's last query): cache == twin, decode within 1e-2 (as decode).
//     Skipped, never passed, when the bundled model or text is absent. Shape smollm2-hd64: the same on the
//     layers of a SmolLM2-135M-Instruct dump (head_dim 64, 9 query / 3 KV heads; lengths 1024, 947, 301; the
//     logit scaling of each layer as the dump records it; q/k are post-RoPE in dumps) given with
//     --real-dump FILE or OSCAR_REAL_DUMP (experiments/device/make_smollm2_real_dump.sh makes it: layers
//     3, 12, 20, 25, fp16); skipped, never passed, without one; a given file that cannot be read fails.
//     Measured on the H100 (2026-11-24): smollm2-hd64 cov INT2 worst 2.1e-3 (layer 20), INT4 1.4e-3 (layer 3);
//     kjv-hd128 cov INT2 3.1e-3, INT4 1.3e-3, omni INT2 1.1e-3, INT4 1.2e-3.
//   logits: the *_decode_ex entry points with Gemma 2's soft-capping, gpt-oss's per-head sink logits, and both, against
//     float64 attention with the same modifiers (attn_twin::Logits) over the cache (which equals the twin first); same bound
//     as decode. Each modifier must move the float64 output by more than 5x the bound, so a kernel ignoring it fails.
//   paged: oscar-cov's paged layout (oscar_cov_paged_*: shuffled pages, window slots that are not the sequence index,
//     page sizes 64 and 256), written as an engine does (the prompts in two chunks, then single-token steps), without
//     and with a per-head matrix rotation, against the contiguous cache holding the same tokens: every live code,
//     (scale, zero) and window row bit for bit, the decode output bit for bit (the same plan), and within the decode
//     bound of float64 attention over the twin; with a fixed split (split_tokens 512) every sequence decoded alone gives
//     the bits it gets in the batch (batch invariance).
//   api: the C API rejects bad shapes, pointers, lengths and workspaces with the right status (and names
//     the argument), and the allocators reject bad shapes.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "oscar/cov_format.h"
#include "oscar/cov_paged_format.h"
#include "oscar/float_formats.h"
#include "oscar/omni_format.h"
#include "oscar_kv.h"
#include "real_activations.h"
#include "real_dump.h"
#include "twins/attention_twin.h"
#include "twins/cov_twin.h"
#include "twins/fwht_twin.h"
#include "twins/inputs.h"
#include "twins/omni_twin.h"
#include "twins/rotate_twin.h"

namespace {

using twins::Profile;

constexpr double kDecodeBound = 1e-2, kLongBound = 5e-3, kRealBound = 1e-2;

// ---------------------------------------------------------------------------------------------------------
// The case table.

enum class Op { Fwht, Prefill, Append, Decode, Long, Real, Api, Rotated, Logits, Paged };
enum class Fmt { None, Cov, Omni, Bf16 };
const char* op_name(Op o) {
  static const char* n[] = {"fwht", "prefill", "append", "decode", "long", "real", "api", "rotated", "logits", "paged"};
  return n[int(o)];
}
const char* fmt_name(Fmt f) {
  static const char* n[] = {"-", "cov", "omni", "bf16"};
  return n[int(f)];
}

struct Shape {
  std::string name;
  Profile profile = Profile::Mix;
  int hq = 0, hkv = 0, head_dim = 128;
  std::vector<int> lens;  // tokens per sequence after the prefill (fwht: row counts, one case each)
  int appends = 0;        // single-token appends after the prefill
  bool slow = false;      // run only with --slow (or when its op is selected by name with -o)
  bool from_dump = false; // real: activations from the --real-dump file, not the bundled model
  int rule = 0;            // prefill/append, cov: 0 the allocator's (OSCAR's quantile clip), 1 the ratio clip and half-even rounding,
                           // 2 a wide quantile clip (0.5 keys / 0.75 values: 32..128 of a row clamped, the radix search's range)
};

struct Case {
  Op op;
  Fmt fmt;
  int bits;  // 0 where the op has none
  Shape shape;
  std::string name() const {
    std::string s = std::string(op_name(op)) + " " + fmt_name(fmt) + (bits ? " int" + std::to_string(bits) : "") + " " + shape.name;
    if (op == Op::Fwht || op == Op::Api) return s;
    int mn = 1 << 30, mx = 0;
    for (int L : shape.lens) { mn = std::min(mn, L); mx = std::max(mx, L); }
    char buf[128];
    std::snprintf(buf, sizeof buf, " [B=%zu Hq=%d Hkv=%d D=%d L=%d..%d%s]", shape.lens.size(), shape.hq, shape.hkv, shape.head_dim, mn, mx,
                  shape.appends ? (" +" + std::to_string(shape.appends) + " appends").c_str() : "");
    return s + buf;
  }
};

// Long-split geometry (settable for diagnosis: --long-batch, --long-len).
int g_long_batch = 32, g_long_len = 65536 - 7;
// The real op's dump (--real-dump FILE, else the environment's OSCAR_REAL_DUMP; "" when neither).
std::string g_real_dump;

std::vector<int> repeat(int n, int L) { return std::vector<int>(size_t(n), L); }

// The table. Shapes are listed per op group; a new shape (head_dim, GQA group, lengths) is one line.
std::vector<Case> build_table() {
  const int S = oscar::covfmt::kDefaultSink, W = oscar::covfmt::kDefaultRecent;
  // fwht: every supported head_dim x row counts x {unnormalized, normalized} (bits = normalize flag + 1 in the name is avoided:
  // both flags run inside one case).
  const std::vector<Shape> fwht = {
      {"hd32", Profile::Spread, 0, 0, 32, {1, 7, 1000, 33333}},   {"hd64", Profile::Spread, 0, 0, 64, {1, 7, 1000, 33333}},
      {"hd128", Profile::Spread, 0, 0, 128, {1, 7, 1000, 33333}}, {"hd256", Profile::Spread, 0, 0, 256, {1, 7, 1000, 33333}},
      {"hd512", Profile::Spread, 0, 0, 512, {1, 7, 1000, 33333}},
  };
  // prefill / append: lengths not multiples of any block; one shorter than the sink, one inside the
  // windows, body sequences; the lengths 0, 1, 127, 128, 129 around the residual block; 300 appends cross
  // the recent-window overflow (cov) and at least two residual flushes (omni) for every sequence.
  const std::vector<Shape> quant = {
      {"mix-h3", Profile::Mix, 3, 3, 128, {37, S + W + 101, 300, S + W + 777}, 300},
      {"stress-h2", Profile::Stress, 8, 2, 128, {0, 1, 127, 128, 129, 333, 3001}, 300},
      {"stress-h4", Profile::Stress, 4, 4, 128, {0, 1, 127, 128, 129, 333, 3001}, 300},
      {"stress-h3", Profile::Stress, 24, 3, 128, {0, 1, 127, 128, 129, 333, 3001}, 300},
      {"mix-hd64-h3", Profile::Mix, 9, 3, 64, {37, S + W + 101, 300, S + W + 777}, 300},
      {"stress-hd64-h2", Profile::Stress, 8, 2, 64, {0, 1, 127, 128, 129, 333, 3001}, 300},
      {"stress-hd256-h2", Profile::Stress, 8, 2, 256, {0, 1, 127, 128, 129, 333, 3001}, 300},
      // oscar-cov's other row rule (clip_mode OSCAR_CLIP_RATIO, OSCAR_ROUND_HALF_EVEN): run for cov only
      {"mix-h3-ratio", Profile::Mix, 3, 3, 128, {37, S + W + 101, 300, S + W + 777}, 300, false, false, 1},
      {"stress-hd64-h2-ratio", Profile::Stress, 8, 2, 64, {0, 1, 127, 128, 129, 333, 3001}, 300, false, false, 1},
      {"stress-hd256-h2-ratio", Profile::Stress, 8, 2, 256, {0, 1, 127, 128, 129, 333, 3001}, 300, false, false, 1},
      // a wide quantile clip: the threshold past the pop's range (kPopMax) by the radix search, and at its edge
      {"mix-h3-wide", Profile::Mix, 3, 3, 128, {37, S + W + 101, 300, S + W + 777}, 300, false, false, 2},
      {"stress-hd64-h2-wide", Profile::Stress, 8, 2, 64, {0, 1, 127, 128, 129, 333, 3001}, 300, false, false, 2},
      {"stress-hd256-h2-wide", Profile::Stress, 8, 2, 256, {0, 1, 127, 128, 129, 333, 3001}, 300, false, false, 2},
  };
  // decode: GQA groups 4, 1, 8; peaky softmax with non-zero-mean values; the stress data (Token Norm
  // Imbalance, zero-norm key, values x300 in a whole sequence and in 100 tokens of another); after the
  // prefill and after 300 appends.
  const std::vector<Shape> decode = {
      {"peaky-g4", Profile::Peaky, 8, 2, 128, {1, 50, S + W + 3001, 333, S + W + 513, 0}},
      {"peaky-g1", Profile::Peaky, 4, 4, 128, {1, 50, S + W + 3001, 333, S + W + 513, 0}},
      {"peaky-g8", Profile::Peaky, 16, 2, 128, {1, 50, S + W + 3001, 333, S + W + 513, 0}},
      {"stress-g4", Profile::Stress, 8, 2, 128, {0, 1, 127, 128, 129, 333, 3001}},
      {"stress-g1", Profile::Stress, 4, 4, 128, {0, 1, 127, 128, 129, 333, 3001}},
      {"stress-g8", Profile::Stress, 24, 3, 128, {0, 1, 127, 128, 129, 333, 3001}},
      {"stress-g4-appended", Profile::Stress, 8, 2, 128, {0, 1, 127, 128, 129, 333, 3001}, 300},
      {"stress-g1-appended", Profile::Stress, 4, 4, 128, {0, 1, 127, 128, 129, 333, 3001}, 300},
      {"stress-g8-appended", Profile::Stress, 24, 3, 128, {0, 1, 127, 128, 129, 333, 3001}, 300},
      // head_dim 64 (SmolLM2's GQA group 3) and 256; groups 12 and 16 (two query-slot blocks per KV head)
      {"peaky-g3-hd64", Profile::Peaky, 9, 3, 64, {1, 50, S + W + 3001, 333, S + W + 513, 0}},
      {"stress-g3-hd64", Profile::Stress, 9, 3, 64, {0, 1, 127, 128, 129, 333, 3001}},
      {"stress-g3-hd64-appended", Profile::Stress, 9, 3, 64, {0, 1, 127, 128, 129, 333, 3001}, 300},
      {"peaky-g2-hd256", Profile::Peaky, 4, 2, 256, {1, 50, S + W + 3001, 333, S + W + 513, 0}},
      {"stress-g8-hd256", Profile::Stress, 16, 2, 256, {0, 1, 127, 128, 129, 333, 3001}},
      {"stress-g2-hd256-appended", Profile::Stress, 4, 2, 256, {0, 1, 127, 128, 129, 333, 3001}, 300},
      {"peaky-g16", Profile::Peaky, 32, 2, 128, {1, 50, S + W + 3001, 333, S + W + 513, 0}},
      {"stress-g12-hd64", Profile::Stress, 24, 2, 64, {0, 1, 127, 128, 129, 333, 3001}},
      {"stress-g16-hd256-appended", Profile::Stress, 16, 1, 256, {0, 1, 127, 128, 129, 333, 3001}, 300},
  };
  const std::vector<Shape> longs = {
      {"spread-b" + std::to_string(g_long_batch), Profile::Spread, 32, 8, 128, repeat(g_long_batch, g_long_len), 0, true},
  };
  const std::vector<Shape> real = {{"kjv-hd128", Profile::Spread, 4, 2, 128, {1536, 1536 - 77, 301}},
                                   {"smollm2-hd64", Profile::Spread, 9, 3, 64, {1024, 1024 - 77, 301}, 0, false, true}};

  std::vector<Case> t;
  for (const Shape& s : fwht) t.push_back({Op::Fwht, Fmt::None, 0, s});
  for (Op op : {Op::Prefill, Op::Append})
    for (Fmt f : {Fmt::Cov, Fmt::Omni})
      for (int bits : {2, 4})
        for (const Shape& s : quant) {
          if (s.rule && f != Fmt::Cov) continue;
          Shape x = s;
          if (op == Op::Prefill) x.appends = 0;
          t.push_back({op, f, bits, x});
        }
  for (const Shape& s : decode) {
    if (s.profile == Profile::Peaky && !s.appends) t.push_back({Op::Decode, Fmt::Bf16, 0, s});
    for (Fmt f : {Fmt::Cov, Fmt::Omni})
      for (int bits : {2, 4}) t.push_back({Op::Decode, f, bits, s});
  }
  for (const Shape& s : longs) {
    t.push_back({Op::Long, Fmt::Bf16, 0, s});
    for (Fmt f : {Fmt::Cov, Fmt::Omni})
      for (int bits : {2, 4}) t.push_back({Op::Long, f, bits, s});
  }
  // rotated: head_dim 64, 128, 256 with appends across the recent-window overflow (cov) and residual flushes (omni)
  for (Fmt f : {Fmt::Cov, Fmt::Omni})
    for (int bits : {2, 4})
      for (const Shape& s : quant)
        if (s.name == "mix-h3" || s.name == "mix-hd64-h3" || s.name == "stress-hd256-h2") t.push_back({Op::Rotated, f, bits, s});
  // logits: head_dim 128 / 64 / 256, GQA 4 / 3 / 2, windows, body and appends
  for (Fmt f : {Fmt::Cov, Fmt::Omni})
    for (int bits : {2, 4})
      for (const Shape& s : decode)
        if (s.name == "peaky-g4" || s.name == "stress-g3-hd64-appended" || s.name == "peaky-g2-hd256") t.push_back({Op::Logits, f, bits, s});
  // paged (oscar-cov's serving layout): head_dim 64 / 128 / 256, GQA, empty and long sequences, appends past the window
  for (int bits : {2, 4})
    for (const Shape& s : decode)
      if (s.name == "stress-g4-appended" || s.name == "stress-g3-hd64-appended" || s.name == "stress-g2-hd256-appended" ||
          s.name == "peaky-g4")
        t.push_back({Op::Paged, Fmt::Cov, bits, s});
  for (const Shape& s : real)
    for (Fmt f : {Fmt::Cov, Fmt::Omni})
      for (int bits : {2, 4}) t.push_back({Op::Real, f, bits, s});
  const Shape api{"bad-input", Profile::Mix, 8, 2, 128, {37, 421, 300, 1097}};
  t.push_back({Op::Api, Fmt::None, 0, api});  // fwht
  t.push_back({Op::Api, Fmt::Bf16, 0, api});
  for (Fmt f : {Fmt::Cov, Fmt::Omni})
    for (int bits : {2, 4}) t.push_back({Op::Api, f, bits, api});
  return t;
}

// ---------------------------------------------------------------------------------------------------------
// One case's outcome.

struct Ctx {
  int failures = 0, checks = 0;
  bool skipped = false;
  std::string info;  // the case's summary (errors measured, skip reason)
  std::string log;   // failure details, one indented line each
  __attribute__((format(printf, 2, 3))) void fail(const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ++failures;
    if (failures <= 40) log += std::string("    ") + buf + "\n";
  }
  bool cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    fail("%s: CUDA error %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return false;
  }
  // A C API call that must succeed.
  bool ok(oscar_status s, const oscar_error& err, const char* what) {
    if (s == OSCAR_OK) return true;
    fail("%s: %s: %s", what, oscar_status_name(s), err.message);
    return false;
  }
  // A C API call that must fail with `want` (and, when `needle` is set, name it in the message).
  void rejects(oscar_status got, oscar_status want, const oscar_error& err, const char* needle, const char* what) {
    ++checks;
    if (got != want) fail("%s: status %s, want %s (message: %s)", what, oscar_status_name(got), oscar_status_name(want), err.message);
    else if (needle && !std::strstr(err.message, needle)) fail("%s: message \"%s\" does not name \"%s\"", what, err.message, needle);
  }
};

// The allocator's byte count: at least the layout's total (plus 16-byte rounding), 0 for bad shapes.
inline void bytes_match_impl(Ctx& ctx, int64_t got, int64_t layout_total, int64_t bad_shape) {
  ++ctx.checks;
  if (got < layout_total || got > layout_total + 16 * 8) ctx.fail("cache_bytes %lld, layout() total %lld", (long long)got, (long long)layout_total);
  if (bad_shape != 0) ctx.fail("cache_bytes of a bad shape (bits 3) is %lld, want 0", (long long)bad_shape);
}

// ---------------------------------------------------------------------------------------------------------
// Device memory.

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() { if (p) cudaFree(p); }
  bool alloc(Ctx& ctx, size_t n, const char* what) {
    bytes = n;
    if (cudaMalloc(&p, n + 16) != cudaSuccess) { p = nullptr; ctx.fail("cudaMalloc of %zu bytes for %s failed", n, what); return false; }
    return true;
  }
  template <class T> bool upload(Ctx& ctx, const std::vector<T>& h, const char* what) {
    return alloc(ctx, h.size() * sizeof(T), what) && ctx.cuda(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), what);
  }
  template <class T> T* as() const { return static_cast<T*>(p); }
};

template <class T>
std::vector<T> download(Ctx& ctx, const void* p, size_t n, const char* what) {
  std::vector<T> h(n);
  if (n) ctx.cuda(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), what);
  return h;
}

// ---------------------------------------------------------------------------------------------------------
// The two cache formats behind one interface: allocation (the C API's create/destroy, sized by layout()),
// the entry points, the twin, and the device arrays in the twin image's order.

struct CovFmt {
  using Dev = oscar_cov_cache;
  using Twin = cov_twin::Cache;
  static constexpr const char* name = "oscar-cov";
  static constexpr bool poison = true;  // prefill must not depend on the memory it does not write
  static oscar_status create(Dev* c, int B, int H, int D, int bits, int64_t cap, oscar_error* e) {
    return oscar_cov_cache_create(c, B, H, D, bits, oscar::covfmt::kDefaultSink, oscar::covfmt::kDefaultRecent, cap, e);
  }
  static oscar_status destroy(Dev* c, oscar_error* e) { return oscar_cov_cache_destroy(c, e); }
  static int64_t capacity(const Dev& c) { return oscar_cov_capacity(&c); }
  static oscar_status prefill(const Dev& c, const void* k, const void* v, const int32_t* l, int32_t mx, oscar_error* e) {
    return oscar_cov_prefill(&c, k, v, l, mx, nullptr, e);
  }
  static oscar_status append(const Dev& c, const void* k, const void* v, const int32_t* l, int32_t mx, oscar_error* e) {
    return oscar_cov_append(&c, k, v, l, mx, nullptr, e);
  }
  static oscar_status decode(const Dev& c, const void* q, int hq, const int32_t* l, int32_t mx, float sc, float* out, void* ws, size_t wsb,
                             oscar_error* e) {
    return oscar_cov_decode(&c, q, hq, l, mx, sc, out, ws, wsb, nullptr, e);
  }
  static oscar_status prefill_rot(const Dev& c, const oscar_rotation* r, const void* k, const void* v, const int32_t* l, int32_t mx, oscar_error* e) {
    return oscar_cov_prefill_rotated(&c, r, k, v, l, mx, nullptr, e);
  }
  static oscar_status append_rot(const Dev& c, const oscar_rotation* r, const void* k, const void* v, const int32_t* l, int32_t mx, oscar_error* e) {
    return oscar_cov_append_rotated(&c, r, k, v, l, mx, nullptr, e);
  }
  static oscar_status decode_rot(const Dev& c, const oscar_rotation* r, const void* q, int hq, const int32_t* l, int32_t mx, float sc, float* out,
                                 void* ws, size_t wsb, oscar_error* e) {
    return oscar_cov_decode_rotated(&c, r, q, hq, l, mx, sc, out, ws, wsb, nullptr, e);
  }
  static oscar_status decode_ex(const Dev& c, const oscar_decode_logits* lg, const void* q, int hq, const int32_t* l, int32_t mx, float sc,
                                float* out, void* ws, size_t wsb, oscar_error* e) {
    return oscar_cov_decode_ex(&c, nullptr, lg, q, hq, l, mx, sc, out, ws, wsb, nullptr, e);
  }
  static Twin empty(int B, int H, int D, int bits, int64_t cap) { return cov_twin::empty(B, H, D, bits, cap); }
  static Twin build(const twins::Bf16Rows& k, const twins::Bf16Rows& v, const std::vector<int>& lens, int bits, int64_t cap,
                    int rule_id = 0) {
    const cov_twin::Rule rule = rule_id == 1   ? cov_twin::Rule{oscar::ClipMode::Ratio, oscar::covfmt::kClipK, oscar::covfmt::kClipV,
                                                                oscar::Rounding::HalfEven}
                                : rule_id == 2 ? cov_twin::Rule{oscar::ClipMode::Quantile, kWideClipK, kWideClipV}
                                               : cov_twin::Rule::allocator(bits);
    return cov_twin::build(k, v, lens, bits, cap, oscar::covfmt::kDefaultSink, oscar::covfmt::kDefaultRecent, rule);
  }
  // The cache's fields for rule 1 (ratio clip, half to even) or 2 (the wide quantile clip); the allocator sets OSCAR's rule.
  static constexpr float kWideClipK = 0.5f, kWideClipV = 0.75f;
  static void set_rule(Dev& c, int rule_id) {
    if (rule_id == 1) {
      c.clip_mode = OSCAR_CLIP_RATIO;
      c.rounding = OSCAR_ROUND_HALF_EVEN;
    } else if (rule_id == 2) {
      c.clip_mode = OSCAR_CLIP_QUANTILE;
      c.clip_k = kWideClipK;
      c.clip_v = kWideClipV;
    }
  }
  static std::vector<void*> arrays(const Dev& c) { return {c.k_sink, c.v_sink, c.k_recent, c.v_recent, c.k_codes, c.v_codes, c.k_params, c.v_params}; }
  static int64_t body_capacity(const Dev& c) { return c.body_capacity; }
  static void head(const Twin& t, int b, int h, int64_t L, std::vector<double>& K, std::vector<double>& V) { cov_twin::dequant_head(t, b, h, L, K, V); }
};

struct OmniFmt {
  using Dev = oscar_omni_cache;
  using Twin = omni_twin::Cache;
  static constexpr const char* name = "oscar-omni";
  static constexpr bool poison = false;  // as created (zeroed): the former gpu_test_omni's allocation
  static oscar_status create(Dev* c, int B, int H, int D, int bits, int64_t cap, oscar_error* e) {
    return oscar_omni_cache_create(c, B, H, D, bits, cap, e);
  }
  static oscar_status destroy(Dev* c, oscar_error* e) { return oscar_omni_cache_destroy(c, e); }
  static int64_t capacity(const Dev& c) { return oscar_omni_capacity(&c); }
  static oscar_status prefill(const Dev& c, const void* k, const void* v, const int32_t* l, int32_t mx, oscar_error* e) {
    return oscar_omni_prefill(&c, k, v, l, mx, nullptr, e);
  }
  static oscar_status append(const Dev& c, const void* k, const void* v, const int32_t* l, int32_t mx, oscar_error* e) {
    return oscar_omni_append(&c, k, v, l, mx, nullptr, e);
  }
  static oscar_status decode(const Dev& c, const void* q, int hq, const int32_t* l, int32_t mx, float sc, float* out, void* ws, size_t wsb,
                             oscar_error* e) {
    return oscar_omni_decode(&c, q, hq, l, mx, sc, out, ws, wsb, nullptr, e);
  }
  static oscar_status prefill_rot(const Dev& c, const oscar_rotation* r, const void* k, const void* v, const int32_t* l, int32_t mx, oscar_error* e) {
    return oscar_omni_prefill_rotated(&c, r, k, v, l, mx, nullptr, e);
  }
  static oscar_status append_rot(const Dev& c, const oscar_rotation* r, const void* k, const void* v, const int32_t* l, int32_t mx, oscar_error* e) {
    return oscar_omni_append_rotated(&c, r, k, v, l, mx, nullptr, e);
  }
  static oscar_status decode_rot(const Dev& c, const oscar_rotation* r, const void* q, int hq, const int32_t* l, int32_t mx, float sc, float* out,
                                 void* ws, size_t wsb, oscar_error* e) {
    return oscar_omni_decode_rotated(&c, r, q, hq, l, mx, sc, out, ws, wsb, nullptr, e);
  }
  static oscar_status decode_ex(const Dev& c, const oscar_decode_logits* lg, const void* q, int hq, const int32_t* l, int32_t mx, float sc,
                                float* out, void* ws, size_t wsb, oscar_error* e) {
    return oscar_omni_decode_ex(&c, nullptr, lg, q, hq, l, mx, sc, out, ws, wsb, nullptr, e);
  }
  static Twin empty(int B, int H, int D, int bits, int64_t cap) { return omni_twin::empty(B, H, D, bits, cap); }
  static Twin build(const twins::Bf16Rows& k, const twins::Bf16Rows& v, const std::vector<int>& lens, int bits, int64_t cap,
                    int = 0) {
    return omni_twin::build(k, v, lens, bits, cap);
  }
  static void set_rule(Dev&, int) {}  // one rule: OScaR's
  static std::vector<void*> arrays(const Dev& c) { return {c.k_res, c.v_res, c.k_codes, c.v_codes, c.k_params, c.v_params, c.k_norms}; }
  static int64_t body_capacity(const Dev& c) { return c.body_capacity; }
  static void head(const Twin& t, int b, int h, int64_t L, std::vector<double>& K, std::vector<double>& V) { omni_twin::dequant_head(t, b, h, L, K, V); }
};

// A device cache created through the C API, destroyed with it.
template <class F>
struct DevCache {
  typename F::Dev c{};
  bool live = false;
  DevCache() = default;
  DevCache(const DevCache&) = delete;
  ~DevCache() {
    oscar_error e{};
    if (live) F::destroy(&c, &e);
  }
  // Creates the cache for `capacity` tokens and poisons its arrays (0xAB) when the format asks for it.
  bool create(Ctx& ctx, int B, int H, int D, int bits, int64_t capacity) {
    oscar_error e{};
    if (!ctx.ok(F::create(&c, B, H, D, bits, capacity, &e), e, "cache create")) return false;
    live = true;
    if (F::poison) {
      const typename F::Twin shape = F::empty(B, H, D, bits, capacity);
      const auto ptrs = F::arrays(c);
      for (size_t i = 0; i < ptrs.size(); ++i)
        if (shape.img.arrays[i].bytes() && !ctx.cuda(cudaMemset(ptrs[i], 0xAB, size_t(shape.img.arrays[i].bytes())), "poison")) return false;
    }
    return true;
  }
  // The device arrays as an image shaped like the twin `like`.
  typename F::Twin image(Ctx& ctx, const typename F::Twin& like) const {
    typename F::Twin d = F::empty(like.B, like.H, like.D, like.bits, like.capacity);
    const auto ptrs = F::arrays(c);
    for (size_t i = 0; i < ptrs.size(); ++i) {
      twins::Array& a = d.img.arrays[i];
      if (a.bytes()) ctx.cuda(cudaMemcpy(a.data.data(), ptrs[i], size_t(a.bytes()), cudaMemcpyDeviceToHost), a.name.c_str());
    }
    return d;
  }
};

// ---------------------------------------------------------------------------------------------------------
// Shared steps.

// Uploads the rows and lengths, prefills lens, then appends `appends` single tokens (token L of each
// sequence from its rows); `cur` ends as the lengths the cache holds.
// rot: the rows are unrotated and go through the *_rotated entry points.
template <class F>
bool fill(Ctx& ctx, const DevCache<F>& dc, const twins::Inputs& in, const DevBuf& dk, const DevBuf& dv, DevBuf& dl,
          const std::vector<int>& lens, int appends, std::vector<int>& cur, const oscar_rotation* rot = nullptr) {
  auto prefill = [&](const void* k, const void* v, const int32_t* l, int32_t mx, oscar_error* e) {
    return rot ? F::prefill_rot(dc.c, rot, k, v, l, mx, e) : F::prefill(dc.c, k, v, l, mx, e);
  };
  auto append = [&](const void* k, const void* v, const int32_t* l, int32_t mx, oscar_error* e) {
    return rot ? F::append_rot(dc.c, rot, k, v, l, mx, e) : F::append(dc.c, k, v, l, mx, e);
  };
  const int B = in.k.B, H = in.k.H, D = in.k.D;
  oscar_error err{};
  cur = lens;
  if (!ctx.cuda(cudaMemcpy(dl.p, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice), "upload lens")) return false;
  if (!ctx.ok(prefill(dk.p, dv.p, dl.as<int32_t>(), in.k.T, &err), err, "prefill")) return false;
  if (!appends) return ctx.cuda(cudaDeviceSynchronize(), "prefill sync");
  std::vector<uint16_t> kn(size_t(B) * H * D), vn(kn.size());
  DevBuf dkn, dvn;
  if (!dkn.alloc(ctx, kn.size() * 2, "k_new") || !dvn.alloc(ctx, vn.size() * 2, "v_new")) return false;
  for (int step = 0; step < appends; ++step) {
    int mx = 0;
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < H; ++h) {
        std::memcpy(&kn[(size_t(b) * H + h) * D], in.k.row(b, h, cur[b]), size_t(D) * 2);
        std::memcpy(&vn[(size_t(b) * H + h) * D], in.v.row(b, h, cur[b]), size_t(D) * 2);
      }
      mx = std::max(mx, cur[b]);
    }
    if (!ctx.cuda(cudaMemcpy(dkn.p, kn.data(), kn.size() * 2, cudaMemcpyHostToDevice), "upload k_new") ||
        !ctx.cuda(cudaMemcpy(dvn.p, vn.data(), vn.size() * 2, cudaMemcpyHostToDevice), "upload v_new") ||
        !ctx.cuda(cudaMemcpy(dl.p, cur.data(), cur.size() * 4, cudaMemcpyHostToDevice), "upload lens"))
      return false;
    if (!ctx.ok(append(dkn.p, dvn.p, dl.as<int32_t>(), mx, &err), err, ("append step " + std::to_string(step)).c_str())) return false;
    for (int& L : cur) ++L;
  }
  return ctx.cuda(cudaDeviceSynchronize(), "append sync") &&
         ctx.cuda(cudaMemcpy(dl.p, cur.data(), cur.size() * 4, cudaMemcpyHostToDevice), "upload lens");
}

// The device cache against the twin at lengths `cur`: every live element bit for bit.
template <class F>
bool same_as_twin(Ctx& ctx, const DevCache<F>& dc, const typename F::Twin& tw, const char* what) {
  if (F::body_capacity(dc.c) != tw.body_capacity) {
    ctx.fail("%s: C API body_capacity %lld, layout() %lld", what, (long long)F::body_capacity(dc.c), (long long)tw.body_capacity);
    return false;
  }
  std::string log;
  const int64_t bad = twins::compare(tw.img, dc.image(ctx, tw).img, &log);
  if (bad) {
    ctx.fail("%s: %lld live element(s) differ from the CPU twin:", what, (long long)bad);
    ctx.log += log;
  }
  return bad == 0;
}

// Decode outputs `out` [B][Hq][D] against `ref` for sequences `seqs`: relative L2 error per (b, hq)
// within `bound`; the worst one goes into ctx.info, each failing one into the log (with its first channels).
void check_outputs(Ctx& ctx, const std::vector<float>& out, const std::vector<double>& ref, const std::vector<int>& lens,
                   const std::vector<int>& seqs, int Hq, int D, double bound, const std::string& label) {
  double worst = 0;
  int wb = -1, wq = -1;
  for (int b : seqs)
    for (int hq = 0; hq < Hq; ++hq) {
      const size_t o = (size_t(b) * Hq + hq) * D;
      const double e = attn_twin::rel_err(&out[o], &ref[o], D);
      if (!(e <= worst)) { worst = e; wb = b; wq = hq; }
      if (!(e <= bound)) {
        char ch[160];
        std::snprintf(ch, sizeof ch, "out[0..2] = %.6g %.6g %.6g, ref %.6g %.6g %.6g", out[o], out[o + 1], out[o + 2], ref[o], ref[o + 1], ref[o + 2]);
        ctx.fail("%s b=%d (L=%d) hq=%d: rel err %.3e > %.0e; %s", label.c_str(), b, lens[size_t(b)], hq, e, bound, ch);
      }
    }
  char buf[200];
  std::snprintf(buf, sizeof buf, "%smax rel err %.3e (b=%d L=%d hq=%d; bound %.0e)", ctx.info.empty() ? "" : "; ", worst, wb,
                wb >= 0 ? lens[size_t(wb)] : 0, wq, bound);
  ctx.info += label.empty() ? buf : label + " " + buf;
}

// Launches the decode of format F (or the bf16 kernel when dc is null) and downloads the output.
template <class F>
bool run_decode_kernel(Ctx& ctx, const DevCache<F>* dc, const DevBuf* dk, const DevBuf* dv, const twins::Bf16Rows& rows, const DevBuf& dq,
                       const DevBuf& dl, const std::vector<int>& cur, int Hq, double scale, std::vector<float>& out) {
  const int B = int(cur.size()), H = rows.H, D = rows.D;
  const int mx = std::max(1, *std::max_element(cur.begin(), cur.end()));
  const size_t ws = oscar_decode_workspace_bytes(B, Hq, H, D, dc ? mx : rows.T, dc ? 1 : 0);
  DevBuf dws, dout;
  if (!dws.alloc(ctx, ws, "workspace") || !dout.alloc(ctx, size_t(B) * Hq * D * 4, "out")) return false;
  if (!ctx.cuda(cudaMemset(dout.p, 0xff, dout.bytes), "poison out")) return false;  // NaN
  oscar_error err{};
  const oscar_status s = dc ? F::decode(dc->c, dq.p, Hq, dl.as<int32_t>(), mx, float(scale), dout.as<float>(), dws.p, ws, &err)
                            : oscar_bf16_decode(dk->p, dv->p, B, H, rows.T, D, dq.p, Hq, dl.as<int32_t>(), rows.T, float(scale),
                                                dout.as<float>(), dws.p, ws, nullptr, &err);
  if (!ctx.ok(s, err, "decode") || !ctx.cuda(cudaDeviceSynchronize(), "decode sync")) return false;
  out = download<float>(ctx, dout.p, size_t(B) * Hq * D, "out");
  if (!dc) return true;
  // The merge in the decode grid (the cache's arrival counters) against the merge kernel (a copy of the cache without
  // them): the same bits; then the counters are zero again and a second decode gives the same bits once more.
  auto again = [&](const auto& cache, const char* what) {
    if (!ctx.cuda(cudaMemset(dout.p, 0xff, dout.bytes), "poison out") ||
        !ctx.ok(F::decode(cache, dq.p, Hq, dl.as<int32_t>(), mx, float(scale), dout.as<float>(), dws.p, ws, &err), err, what) ||
        !ctx.cuda(cudaDeviceSynchronize(), "decode sync"))
      return false;
    const auto o2 = download<float>(ctx, dout.p, size_t(B) * Hq * D, "out");
    for (size_t i = 0; i < o2.size(); ++i)
      if (std::memcmp(&o2[i], &out[i], 4) != 0) {
        ctx.fail("%s: out[%zu] = %.9g, the first decode gave %.9g (and maybe more)", what, i, o2[i], out[i]);
        return false;
      }
    return true;
  };
  auto two_launches = dc->c;
  two_launches.arrivals = nullptr;
  if (!dc->c.arrivals) {
    ctx.fail("the cache allocator left no arrival counters");
    return false;
  }
  if (!again(two_launches, "decode with the merge kernel") || !again(dc->c, "second decode")) return false;
  const auto counters = download<uint32_t>(ctx, dc->c.arrivals, size_t(B) * H * 2, "arrival counters");
  for (size_t i = 0; i < counters.size(); ++i)
    if (counters[i] != 0) {
      ctx.fail("arrival counter %zu is %u after the decodes (must be 0)", i, counters[i]);
      return false;
    }
  return true;
}

std::vector<int> all_seqs(size_t B) {
  std::vector<int> s(B);
  for (size_t b = 0; b < B; ++b) s[b] = int(b);
  return s;
}

int max_len(const Shape& s) { return *std::max_element(s.lens.begin(), s.lens.end()) + s.appends; }
uint32_t seed_of(const Case& c) { return uint32_t(std::hash<std::string>{}(c.shape.name) & 0xffffff) + uint32_t(c.bits); }

// ---------------------------------------------------------------------------------------------------------
// The ops.

void op_fwht(Ctx& ctx, const Case& c) {
  const int hd = c.shape.head_dim;
  std::mt19937 rng(1234 + hd);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int rows : c.shape.lens)
    for (int norm : {0, 1}) {
      std::vector<float> x(size_t(rows) * hd);
      for (auto& v : x) v = nd(rng);
      const std::vector<float> want = fwht_twin::transform(x, rows, hd, norm != 0);
      DevBuf d;
      if (!d.upload(ctx, x, "rows")) return;
      oscar_error err{};
      if (!ctx.ok(oscar_fwht_f32(d.as<float>(), rows, hd, norm, nullptr, &err), err, "oscar_fwht_f32") ||
          !ctx.cuda(cudaDeviceSynchronize(), "sync"))
        return;
      const auto got = download<float>(ctx, d.p, x.size(), "rows");
      for (size_t i = 0; i < x.size(); ++i)
        if (std::memcmp(&got[i], &want[i], 4) != 0) {
          ctx.fail("rows=%d normalize=%d: element %zu (row %zu, col %zu): GPU %.9g, twin %.9g (and maybe more)", rows, norm, i, i / hd, i % hd,
                   got[i], want[i]);
          break;
        }
      // oscar_fwht_bf16: the same rows as bf16; twin = widen, transform in float, round to nearest even.
      std::vector<uint16_t> xb(x.size());
      std::vector<float> wide(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        xb[i] = oscar::float_to_bf16_bits(x[i]);
        wide[i] = oscar::bf16_bits_to_float(xb[i]);
      }
      const std::vector<float> want_wide = fwht_twin::transform(wide, rows, hd, norm != 0);
      DevBuf db;
      if (!db.upload(ctx, xb, "bf16 rows")) return;
      if (!ctx.ok(oscar_fwht_bf16(db.p, rows, hd, norm, nullptr, &err), err, "oscar_fwht_bf16") ||
          !ctx.cuda(cudaDeviceSynchronize(), "sync"))
        return;
      const auto got_b = download<uint16_t>(ctx, db.p, xb.size(), "bf16 rows");
      for (size_t i = 0; i < xb.size(); ++i)
        if (got_b[i] != oscar::float_to_bf16_bits(want_wide[i])) {
          ctx.fail("bf16 rows=%d normalize=%d: element %zu: GPU 0x%04x, twin 0x%04x (and maybe more)", rows, norm, i, got_b[i],
                   oscar::float_to_bf16_bits(want_wide[i]));
          break;
        }
    }
  ctx.info = "f32 and bf16, rows 1, 7, 1000, 33333 x normalize 0/1 bit-exact";
}

// prefill and append: the cache after prefill (and single-token appends) equals the twin bit for bit.
template <class F>
void op_quant(Ctx& ctx, const Case& c) {
  const Shape& s = c.shape;
  const int T = max_len(s), B = int(s.lens.size());
  const twins::Inputs in = twins::make_inputs(s.profile, B, s.hq, s.hkv, T, s.head_dim, seed_of(c));
  DevBuf dk, dv, dl;
  if (!dk.upload(ctx, in.k.x, "k") || !dv.upload(ctx, in.v.x, "v") || !dl.alloc(ctx, size_t(B) * 4, "lens")) return;
  DevCache<F> dc;
  if (!dc.create(ctx, B, s.hkv, s.head_dim, c.bits, T)) return;
  if (s.rule) F::set_rule(dc.c, s.rule);
  std::vector<int> cur;
  if (!fill(ctx, dc, in, dk, dv, dl, s.lens, s.appends, cur)) return;
  const typename F::Twin tw = F::build(in.k, in.v, cur, c.bits, T, s.rule);
  if (same_as_twin(ctx, dc, tw, op_name(c.op))) ctx.info = s.rule == 1   ? "every live element bit-exact (ratio clip, half to even)"
                                                             : s.rule == 2 ? "every live element bit-exact (quantile clip 0.5 / 0.75)"
                                                                           : "every live element bit-exact";
}

// decode: the cache equals the twin, then the output is within the bound of float64 attention over it.
template <class F>
void op_decode(Ctx& ctx, const Case& c) {
  const Shape& s = c.shape;
  const int T = max_len(s), B = int(s.lens.size()), D = s.head_dim;
  const double scale = 1.0 / std::sqrt(double(D));
  const twins::Inputs in = twins::make_inputs(s.profile, B, s.hq, s.hkv, T, D, seed_of(c));
  DevBuf dk, dv, dl, dq;
  if (!dk.upload(ctx, in.k.x, "k") || !dv.upload(ctx, in.v.x, "v") || !dq.upload(ctx, in.q, "q") || !dl.alloc(ctx, size_t(B) * 4, "lens"))
    return;
  std::vector<int> cur = s.lens;
  std::vector<float> out;
  std::vector<double> ref;
  if (c.fmt == Fmt::Bf16) {
    if (!ctx.cuda(cudaMemcpy(dl.p, cur.data(), cur.size() * 4, cudaMemcpyHostToDevice), "upload lens") ||
        !run_decode_kernel<F>(ctx, nullptr, &dk, &dv, in.k, dq, dl, cur, s.hq, scale, out))
      return;
    ref = attn_twin::decode(in.q, cur, all_seqs(B), s.hq, s.hkv, D, scale, [&](int b, int h, int64_t L, auto& K, auto& V) {
      attn_twin::bf16_head(in.k, in.v, b, h, L, K, V);
    });
  } else {
    DevCache<F> dc;
    if (!dc.create(ctx, B, s.hkv, D, c.bits, T) || !fill(ctx, dc, in, dk, dv, dl, s.lens, s.appends, cur)) return;
    const typename F::Twin tw = F::build(in.k, in.v, cur, c.bits, T);
    if (!same_as_twin(ctx, dc, tw, "cache before decode")) return;
    if (!run_decode_kernel<F>(ctx, &dc, nullptr, nullptr, in.k, dq, dl, cur, s.hq, scale, out)) return;
    ref = attn_twin::decode(in.q, cur, all_seqs(B), s.hq, s.hkv, D, scale,
                            [&](int b, int h, int64_t L, auto& K, auto& V) { F::head(tw, b, h, L, K, V); });
  }
  check_outputs(ctx, out, ref, cur, all_seqs(B), s.hq, D, kDecodeBound, "");
}

// logits: the *_decode_ex entry points with soft-capping, sink logits and both, against float64 attention with the
// same modifiers over the cache; each modifier moves the reference output well past the bound.
template <class F>
void op_logits(Ctx& ctx, const Case& c) {
  const Shape& s = c.shape;
  const int T = max_len(s), B = int(s.lens.size()), D = s.head_dim;
  const double scale = 1.0 / std::sqrt(double(D));
  const twins::Inputs in = twins::make_inputs(s.profile, B, s.hq, s.hkv, T, D, seed_of(c));
  DevBuf dk, dv, dl, dq, dsinks;
  if (!dk.upload(ctx, in.k.x, "k") || !dv.upload(ctx, in.v.x, "v") || !dq.upload(ctx, in.q, "q") || !dl.alloc(ctx, size_t(B) * 4, "lens"))
    return;
  DevCache<F> dc;
  std::vector<int> cur;
  if (!dc.create(ctx, B, s.hkv, D, c.bits, T) || !fill(ctx, dc, in, dk, dv, dl, s.lens, s.appends, cur)) return;
  const typename F::Twin tw = F::build(in.k, in.v, cur, c.bits, T);
  if (!same_as_twin(ctx, dc, tw, "cache before decode")) return;
  const auto head = [&](int b, int h, int64_t L, auto& K, auto& V) { F::head(tw, b, h, L, K, V); };
  // Sinks on the scale of the scores: query head hq's sink is the log-sum-exp of its scores in the longest sequence
  // plus N(0, 1), so that it takes a sizeable share of that sequence's softmax (a fixed value can vanish next to
  // scores of ~40, as in the stress data).
  const int bl = int(std::max_element(cur.begin(), cur.end()) - cur.begin());
  std::mt19937 rng(seed_of(c) + 77);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<float> sinks(size_t(s.hq));
  std::vector<double> K, V;
  for (int h = 0; h < s.hkv; ++h) {
    head(bl, h, cur[size_t(bl)], K, V);
    for (int gq = 0; gq < s.hq / s.hkv; ++gq) {
      const int hq = h * (s.hq / s.hkv) + gq;
      const uint16_t* q = &in.q[(size_t(bl) * s.hq + size_t(hq)) * D];
      sinks[size_t(hq)] = float(attn_twin::logsumexp_bf16q(q, K, cur[size_t(bl)], D, scale) + nd(rng));
    }
  }
  if (!dsinks.upload(ctx, sinks, "sinks")) return;
  const std::vector<double> plain = attn_twin::decode(in.q, cur, all_seqs(B), s.hq, s.hkv, D, scale, head);
  const int mx = std::max(1, *std::max_element(cur.begin(), cur.end()));
  const size_t wsb = oscar_decode_workspace_bytes(B, s.hq, s.hkv, D, mx, 1);
  DevBuf dws, dout;
  if (!dws.alloc(ctx, wsb, "workspace") || !dout.alloc(ctx, size_t(B) * s.hq * D * 4, "out")) return;
  constexpr double kSoftcap = 2.0;  // scores of these inputs reach ~10: a cap of 2 bends most of them
  struct Variant { const char* name; double softcap; bool sinks; };
  for (const Variant& v : {Variant{"softcap", kSoftcap, false}, Variant{"sinks", 0.0, true}, Variant{"softcap+sinks", kSoftcap, true}}) {
    const std::vector<double> ref =
        attn_twin::decode(in.q, cur, all_seqs(B), s.hq, s.hkv, D, scale, head, v.softcap, v.sinks ? sinks : std::vector<float>{});
    // The modifier must matter on these inputs: the float64 outputs with and without it differ by > 5x the bound somewhere.
    double moved = 0;
    for (size_t o = 0; o + D <= ref.size(); o += size_t(D)) {
      std::vector<float> pf(plain.begin() + long(o), plain.begin() + long(o + D));
      moved = std::max(moved, attn_twin::rel_err(pf.data(), &ref[o], D));
    }
    if (!(moved > 5 * kDecodeBound)) ctx.fail("%s: the modifier moves the float64 output by only %.2e: the case cannot catch it", v.name, moved);
    const oscar_decode_logits lg{float(v.softcap), v.sinks ? dsinks.as<float>() : nullptr};
    if (!ctx.cuda(cudaMemset(dout.p, 0xff, dout.bytes), "poison out")) return;
    oscar_error err{};
    if (!ctx.ok(F::decode_ex(dc.c, &lg, dq.p, s.hq, dl.as<int32_t>(), mx, float(scale), dout.as<float>(), dws.p, wsb, &err), err, "decode_ex") ||
        !ctx.cuda(cudaDeviceSynchronize(), "decode sync"))
      return;
    const std::vector<float> out = download<float>(ctx, dout.p, size_t(B) * s.hq * D, "out");
    char label[96];
    std::snprintf(label, sizeof label, "%s (moves ref %.2f)", v.name, moved);
    check_outputs(ctx, out, ref, cur, all_seqs(B), s.hq, D, kDecodeBound, label);
  }
}

// rotated: the *_rotated entry points on unrotated rows against the plain entry points on rows the
// host rotated by oscar/rotate_math.h's rule (tests/twins/rotate_twin.h): after prefill and appends the cache bit
// for bit, and the rotated decode's output bit for bit against the plain decode's output un-rotated on the host;
// the plain output also within the decode bound of float64 attention. Three rotations per case: Hadamard, one
// random orthogonal matrix pair for all KV heads, one pair per KV head.
template <class F>
void op_rotated(Ctx& ctx, const Case& c) {
  const Shape& s = c.shape;
  const int T = max_len(s), B = int(s.lens.size()), D = s.head_dim, H = s.hkv, G = s.hq / s.hkv;
  const double scale = 1.0 / std::sqrt(double(D));
  const twins::Inputs in = twins::make_inputs(s.profile, B, s.hq, H, T, D, seed_of(c));
  static const char* names[] = {"hadamard", "matrix", "matrix per head"};
  for (int variant = 0; variant < 3; ++variant) {
    const int kind = variant == 0 ? OSCAR_ROTATION_HADAMARD : OSCAR_ROTATION_MATRIX, per_head = variant == 2 ? 1 : 0;
    const rotate_twin::Rotation rt = rotate_twin::make(kind, per_head, H, D, seed_of(c) + 17 * variant);
    twins::Inputs rin = in;
    rin.k.x = rotate_twin::rotate_rows(in.k.x, B, H, T, rt, false);
    rin.v.x = rotate_twin::rotate_rows(in.v.x, B, H, T, rt, true);
    rin.q = rotate_twin::rotate_queries(in.q, B, s.hq, G, rt);
    DevBuf dk, dv, dl, dq, dqr, drk, drv;
    if (!dk.upload(ctx, in.k.x, "k") || !dv.upload(ctx, in.v.x, "v") || !dq.upload(ctx, in.q, "q") || !dqr.upload(ctx, rin.q, "rotated q") ||
        !dl.alloc(ctx, size_t(B) * 4, "lens"))
      return;
    if (kind == OSCAR_ROTATION_MATRIX && (!drk.upload(ctx, rt.key, "R_K") || !drv.upload(ctx, rt.value, "R_V"))) return;
    const oscar_rotation rot{kind, per_head, drk.as<float>(), drv.as<float>()};
    DevCache<F> dc;
    std::vector<int> cur;
    if (!dc.create(ctx, B, H, D, c.bits, T) || !fill(ctx, dc, in, dk, dv, dl, s.lens, s.appends, cur, &rot)) return;
    const typename F::Twin tw = F::build(rin.k, rin.v, cur, c.bits, T);
    if (!same_as_twin(ctx, dc, tw, (std::string(names[variant]) + ": cache").c_str())) return;
    // The rotated decode (unrotated q, un-rotated output) and the plain one on the host-rotated q.
    const int mx = std::max(1, *std::max_element(cur.begin(), cur.end()));
    const size_t wsb = oscar_decode_workspace_bytes(B, s.hq, H, D, mx, 1);
    DevBuf dws, dout;
    if (!dws.alloc(ctx, wsb, "workspace") || !dout.alloc(ctx, size_t(B) * s.hq * D * 4, "out")) return;
    oscar_error err{};
    if (!ctx.ok(F::decode_rot(dc.c, &rot, dq.p, s.hq, dl.as<int32_t>(), mx, float(scale), dout.as<float>(), dws.p, wsb, &err), err,
                "decode_rotated") ||
        !ctx.cuda(cudaDeviceSynchronize(), "decode sync"))
      return;
    const std::vector<float> fused = download<float>(ctx, dout.p, size_t(B) * s.hq * D, "out");
    std::vector<float> plain;
    if (!run_decode_kernel<F>(ctx, &dc, nullptr, nullptr, in.k, dqr, dl, cur, s.hq, scale, plain)) return;
    const std::vector<double> ref = attn_twin::decode(rin.q, cur, all_seqs(B), s.hq, H, D, scale,
                                                      [&](int b, int h, int64_t L, auto& K, auto& V) { F::head(tw, b, h, L, K, V); });
    check_outputs(ctx, plain, ref, cur, all_seqs(B), s.hq, D, kDecodeBound, names[variant]);
    rotate_twin::unrotate_outputs(plain, B, s.hq, G, rt);
    ++ctx.checks;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < plain.size(); ++i)
      if (std::memcmp(&plain[i], &fused[i], 4) != 0 && bad++ == 0) first = i;
    if (bad)
      ctx.fail("%s: %zu output element(s) differ from the plain decode un-rotated on the host (first: %zu, %.9g vs %.9g)", names[variant], bad, first,
               fused[first], plain[first]);
  }
  ctx.info = "cache and un-rotated output bit-exact for all three rotations; " + ctx.info;
}

// paged: the paged cache written as an engine writes it against the contiguous cache of the same tokens.
void op_paged(Ctx& ctx, const Case& c) {
  namespace cp = oscar::covpaged;
  const Shape& s = c.shape;
  const int T = max_len(s), B = int(s.lens.size()), D = s.head_dim, H = s.hkv;
  const int S = oscar::covfmt::kDefaultSink, W = oscar::covfmt::kDefaultRecent;
  const double scale = 1.0 / std::sqrt(double(D));
  const twins::Inputs in = twins::make_inputs(s.profile, B, s.hq, H, T, D, seed_of(c));
  const int64_t CB = cp::code_bytes(D, c.bits);
  std::string info;
  for (int variant = 0; variant < 2; ++variant) {
    const bool rotated = variant == 1;
    const int P = rotated ? 256 : 64;
    const rotate_twin::Rotation rt = rotate_twin::make(OSCAR_ROTATION_MATRIX, 1, H, D, seed_of(c) + 5);
    DevBuf dk, dv, dl, dq, drk, drv;
    if (!dk.upload(ctx, in.k.x, "k") || !dv.upload(ctx, in.v.x, "v") || !dq.upload(ctx, in.q, "q") || !dl.alloc(ctx, size_t(B) * 4, "lens") ||
        !drk.upload(ctx, rt.key, "R_K") || !drv.upload(ctx, rt.value, "R_V"))
      return;
    const oscar_rotation rot{OSCAR_ROTATION_MATRIX, 1, drk.as<float>(), drv.as<float>()};
    const oscar_rotation* rp = rotated ? &rot : nullptr;
    // The contiguous cache.
    DevCache<CovFmt> dc;
    std::vector<int> cur;
    if (!dc.create(ctx, B, H, D, c.bits, T) || !fill(ctx, dc, in, dk, dv, dl, s.lens, s.appends, cur, rp)) return;
    // The paged cache: pages shuffled over a pool with spare pages, window slot of b = slots - 1 - b (never b).
    const int per_seq = int((T + P - 1) / P), slots = B + 3;
    const int64_t num_pages = int64_t(B) * per_seq + 5;
    std::vector<int32_t> perm(static_cast<size_t>(num_pages));
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = int32_t(i);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed_of(c) + 11));
    std::vector<int32_t> bt(static_cast<size_t>(B) * per_seq), wslot(static_cast<size_t>(B));
    for (size_t i = 0; i < bt.size(); ++i) bt[i] = perm[i];
    for (int b = 0; b < B; ++b) wslot[size_t(b)] = slots - 1 - b;
    oscar_cov_paged pc{};
    pc.num_kv_heads = H; pc.head_dim = D; pc.bits = c.bits; pc.sink = S; pc.recent = W; pc.page_tokens = P;
    pc.num_pages = num_pages;
    pc.page_stride = cp::page_bytes(P, H, D, c.bits) + 32;  // an engine may pad its pages
    pc.num_window_slots = slots;
    oscar_cov_paged_default_rule(&pc);
    ++ctx.checks;
    if (oscar_cov_paged_page_bytes(P, H, D, c.bits) != cp::page_bytes(P, H, D, c.bits) ||
        oscar_cov_paged_window_bytes(H, D, S, W) != cp::window_slot_bytes(H, D, S, W))
      ctx.fail("oscar_cov_paged_page_bytes / _window_bytes disagree with cov_paged_format.h");
    DevBuf dpages, dks, dvs, dkr, dvr, dbt, dws;
    const size_t sink_bytes = size_t(slots) * H * S * D * 2, ring_bytes = size_t(slots) * H * W * D * 2;
    if (!dpages.alloc(ctx, size_t(num_pages * pc.page_stride), "pages") || !dks.alloc(ctx, sink_bytes, "k_sink") ||
        !dvs.alloc(ctx, sink_bytes, "v_sink") || !dkr.alloc(ctx, ring_bytes, "k_recent") || !dvr.alloc(ctx, ring_bytes, "v_recent") ||
        !dbt.upload(ctx, bt, "block table") || !dws.upload(ctx, wslot, "window slots"))
      return;
    for (DevBuf* d : {&dpages, &dks, &dvs, &dkr, &dvr})
      if (!ctx.cuda(cudaMemset(d->p, 0xAB, d->bytes), "poison")) return;
    pc.pages = dpages.p; pc.k_sink = dks.p; pc.v_sink = dvs.p; pc.k_recent = dkr.p; pc.v_recent = dvr.p;
    // One engine step: tokens [from[b], to[b]) of every sequence, token-major rows [tokens][H][D].
    auto step = [&](const std::vector<int>& from, const std::vector<int>& to, const char* what) {
      std::vector<int32_t> qsl(static_cast<size_t>(B) + 1, 0), lens(static_cast<size_t>(B));
      std::vector<int64_t> slot_map;
      std::vector<uint16_t> kr, vr;
      for (int b = 0; b < B; ++b) {
        lens[size_t(b)] = to[size_t(b)];
        qsl[size_t(b) + 1] = qsl[size_t(b)] + (to[size_t(b)] - from[size_t(b)]);
        for (int t = from[size_t(b)]; t < to[size_t(b)]; ++t) {
          slot_map.push_back(int64_t(bt[size_t(b) * per_seq + t / P]) * P + t % P);
          for (int h = 0; h < H; ++h) {
            kr.insert(kr.end(), in.k.row(b, h, t), in.k.row(b, h, t) + D);
            vr.insert(vr.end(), in.v.row(b, h, t), in.v.row(b, h, t) + D);
          }
        }
      }
      const int n = qsl[size_t(B)];
      if (n == 0) return true;
      DevBuf dkk, dvv, dsm, dqsl, dlen;
      if (!dkk.upload(ctx, kr, "k rows") || !dvv.upload(ctx, vr, "v rows") || !dsm.upload(ctx, slot_map, "slot mapping") ||
          !dqsl.upload(ctx, qsl, "qsl") || !dlen.upload(ctx, lens, "lens"))
        return false;
      const oscar_paged_batch pb{B, dlen.as<int32_t>(), dqsl.as<int32_t>(), dbt.as<int32_t>(), per_seq, dws.as<int32_t>(), 0};
      oscar_error err{};
      return ctx.ok(oscar_cov_paged_write(&pc, rp, &pb, dkk.p, dvv.p, int64_t(H) * D, int64_t(H) * D, n, dsm.as<int64_t>(), nullptr, &err), err,
                    what) &&
             ctx.cuda(cudaDeviceSynchronize(), what);
    };
    std::vector<int> zero(static_cast<size_t>(B), 0), half(static_cast<size_t>(B)), now = s.lens;
    for (int b = 0; b < B; ++b) half[size_t(b)] = s.lens[size_t(b)] / 2;
    if (!step(zero, half, "write: first chunk") || !step(half, now, "write: second chunk")) return;
    for (int a = 0; a < s.appends; ++a) {
      std::vector<int> next = now;
      for (int& L : next) ++L;
      if (!step(now, next, "write: decode step")) return;
      now = next;
    }
    // Every live element against the contiguous cache.
    const oscar::covfmt::Layout lay = oscar::covfmt::layout(B, H, D, c.bits, T, S, W);
    const auto kc = download<uint8_t>(ctx, dc.c.k_codes, size_t(lay.codes_bytes), "k codes");
    const auto vc = download<uint8_t>(ctx, dc.c.v_codes, size_t(lay.codes_bytes), "v codes");
    const auto kp = download<uint32_t>(ctx, dc.c.k_params, size_t(lay.params_bytes / 4), "k params");
    const auto vp = download<uint32_t>(ctx, dc.c.v_params, size_t(lay.params_bytes / 4), "v params");
    const auto ksk = download<uint16_t>(ctx, dc.c.k_sink, size_t(lay.sink_bytes / 2), "k sink");
    const auto vsk = download<uint16_t>(ctx, dc.c.v_sink, size_t(lay.sink_bytes / 2), "v sink");
    const auto krc = download<uint16_t>(ctx, dc.c.k_recent, size_t(lay.recent_bytes / 2), "k recent");
    const auto vrc = download<uint16_t>(ctx, dc.c.v_recent, size_t(lay.recent_bytes / 2), "v recent");
    const auto pages = download<uint8_t>(ctx, dpages.p, dpages.bytes, "pages");
    const auto pks = download<uint16_t>(ctx, dks.p, sink_bytes / 2, "paged k sink");
    const auto pvs = download<uint16_t>(ctx, dvs.p, sink_bytes / 2, "paged v sink");
    const auto pkr = download<uint16_t>(ctx, dkr.p, ring_bytes / 2, "paged k recent");
    const auto pvr = download<uint16_t>(ctx, dvr.p, ring_bytes / 2, "paged v recent");
    int64_t bad = 0, live = 0;
    auto differ = [&](const void* a, const void* b, size_t n, const char* what, int sb, int h, int t) {
      ++live;
      if (std::memcmp(a, b, n) == 0) return;
      if (bad++ < 8) ctx.fail("%s: b=%d h=%d token %d differs from the contiguous cache", what, sb, h, t);
    };
    for (int b = 0; b < B; ++b) {
      const int L = now[size_t(b)];
      const int64_t nb = oscar::covfmt::body_tokens(L, S, W);
      for (int h = 0; h < H; ++h) {
        const int64_t bh = int64_t(b) * H + h, wh = int64_t(wslot[size_t(b)]) * H + h;
        for (int t = 0; t < L; ++t) {
          if (t < S) {
            differ(&pks[size_t((wh * S + t) * D)], &ksk[size_t((bh * S + t) * D)], size_t(D) * 2, "k sink", b, h, t);
            differ(&pvs[size_t((wh * S + t) * D)], &vsk[size_t((bh * S + t) * D)], size_t(D) * 2, "v sink", b, h, t);
          } else if (t < S + nb) {
            const int64_t page = bt[size_t(b) * per_seq + t / P], off = t % P;
            const uint8_t* reg = &pages[size_t(page * pc.page_stride + h * cp::region_bytes(P, D, c.bits))];
            const int64_t bi = bh * lay.body_capacity + (t - S);
            differ(reg + off * CB, &kc[size_t(bi * CB)], size_t(CB), "k codes", b, h, t);
            differ(reg + cp::v_codes_offset(P, D, c.bits) + off * CB, &vc[size_t(bi * CB)], size_t(CB), "v codes", b, h, t);
            differ(reg + cp::k_params_offset(P, D, c.bits) + off * 4, &kp[size_t(bi)], 4, "k params", b, h, t);
            differ(reg + cp::v_params_offset(P, D, c.bits) + off * 4, &vp[size_t(bi)], 4, "v params", b, h, t);
          } else {
            const int64_t r = (t - S) % W;
            differ(&pkr[size_t((wh * W + r) * D)], &krc[size_t((bh * W + r) * D)], size_t(D) * 2, "k recent", b, h, t);
            differ(&pvr[size_t((wh * W + r) * D)], &vrc[size_t((bh * W + r) * D)], size_t(D) * 2, "v recent", b, h, t);
          }
        }
      }
    }
    if (bad) return;
    // Decode: the paged output against the contiguous one (the same plan: the same max_seq_len) bit for bit.
    const int mx = std::max(1, *std::max_element(cur.begin(), cur.end()));
    const size_t wsb = oscar_decode_workspace_bytes(B, s.hq, H, D, mx, 1);
    DevBuf dwk, dout, dout2, dlen;
    if (!dwk.alloc(ctx, wsb, "workspace") || !dout.alloc(ctx, size_t(B) * s.hq * D * 4, "out") ||
        !dout2.alloc(ctx, size_t(B) * s.hq * D * 4, "out") || !dlen.upload(ctx, now, "lens"))
      return;
    oscar_error err{};
    const oscar_paged_batch pb{B, dlen.as<int32_t>(), nullptr, dbt.as<int32_t>(), per_seq, dws.as<int32_t>(), 0};
    if (!ctx.cuda(cudaMemset(dout.p, 0xff, dout.bytes), "poison out") ||
        !ctx.ok(oscar_cov_paged_decode(&pc, rp, &pb, dq.p, s.hq, mx, float(scale), dout.as<float>(), dwk.p, wsb, nullptr, &err), err,
                "oscar_cov_paged_decode") ||
        !ctx.ok(rotated ? CovFmt::decode_rot(dc.c, rp, dq.p, s.hq, dl.as<int32_t>(), mx, float(scale), dout2.as<float>(), dwk.p, wsb, &err)
                        : CovFmt::decode(dc.c, dq.p, s.hq, dl.as<int32_t>(), mx, float(scale), dout2.as<float>(), dwk.p, wsb, &err),
                err, "contiguous decode") ||
        !ctx.cuda(cudaDeviceSynchronize(), "decode sync"))
      return;
    std::vector<float> got = download<float>(ctx, dout.p, size_t(B) * s.hq * D, "out");
    const std::vector<float> want = download<float>(ctx, dout2.p, size_t(B) * s.hq * D, "out");
    size_t nbad = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::memcmp(&got[i], &want[i], 4) != 0 && nbad++ == 0) first = i;
    ++ctx.checks;
    if (nbad) {
      ctx.fail("page %d%s: %zu decode output element(s) differ from the contiguous decode (first %zu: %.9g vs %.9g)", P,
               rotated ? " rotated" : "", nbad, first, got[first], want[first]);
      return;
    }
    // Batch invariance (split_tokens fixed): the batch's outputs equal each sequence decoded alone, bit for bit.
    {
      const int split = 512;
      const size_t wsf = oscar_cov_paged_workspace_bytes(B, s.hq, H, D, mx, split);
      DevBuf dwf, dbat, done;
      if (!dwf.alloc(ctx, wsf, "workspace") || !dbat.alloc(ctx, size_t(B) * s.hq * D * 4, "out") || !done.alloc(ctx, size_t(s.hq) * D * 4, "out"))
        return;
      oscar_paged_batch fb = pb;
      fb.split_tokens = split;
      if (!ctx.ok(oscar_cov_paged_decode(&pc, rp, &fb, dq.p, s.hq, mx, float(scale), dbat.as<float>(), dwf.p, wsf, nullptr, &err), err,
                  "batch decode, split_tokens 512"))
        return;
      const std::vector<float> all = download<float>(ctx, dbat.p, size_t(B) * s.hq * D, "out");
      size_t diff = 0;
      for (int b = 0; b < B; ++b) {
        oscar_paged_batch one = fb;
        one.num_seqs = 1;
        one.seq_lens = dlen.as<int32_t>() + b;
        one.block_table = dbt.as<int32_t>() + size_t(b) * per_seq;
        one.window_slot = dws.as<int32_t>() + b;
        const uint16_t* qb = dq.as<uint16_t>() + size_t(b) * s.hq * D;
        if (!ctx.ok(oscar_cov_paged_decode(&pc, rp, &one, qb, s.hq, mx, float(scale), done.as<float>(), dwf.p, wsf, nullptr, &err), err,
                    "one-sequence decode") ||
            !ctx.cuda(cudaDeviceSynchronize(), "decode sync"))
          return;
        const std::vector<float> o = download<float>(ctx, done.p, size_t(s.hq) * D, "out");
        diff += std::memcmp(o.data(), &all[size_t(b) * s.hq * D], o.size() * 4) != 0;
      }
      ++ctx.checks;
      if (diff) ctx.fail("split_tokens 512: %zu of %d sequences decode to other bits alone than in the batch", diff, B);
    }
    // Unrotated: also within the decode bound of float64 attention over the twin (the rotated decode of the contiguous
    // cache, which the paged one equals bit for bit, is checked against the twin by op rotated).
    ctx.info.clear();
    if (!rotated) {
      const cov_twin::Cache tw = CovFmt::build(in.k, in.v, cur, c.bits, T);
      const std::vector<double> ref = attn_twin::decode(in.q, cur, all_seqs(B), s.hq, H, D, scale,
                                                        [&](int b, int h, int64_t L, auto& K, auto& V) { CovFmt::head(tw, b, h, L, K, V); });
      check_outputs(ctx, got, ref, cur, all_seqs(B), s.hq, D, kDecodeBound, "");
    }
    info += (info.empty() ? "" : "; ") + std::string(rotated ? "page 256, rotated: " : "page 64: ") + std::to_string(live) +
            " live rows and the decode bit-exact with the contiguous cache, and alone as in the batch (split_tokens 512)" + (ctx.info.empty() ? "" : ", " + ctx.info);
  }
  ctx.info = info;
}

// long: B copies of one sequence of L tokens on the device; sequences 0 and B-1 checked.
struct LongInputs {
  int B = 0, L = 0;
  twins::Inputs in;  // rows of one sequence, queries of B (the former gpu_test_long_split's data, seed 4242)
};
const LongInputs& long_inputs(const Shape& s) {
  static std::unique_ptr<LongInputs> cached;
  const int B = int(s.lens.size()), L = s.lens[0];
  if (!cached || cached->L != L || cached->B != B) {
    cached = std::make_unique<LongInputs>();
    cached->B = B;
    cached->L = L;
    cached->in = twins::make_inputs(Profile::Spread, 1, s.hq, s.hkv, L, s.head_dim, 4242, B);
  }
  return *cached;
}

template <class F>
void op_long(Ctx& ctx, const Case& c) {
  const Shape& s = c.shape;
  const int B = int(s.lens.size()), L = s.lens[0], H = s.hkv, Hq = s.hq, D = s.head_dim, G = Hq / H;
  const double scale = 1.0 / std::sqrt(double(D));
  const twins::Inputs& one = long_inputs(s).in;
  const std::vector<uint16_t>& q = one.q;
  const size_t seq = size_t(H) * L * D;
  DevBuf dk, dv, dq, dl;
  if (!dk.alloc(ctx, seq * B * 2, "k") || !dv.alloc(ctx, seq * B * 2, "v") || !dq.upload(ctx, q, "q") || !dl.upload(ctx, s.lens, "lens"))
    return;
  for (int b = 0; b < B; ++b)
    if (!ctx.cuda(cudaMemcpy(dk.as<uint16_t>() + b * seq, one.k.x.data(), seq * 2, cudaMemcpyHostToDevice), "upload k") ||
        !ctx.cuda(cudaMemcpy(dv.as<uint16_t>() + b * seq, one.v.x.data(), seq * 2, cudaMemcpyHostToDevice), "upload v"))
      return;
  twins::Bf16Rows rows;  // the device rows' shape (the bf16 kernel's capacity = L)
  rows.B = B; rows.H = H; rows.T = L; rows.D = D;
  std::vector<float> out;
  std::unique_ptr<typename F::Twin> tw;
  if (c.fmt == Fmt::Bf16) {
    if (!run_decode_kernel<F>(ctx, nullptr, &dk, &dv, rows, dq, dl, s.lens, Hq, scale, out)) return;
  } else {
    DevCache<F> dc;
    oscar_error err{};
    if (!dc.create(ctx, B, H, D, c.bits, L) || !ctx.ok(F::prefill(dc.c, dk.p, dv.p, dl.as<int32_t>(), L, &err), err, "prefill") ||
        !run_decode_kernel<F>(ctx, &dc, nullptr, nullptr, rows, dq, dl, s.lens, Hq, scale, out))
      return;
    tw = std::make_unique<typename F::Twin>(F::build(one.k, one.v, {L}, c.bits, L));  // every sequence holds these rows
  }
  // The reference of sequences 0 and B-1 (same rows, their own queries), dequantizing each head once.
  std::vector<double> ref(out.size(), 0.0), K, V;
  for (int h = 0; h < H; ++h) {
    if (tw) F::head(*tw, 0, h, L, K, V);
    else attn_twin::bf16_head(one.k, one.v, 0, h, L, K, V);
    for (int b : {0, B - 1})
      for (int g = 0; g < G; ++g) {
        const size_t o = (size_t(b) * Hq + size_t(h) * G + g) * D;
        attn_twin::attention_bf16q(&q[o], K, V, L, D, scale, &ref[o]);
      }
  }
  check_outputs(ctx, out, ref, s.lens, B > 1 ? std::vector<int>{0, B - 1} : std::vector<int>{0}, Hq, D, kLongBound, "");
}

// real: every layer of the bundled model (or of the --real-dump file), Hadamard-rotated and rounded to bf16,
// batch of three lengths. Loaded once per source and length.
const std::vector<RealLayer>& real_layers(const Shape& s, int T) {
  static std::map<std::string, std::vector<RealLayer>> cache;
  const std::string key = (s.from_dump ? g_real_dump : std::string("kjv")) + "#" + std::to_string(T);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, s.from_dump ? real_dump_layers(g_real_dump, T) : real_activations(T)).first;
  return it->second;
}

template <class F>
void op_real(Ctx& ctx, const Case& c) {
  const Shape& s = c.shape;
  if (s.from_dump && g_real_dump.empty()) {
    ctx.skipped = true;
    ctx.info = "no dump given: pass --real-dump FILE (or OSCAR_REAL_DUMP); experiments/device/make_smollm2_real_dump.sh makes it";
    return;
  }
  if (const std::string miss = real_data_missing(); !s.from_dump && !miss.empty()) {
    ctx.skipped = true;
    ctx.info = "real data absent: " + miss + " (bring it with data/bring_data.sh)";
    return;
  }
  const int T = max_len(s), B = int(s.lens.size()), D = s.head_dim;
  const std::vector<RealLayer>& layers = real_layers(s, T);
  double worst = 0;
  std::string worst_info, per_layer;
  for (size_t li = 0; li < layers.size(); ++li) {
    const RealLayer& R = layers[li];
    if (R.head_dim != D || R.n_heads != s.hq || R.n_kv_heads != s.hkv) {
      ctx.fail("layer %d: %d query / %d KV heads of head_dim %d, the case expects %d / %d of %d", R.layer, R.n_heads, R.n_kv_heads,
               R.head_dim, s.hq, s.hkv, D);
      return;
    }
    const int Hq = R.n_heads, H = R.n_kv_heads;
    const double scale = R.scaling;
    auto rotate = [&](const std::vector<float>& x) { return fwht_twin::transform(x, int64_t(x.size() / D), D, true); };
    const std::vector<float> kr = rotate(R.k), vr = rotate(R.v), qr = rotate(R.q);
    twins::Inputs in;
    in.k.init(B, H, T, D);
    in.v.init(B, H, T, D);
    in.q.resize(size_t(B) * Hq * D);
    for (int b = 0; b < B; ++b) {
      for (size_t i = 0; i < kr.size(); ++i) {
        in.k.x[size_t(b) * kr.size() + i] = oscar::float_to_bf16_bits(kr[i]);
        in.v.x[size_t(b) * vr.size() + i] = oscar::float_to_bf16_bits(vr[i]);
      }
      for (int h = 0; h < Hq; ++h)  // the query of the sequence's last token
        for (int ch = 0; ch < D; ++ch)
          in.q[(size_t(b) * Hq + h) * D + ch] = oscar::float_to_bf16_bits(qr[(size_t(h) * T + s.lens[size_t(b)] - 1) * D + ch]);
    }
    DevBuf dk, dv, dl, dq;
    if (!dk.upload(ctx, in.k.x, "k") || !dv.upload(ctx, in.v.x, "v") || !dq.upload(ctx, in.q, "q") || !dl.alloc(ctx, size_t(B) * 4, "lens"))
      return;
    DevCache<F> dc;
    std::vector<int> cur;
    std::vector<float> out;
    if (!dc.create(ctx, B, H, D, c.bits, T) || !fill(ctx, dc, in, dk, dv, dl, s.lens, 0, cur)) return;
    const typename F::Twin tw = F::build(in.k, in.v, cur, c.bits, T);
    const std::string label = "layer " + std::to_string(R.layer);
    if (!same_as_twin(ctx, dc, tw, label.c_str())) continue;
    if (!run_decode_kernel<F>(ctx, &dc, nullptr, nullptr, in.k, dq, dl, cur, Hq, scale, out)) return;
    const std::vector<double> ref = attn_twin::decode(in.q, cur, all_seqs(B), Hq, H, D, scale,
                                                      [&](int b, int h, int64_t L, auto& K, auto& V) { F::head(tw, b, h, L, K, V); });
    Ctx layer;
    check_outputs(layer, out, ref, cur, all_seqs(B), Hq, D, kRealBound, label);
    ctx.failures += layer.failures;
    ctx.log += layer.log;
    double e = 0;
    for (int b = 0; b < B; ++b)
      for (int hq = 0; hq < Hq; ++hq) e = std::max(e, attn_twin::rel_err(&out[(size_t(b) * Hq + hq) * D], &ref[(size_t(b) * Hq + hq) * D], D));
    if (e >= worst) { worst = e; worst_info = layer.info; }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%d: %.2e", per_layer.empty() ? "" : ", ", R.layer, e);
    per_layer += buf;
  }
  ctx.info = std::to_string(layers.size()) + " layers, worst " + worst_info;
  ctx.log += "    per layer, max rel err: " + per_layer + "\n";
}

// api: bad input gets an error status and a message, never a silent wrong answer.
void api_fwht(Ctx& ctx) {
  DevBuf d;
  if (!d.alloc(ctx, 1024 * 4, "rows")) return;
  oscar_error err{};
  float* p = d.as<float>();
  ctx.rejects(oscar_fwht_f32(p, 4, 96, 1, nullptr, &err), OSCAR_ERR_UNSUPPORTED, err, "head_dim=96", "fwht head_dim 96");
  ctx.rejects(oscar_fwht_f32(nullptr, 4, 128, 1, nullptr, &err), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "fwht null data");
  ctx.rejects(oscar_fwht_f32(p + 1, 4, 128, 1, nullptr, &err), OSCAR_ERR_MISALIGNED, err, nullptr, "fwht misaligned data");
  ctx.rejects(oscar_fwht_f32(p, -1, 128, 1, nullptr, &err), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "fwht negative rows");
  ctx.info = "4 rejections";
}

void api_bf16(Ctx& ctx, const Shape& s) {
  const int B = int(s.lens.size()), H = s.hkv, Hq = s.hq, D = s.head_dim, T = max_len(s);
  DevBuf dk, dv, dq, dl, dout, dws;
  const size_t ws = oscar_decode_workspace_bytes(B, Hq, H, D, T, 0);
  if (!dk.alloc(ctx, size_t(B) * H * T * D * 2, "k") || !dv.alloc(ctx, dk.bytes, "v") || !dq.alloc(ctx, size_t(B) * Hq * D * 2, "q") ||
      !dl.upload(ctx, s.lens, "lens") || !dout.alloc(ctx, size_t(B) * Hq * D * 4, "out") || !dws.alloc(ctx, ws, "workspace"))
    return;
  oscar_error err{};
  auto dec = [&](const void* k, int hd, const void* q, int hq, int mx, size_t wsb) {
    return oscar_bf16_decode(k, dv.p, B, H, T, hd, q, hq, dl.as<int32_t>(), mx, 1.f, dout.as<float>(), dws.p, wsb, nullptr, &err);
  };
  ctx.rejects(dec(dk.p, 96, dq.p, Hq, T, ws), OSCAR_ERR_UNSUPPORTED, err, nullptr, "bf16 head_dim 96");
  ctx.rejects(dec(dk.p, D, dq.p, Hq, T + 1, ws), OSCAR_ERR_INVALID_ARGUMENT, err, "capacity", "bf16 length beyond capacity");
  ctx.rejects(dec(dk.p, D, dq.p, Hq, T, ws / 2), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "bf16 small workspace");
  ctx.rejects(dec(dk.p, D, dq.as<uint16_t>() + 1, Hq, T, ws), OSCAR_ERR_MISALIGNED, err, nullptr, "bf16 misaligned q");
  ctx.rejects(dec(dk.p, D, dq.p, Hq + 1, T, ws), OSCAR_ERR_UNSUPPORTED, err, nullptr, "bf16 query heads not a multiple of KV heads");
  ctx.rejects(dec(nullptr, D, dq.p, Hq, T, ws), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "bf16 null k");
  ctx.info = "6 rejections";
}

template <class F>
void api_cache(Ctx& ctx, const Case& c) {
  const Shape& s = c.shape;
  const int B = int(s.lens.size()), H = s.hkv, Hq = s.hq, D = s.head_dim, T = max_len(s);
  DevBuf dk, dv, dq, dl, dout, dws;
  const size_t ws = oscar_decode_workspace_bytes(B, Hq, H, D, T, 1);
  if (!dk.alloc(ctx, size_t(B) * H * T * D * 2, "k") || !dv.alloc(ctx, dk.bytes, "v") || !dq.alloc(ctx, size_t(B) * Hq * D * 2, "q") ||
      !dl.upload(ctx, s.lens, "lens") || !dout.alloc(ctx, size_t(B) * Hq * D * 4, "out") || !dws.alloc(ctx, ws, "workspace") ||
      !ctx.cuda(cudaMemset(dk.p, 0, dk.bytes), "zero k") || !ctx.cuda(cudaMemset(dv.p, 0, dv.bytes), "zero v"))
    return;
  DevCache<F> dc;
  if (!dc.create(ctx, B, H, D, c.bits, T)) return;
  oscar_error err{};
  using Dev = typename F::Dev;
  const Dev& g = dc.c;
  const int32_t cap = int32_t(F::capacity(g));
  const int32_t* l = dl.as<int32_t>();
  const uint16_t* k = dk.as<uint16_t>();
  auto decode = [&](const Dev& x, const void* q, int hq, const int32_t* lens, int mx, float* out, size_t wsb) {
    return F::decode(x, q, hq, lens, mx, 1.f, out, dws.p, wsb, &err);
  };
  // Lengths, pointers, workspace.
  ctx.rejects(F::prefill(g, k, dv.p, l, cap + 1, &err), OSCAR_ERR_INVALID_ARGUMENT, err, "capacity", "prefill max_len beyond capacity");
  ctx.rejects(F::append(g, k, dv.p, l, cap, &err), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "append beyond capacity");
  ctx.rejects(decode(g, dq.p, Hq, l, cap + 1, dout.as<float>(), ws), OSCAR_ERR_INVALID_ARGUMENT, err, "capacity", "decode beyond capacity");
  ctx.rejects(F::prefill(g, nullptr, dv.p, l, T, &err), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "prefill null k");
  ctx.rejects(F::prefill(g, k + 1, dv.p, l, T, &err), OSCAR_ERR_MISALIGNED, err, nullptr, "prefill misaligned k");
  ctx.rejects(decode(g, dq.p, Hq, nullptr, T, dout.as<float>(), ws), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "decode null lens");
  ctx.rejects(decode(g, dq.p, Hq, l, T, dout.as<float>() + 1, ws), OSCAR_ERR_MISALIGNED, err, nullptr, "decode misaligned out");
  ctx.rejects(decode(g, dq.as<uint16_t>() + 1, Hq, l, T, dout.as<float>(), ws), OSCAR_ERR_MISALIGNED, err, nullptr, "decode misaligned q");
  ctx.rejects(decode(g, dq.p, Hq, l, T, dout.as<float>(), ws / 4), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "decode small workspace");
  ctx.rejects(decode(g, dq.p, H * 17, l, T, dout.as<float>(), ws), OSCAR_ERR_UNSUPPORTED, err, nullptr, "decode GQA group 17");
  // Shapes the kernels are not compiled for, and a bad struct.
  Dev bad = g;
  bad.bits = 3;
  ctx.rejects(F::prefill(bad, k, dv.p, l, T, &err), OSCAR_ERR_UNSUPPORTED, err, "bits=3", "prefill bits 3");
  bad = g;
  bad.bits = 8;
  ctx.rejects(decode(bad, dq.p, Hq, l, T, dout.as<float>(), ws), OSCAR_ERR_UNSUPPORTED, err, nullptr, "decode bits 8");
  bad = g;
  bad.head_dim = 96;
  ctx.rejects(F::prefill(bad, k, dv.p, l, T, &err), OSCAR_ERR_UNSUPPORTED, err, "head_dim=96", "prefill head_dim 96");
  ctx.rejects(decode(bad, dq.p, Hq, l, T, dout.as<float>(), ws), OSCAR_ERR_UNSUPPORTED, err, nullptr, "decode head_dim 96");
  // Format-specific struct faults, and the allocator's shape checks.
  if constexpr (std::is_same_v<F, CovFmt>) {
    bad = g;
    bad.k_codes = static_cast<char*>(bad.k_codes) + 2;
    ctx.rejects(F::prefill(bad, k, dv.p, l, T, &err), OSCAR_ERR_MISALIGNED, err, nullptr, "prefill misaligned k_codes");
    bad = g;
    bad.v_recent = nullptr;
    ctx.rejects(F::append(bad, k, dv.p, l, 10, &err), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "append null v_recent");
    ctx.rejects(oscar_cov_prefill(nullptr, k, dv.p, l, T, nullptr, &err), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "prefill null cache");
    Dev x{};
    ctx.rejects(oscar_cov_cache_create(nullptr, B, H, D, c.bits, 64, 256, T, &err), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr,
                "create null cache");
    ctx.rejects(oscar_cov_cache_create(&x, B, H, D, c.bits, 64, 0, T, &err), OSCAR_ERR_INVALID_ARGUMENT, err, "recent", "create recent 0");
    bytes_match_impl(ctx, oscar_cov_cache_bytes(B, H, D, c.bits, 64, 256, T), oscar::covfmt::layout(B, H, D, c.bits, T, 64, 256).total_bytes(),
                    oscar_cov_cache_bytes(B, H, D, 3, 64, 256, T));
  } else {
    bad = g;
    bad.body_capacity = 100;
    ctx.rejects(F::append(bad, k, dv.p, l, 10, &err), OSCAR_ERR_INVALID_ARGUMENT, err, "multiple", "append body_capacity not a multiple of 128");
    bad = g;
    bad.k_norms = nullptr;
    ctx.rejects(F::prefill(bad, k, dv.p, l, T, &err), OSCAR_ERR_INVALID_ARGUMENT, err, "k_norms", "prefill null k_norms");
    bad = g;
    bad.v_params = static_cast<char*>(bad.v_params) + 4;
    ctx.rejects(decode(bad, dq.p, Hq, l, T, dout.as<float>(), ws), OSCAR_ERR_MISALIGNED, err, nullptr, "decode misaligned v_params");
    ctx.rejects(oscar_omni_prefill(nullptr, k, dv.p, l, T, nullptr, &err), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "prefill null cache");
    ctx.rejects(oscar_omni_cache_create(nullptr, B, H, D, c.bits, T, &err), OSCAR_ERR_INVALID_ARGUMENT, err, nullptr, "create null cache");
    bytes_match_impl(ctx, oscar_omni_cache_bytes(B, H, D, c.bits, T), oscar::omnifmt::layout(B, H, D, c.bits, T).total_bytes(),
                    oscar_omni_cache_bytes(B, H, D, 3, T));
  }
  Dev x{};
  ctx.rejects(F::create(&x, B, H, D, 3, T, &err), OSCAR_ERR_UNSUPPORTED, err, "bits=3", "create bits 3");
  ctx.rejects(F::create(&x, 0, H, D, c.bits, T, &err), OSCAR_ERR_INVALID_ARGUMENT, err, "batch", "create batch 0");
  ctx.rejects(F::create(&x, B, H, 48, c.bits, T, &err), OSCAR_ERR_UNSUPPORTED, err, "head_dim=48", "create head_dim 48");
  ctx.rejects(F::create(&x, B, H, D, c.bits, 0, &err), OSCAR_ERR_INVALID_ARGUMENT, err, "capacity", "create capacity 0");
  ctx.info = std::to_string(ctx.checks) + " rejections checked";
}

// ---------------------------------------------------------------------------------------------------------
// Dispatch and the command line.

void run_case(Ctx& ctx, const Case& c) {
  const bool omni = c.fmt == Fmt::Omni;
  if (c.op != Op::Fwht && c.op != Op::Api && c.fmt != Fmt::Bf16 &&
      !(omni ? oscar_omni_shape_supported(c.shape.head_dim, c.bits) : oscar_cov_shape_supported(c.shape.head_dim, c.bits))) {
    ctx.skipped = true;
    ctx.info = "no kernel compiled for this head_dim and bits (oscar_*_shape_supported)";
    return;
  }
  switch (c.op) {
    case Op::Fwht: op_fwht(ctx, c); break;
    case Op::Prefill:
    case Op::Append: omni ? op_quant<OmniFmt>(ctx, c) : op_quant<CovFmt>(ctx, c); break;
    case Op::Decode: omni ? op_decode<OmniFmt>(ctx, c) : op_decode<CovFmt>(ctx, c); break;  // bf16 uses no cache type
    case Op::Long: omni ? op_long<OmniFmt>(ctx, c) : op_long<CovFmt>(ctx, c); break;
    case Op::Real: omni ? op_real<OmniFmt>(ctx, c) : op_real<CovFmt>(ctx, c); break;
    case Op::Rotated: omni ? op_rotated<OmniFmt>(ctx, c) : op_rotated<CovFmt>(ctx, c); break;
    case Op::Logits: omni ? op_logits<OmniFmt>(ctx, c) : op_logits<CovFmt>(ctx, c); break;
    case Op::Paged: op_paged(ctx, c); break;
    case Op::Api:
      if (c.fmt == Fmt::None) api_fwht(ctx);
      else if (c.fmt == Fmt::Bf16) api_bf16(ctx, c.shape);
      else if (omni) api_cache<OmniFmt>(ctx, c);
      else api_cache<CovFmt>(ctx, c);
      break;
  }
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    const size_t b = std::min(s.find(',', a), s.size());
    if (b > a) out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}
bool listed(const std::vector<std::string>& sel, const std::string& x) {
  return sel.empty() || std::find(sel.begin(), sel.end(), x) != sel.end();
}

void usage(const char* argv0) {
  std::printf(
      "usage: %s [-o OPS] [-f FORMATS] [-b BITS] [-s SHAPES] [--slow] [--list] [--long-batch N] [--long-len N]\n"
      "          [--real-dump FILE]\n"
      "  -o OPS       comma list of fwht, prefill, append, decode, long, real, api, rotated, logits, paged (default: all)\n"
      "  -f FORMATS   comma list of cov, omni, bf16, - (fwht and its api case) (default: all)\n"
      "  -b BITS      comma list of 2, 4, 0 (cases without bits: bf16, fwht, api of fwht/bf16) (default: all)\n"
      "  -s SHAPES    only cases whose shape name contains one of these (comma list)\n"
      "  --slow       include the cases tagged slow (long split); -o long selects them too\n"
      "  --list       print the selected cases and exit (needs no GPU)\n"
      "  --long-batch N, --long-len N   long-split geometry for diagnosis (default 32, 65529)\n"
      "  --real-dump FILE   the dump the real op's smollm2-hd64 cases read (default: $OSCAR_REAL_DUMP; without\n"
      "               either they are skipped); make it with experiments/device/make_smollm2_real_dump.sh\n"
      "Exit status: 0 every selected case passed or skipped (at least one passed); 1 a case failed;\n"
      "77 no CUDA device, or every selected case skipped; 2 bad usage.\n",
      argv0);
}

}  // namespace

// The driver (called by gpu_test_ops.cu's main).
int gpu_test_ops_main(int argc, char** argv) {
  std::vector<std::string> ops, fmts, bits, shapes;
  bool slow = false, list = false;
  if (const char* e = std::getenv("OSCAR_REAL_DUMP")) g_real_dump = e;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage(argv[0]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-o") ops = split(value());
    else if (a == "-f") fmts = split(value());
    else if (a == "-b") bits = split(value());
    else if (a == "-s") shapes = split(value());
    else if (a == "--slow") slow = true;
    else if (a == "--list") list = true;
    else if (a == "--long-batch") g_long_batch = std::atoi(value().c_str());
    else if (a == "--long-len") g_long_len = std::atoi(value().c_str());
    else if (a == "--real-dump") g_real_dump = value();
    else if (a == "-h" || a == "--help") {
      usage(argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "gpu_test_ops: unknown argument %s\n", a.c_str());
      usage(argv[0]);
      return 2;
    }
  }
  if (g_long_batch < 1 || g_long_len < 1) {
    std::fprintf(stderr, "gpu_test_ops: --long-batch and --long-len must be positive\n");
    return 2;
  }
  for (const std::string& o : ops)
    if (!listed({"fwht", "prefill", "append", "decode", "long", "real", "api", "rotated", "logits", "paged"}, o)) {
      std::fprintf(stderr, "gpu_test_ops: unknown op %s (see --help)\n", o.c_str());
      return 2;
    }
  for (const std::string& f : fmts)
    if (!listed({"cov", "omni", "bf16", "-"}, f)) {
      std::fprintf(stderr, "gpu_test_ops: unknown format %s (see --help)\n", f.c_str());
      return 2;
    }
  const bool long_named = std::find(ops.begin(), ops.end(), "long") != ops.end();
  std::vector<Case> sel;
  for (const Case& c : build_table()) {
    if (!listed(ops, op_name(c.op)) || !listed(fmts, fmt_name(c.fmt)) || !listed(bits, std::to_string(c.bits))) continue;
    if (c.shape.slow && !slow && !long_named) continue;
    if (!shapes.empty() &&
        std::none_of(shapes.begin(), shapes.end(), [&](const std::string& x) { return c.shape.name.find(x) != std::string::npos; }))
      continue;
    sel.push_back(c);
  }
  if (list) {
    for (const Case& c : sel) std::printf("%s%s\n", c.name().c_str(), c.shape.slow ? "  [slow]" : "");
    std::printf("%zu case(s)\n", sel.size());
    return 0;
  }
  if (sel.empty()) {
    std::fprintf(stderr, "gpu_test_ops: no case matches the selection (see --list)\n");
    return 2;
  }
  if (oscar_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible; run the GPU tests on a GPU machine (ctest -L gpu)\n");
    return 77;
  }
  int passed = 0, failed = 0, skipped = 0;
  for (const Case& c : sel) {
    Ctx ctx;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      run_case(ctx, c);
    } catch (const std::exception& e) {
      ctx.fail("exception: %s", e.what());
    }
    ctx.cuda(cudaDeviceSynchronize(), "end of case");
    ctx.cuda(cudaGetLastError(), "sticky CUDA error after the case");
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const char* tag = ctx.failures ? "FAIL" : ctx.skipped ? "SKIP" : "ok  ";
    const std::string what = ctx.failures ? std::to_string(ctx.failures) + " failure(s)" + (ctx.info.empty() ? "" : "; " + ctx.info) : ctx.info;
    std::printf("%s %s: %s (%.1f s)\n%s", tag, c.name().c_str(), what.c_str(), sec, ctx.log.c_str());
    std::fflush(stdout);
    (ctx.failures ? failed : ctx.skipped ? skipped : passed) += 1;
  }
  std::printf("%s: %d passed, %d failed, %d skipped\n", failed ? "FAILED" : passed ? "PASSED" : "SKIPPED", passed, failed, skipped);
  return failed ? 1 : passed ? 0 : 77;
}
