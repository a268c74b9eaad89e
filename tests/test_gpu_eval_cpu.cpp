// test_gpu_eval_cpu.cpp: the CPU side of oscar-eval --gpu: which recipes the CUDA kernels accept (and
// the message for the others), the "no CUDA device" failure where none is present, and the attention
// seam (KvCache::attend) that GpuKvCache plugs into: the model calls it once per layer and chunk with
// the chunk's queries, a cache that declines leaves the results bit-identical, and a cache that attends
// itself under the documented contract (causal, head-major, scale 1/sqrt(head_dim)) reproduces the
// model's own attention, for multi-token chunks too.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>

#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/11_eval/eval.h"
#include "oscar/13_report/eval_tables.h"
#include "oscar/09_cache/gpu_kv_cache.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/05_recipe/recipe_yaml.h"
#include "oscar/02_model/tokenizers/tokenizer.h"
#include "oscar_kernels.h"
#include "eval_request.h"
#include "test_data.h"

using namespace oscar;
using Catch::Contains;

namespace {

ModelConfig hd128_config() {  // kjv-llama-hd128's attention shape (the rest is not used here)
  ModelConfig c;
  c.dim = 512, c.n_layers = 6, c.n_heads = 4, c.n_kv_heads = 2, c.vocab_size = 512, c.seq_len = 2048;
  return c;
}

std::string reason(const std::string& preset, int bits, const ModelConfig& c = hd128_config()) {
  return gpu_unsupported_reason(resolve_recipe(load_preset(preset).recipe, bits, c.head_dim()), c);
}

// kjv-llama-hd128 on 64 tokens with --gpu, these presets.
EvalRequest gpu_request(const std::vector<std::string>& recipes) {
  EvalRequest req = test::hd128_request(64);
  req.gpu = true;
  for (const auto& r : recipes) req.recipes.push_back(load_preset(r));
  return req;
}

// Records the seam's calls; declines them (the model attends on the CPU).
struct RecordingCache : KvCache {
  using KvCache::KvCache;
  std::vector<std::array<int, 4>> calls;  // layer, query rows, length() at the call, filled rows of the layer
  bool attend(int layer, const MatrixRM& q, MatrixRM&) override {
    calls.push_back({layer, static_cast<int>(q.rows()), length(), rows_[layer]});
    return false;
  }
};

// Attends itself, in double, over the full-precision rows, as the seam's contract says.
struct SelfAttendingCache : KvCache {
  SelfAttendingCache(const ModelConfig& c) : KvCache(c), cfg(c) {}
  ModelConfig cfg;
  bool attend(int layer, const MatrixRM& q, MatrixRM& out) override {
    const int hd = cfg.head_dim(), group = cfg.n_heads / cfg.n_kv_heads, p0 = length();
    const MatrixRM &K = keys(layer), &V = values(layer);
    for (int t = 0; t < q.rows(); ++t)
      for (int h = 0; h < cfg.n_heads; ++h) {
        const int kvh = h / group, last = p0 + t;
        std::vector<double> s(last + 1);
        double m = -INFINITY, sum = 0;
        for (int j = 0; j <= last; ++j) {
          double d = 0;
          for (int c = 0; c < hd; ++c) d += double(q(t, h * hd + c)) * K(j, kvh * hd + c);
          s[j] = d / std::sqrt(double(hd));
          m = std::max(m, s[j]);
        }
        for (double& x : s) sum += (x = std::exp(x - m));
        for (int c = 0; c < hd; ++c) {
          double o = 0;
          for (int j = 0; j <= last; ++j) o += s[j] * V(j, kvh * hd + c);
          out(t, h * hd + c) = static_cast<float>(o / sum);
        }
      }
    return true;
  }
};

}  // namespace

TEST_CASE("the CUDA kernels take oscar-cov at 2 and 4 bits on head_dim 128, nothing else", "[gpu-eval]") {
  CHECK(reason("oscar-cov", 2).empty());
  CHECK(reason("oscar-cov", 4).empty());
  CHECK_THAT(reason("oscar-cov", 3), Contains("3 bits"));
  CHECK_THAT(reason("oscar-cov-fp32", 2), Contains("fp32 scales"));
  CHECK_THAT(reason("kivi", 2), Contains("keys have a float zero point"));
  CHECK(reason("oscar-omni", 2).empty());  // the oscar-omni kernel format
  CHECK(reason("oscar-omni", 4).empty());
  CHECK_THAT(reason("oscar-omni", 3), Contains("3 bits"));
  CHECK_THAT(reason("naive", 2), Contains("symmetrically"));
  CHECK_THAT(reason("quarot", 2), Contains("widen their range to include 0"));
  CHECK_THAT(reason("turboquant", 2), Contains("Lloyd-Max"));
  ModelConfig small = hd128_config();
  small.dim = 64 * 4;  // head_dim 64
  CHECK_THAT(gpu_unsupported_reason(resolve_recipe(load_preset("oscar-cov").recipe, 2, 128), small),
             Contains("keys in groups of 128 channels, the kernels use 64"));
  CHECK(gpu_unsupported_reason(resolve_recipe(load_preset("oscar-cov").recipe, 2, 64), small).empty());
  ModelConfig odd = hd128_config();
  odd.dim = 96 * 4;  // head_dim 96: no kernel
  CHECK_THAT(gpu_unsupported_reason(resolve_recipe(load_preset("kivi").recipe, 2, 96), odd), Contains("head_dim is 96"));
  ModelConfig gqa = hd128_config();
  gqa.dim = 128 * 34, gqa.n_heads = 34;  // 17 query heads per KV head
  CHECK_THAT(reason("oscar-cov", 2, gqa), Contains("at most 16"));
  gqa.dim = 128 * 32, gqa.n_heads = 32;  // 16
  CHECK(reason("oscar-cov", 2, gqa).empty());
  // A recipe with the kernel's format under another name passes; the windows and clips come from it.
  Recipe r = resolve_recipe(load_preset("oscar-cov").recipe, 2, 128);
  r.windows.key = r.windows.value = TensorWindows{0, 16, 0};
  r.key.clip_ratio = 1.0f;
  CHECK(gpu_unsupported_reason(r, hd128_config()).empty());
  r.key.clip_mode = r.value.clip_mode = ClipMode::Ratio;  // the ratio clip and half-even rounding: the cache's fields
  r.key.rounding = r.value.rounding = Rounding::HalfEven;
  CHECK(gpu_unsupported_reason(r, hd128_config()).empty());
  r.value.clip_mode = ClipMode::Quantile;
  CHECK_THAT(gpu_unsupported_reason(r, hd128_config()), Contains("clipped in different modes"));
  r.value.clip_mode = ClipMode::Ratio;
  r.value.zero_point = ZeroPoint::Integer;
  CHECK_THAT(gpu_unsupported_reason(r, hd128_config()), Contains("integer zero point"));
  r.value.zero_point = ZeroPoint::Float;
  r.value.range_with_zero = true;
  CHECK_THAT(gpu_unsupported_reason(r, hd128_config()), Contains("include 0"));
  r.value.range_with_zero = false;
  r.windows.value.recent = 32;
  CHECK_THAT(gpu_unsupported_reason(r, hd128_config()), Contains("windows of their own"));
  r.windows.value.recent = 16;
  // oscar-omni runs on its kernels with OScaR's integer zero point; the float-zero variant does not
  CHECK(reason("oscar-omni", 2).empty());
  CHECK_THAT(reason("oscar-omni-fz", 2), Contains("float zero point"));
  r.windows.window_dtype = ScaleDtype::F16;
  CHECK_THAT(gpu_unsupported_reason(r, hd128_config()), Contains("fp16 windows"));
  CHECK(eval_label("oscar-cov@2", true) == "oscar-cov@2 (gpu)");
  CHECK(eval_label("fp16", false) == "fp16");
}

TEST_CASE("oscar-eval --gpu refuses an unsupported recipe, or a machine without a GPU, before any work", "[gpu-eval]") {
  CHECK_THROWS_WITH(run_eval(gpu_request({"fp16", "kivi"})),
                    Contains("--gpu: recipe 'kivi@2' is not supported by the CUDA kernels") &&
                        Contains("supported: oscar-cov (head_dim 64, 128, 256)") && Contains("run it without --gpu"));
  EvalRequest st = gpu_request({"oscar-cov"});
  st.model = test::stories_model();  // head_dim 8
  st.recipes[0].recipe.key.group = st.recipes[0].recipe.value.group = 0;
  CHECK_THROWS_WITH(run_eval(st), Contains("recipe 'oscar-cov@2' is not supported") && Contains("head_dim is 8"));
  if (oscar_device_count() == 0) {
    CHECK_THROWS_WITH(run_eval(gpu_request({"fp16", "oscar-cov"})), Contains("no CUDA device") && Contains("run without --gpu"));
    const ModelConfig c = hd128_config();
    CHECK_THROWS_WITH(GpuKvCache(c, resolve_recipe(load_preset("oscar-cov").recipe, 2, 128), nullptr, 64),
                      Contains("calibration"));  // the recipe is checked first, then its calibration, then the device
    Recipe had = resolve_recipe(load_preset("oscar-cov").recipe, 2, 128);
    had.key_rotation.kind = had.value_rotation.kind = RotationKind::Hadamard;
    CHECK_THROWS_WITH(GpuKvCache(c, had, nullptr, 64), Contains("no CUDA device"));
  } else {
    WARN("a CUDA device is present: the no-device message is not checked here (tests/gpu_test_eval runs the GPU path)");
  }
}

TEST_CASE("the attention seam: calls per layer and chunk; declining keeps results bit-identical; the contract", "[gpu-eval][model]") {
  const Checkpoint ck = load_checkpoint(test::stories_model());
  const Tokenizer tok = Tokenizer::load(test::stories_tokenizer(), ck.config.vocab_size);
  const auto lines = read_lines(test::kjv_text());
  const Passage p = select_passage(test::kjv_text(), lines, 0, 48, tok);
  const Model m(ck);
  const std::span<const int> all(p.tokens), chunk = all.first(40);

  KvCache plain(ck.config);
  RecordingCache rec(ck.config);
  SelfAttendingCache self(ck.config);
  MatrixRM a = m.forward(chunk, plain), b = m.forward(chunk, rec), c = m.forward(chunk, self);
  for (size_t t = 40; t < all.size(); ++t) {  // then single tokens
    const auto one = all.subspan(t, 1);
    a = m.forward(one, plain), b = m.forward(one, rec), c = m.forward(one, self);
  }
  CHECK(a == b);  // the declining cache attends through the CPU path: bit-identical
  CHECK((a - c).cwiseAbs().maxCoeff() < 1e-3f * std::max(1.0f, a.cwiseAbs().maxCoeff()));
  REQUIRE(rec.calls.size() == static_cast<size_t>(ck.config.n_layers) * (1 + all.size() - 40));
  CHECK(rec.calls[0] == std::array<int, 4>{0, 40, 0, 40});  // appended before the call; length() = first position
  CHECK(rec.calls.back() == std::array<int, 4>{ck.config.n_layers - 1, 1, 47, 48});
  // The whole passage in one chunk through the self-attending cache: the same losses as the CPU path.
  KvCache p1(ck.config);
  SelfAttendingCache p2(ck.config);
  CHECK(std::abs(mean_next_token_loss(m.forward(all, p1), all) - mean_next_token_loss(m.forward(all, p2), all)) < 1e-4);
}
