// test_omni_twin.cpp: the oscar-omni kernels' CPU twin (omni_twin.h, built only from the shared rules in
// omni_format.h / quant_rules.h) against the lib's reference recipe simulation (cache_sim, preset
// oscar-omni with the rotation left to the caller): for bf16 inputs both give bit-identical dequantized
// keys and values, so the GPU codes that gpu_test_omni checks against the twin are the reference's codes.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "oscar/06_quantize/cache_sim.h"
#include "oscar/float_formats.h"
#include "oscar/06_quantize/recipe_yaml.h"
#include "oscar/05_rotate/rotation.h"
#include "omni_twin.h"

using namespace oscar;

TEST_CASE("oscar-omni kernel twin equals the reference quantizer bit for bit", "[omni]") {
  const int H = 2, D = 128;
  for (int bits : {2, 4}) {
    for (int T : {127, 128, 300, 515}) {
      std::mt19937 rng(bits * 1000 + T);
      std::normal_distribution<float> nd(0.f, 1.f);
      std::vector<uint16_t> kb(size_t(H) * T * D), vb(kb.size());
      for (size_t i = 0; i < kb.size(); ++i) {
        const size_t t = (i / D) % T;
        const float ts = t % 37 == 0 ? 0.05f : t % 41 == 0 ? 6.f : 1.f;  // token norm imbalance
        kb[i] = float_to_bf16_bits((nd(rng) + 0.3f) * ts);
        vb[i] = float_to_bf16_bits(nd(rng) - 0.2f);
      }
      for (int h = 0; h < H; ++h)  // a token with zero keys in every head: norm 0
        for (int c = 0; c < D; ++c) kb[(size_t(h) * T + 5) * D + c] = 0;
      HeadTensor k, v;
      k.heads = v.heads = H;
      k.tokens = v.tokens = T;
      k.head_dim = v.head_dim = D;
      for (uint16_t x : kb) k.data.push_back(bf16_bits_to_float(x));
      for (uint16_t x : vb) v.data.push_back(bf16_bits_to_float(x));
      Recipe r = resolve_recipe(load_preset("oscar-omni").recipe, bits, D);
      r.key_rotation.kind = RotationKind::None;  // the kernels take K/V already rotated
      r.value_rotation.kind = RotationKind::None;
      LayerRotations rot = layer_rotations(r, D, 0, nullptr);
      const SimulatedLayer sim = simulate_layer(r, k, v, rot);
      const int64_t cap = 640;
      const omni_twin::Cache tw = omni_twin::build(kb, vb, {T}, H, T, D, bits, cap);
      const int64_t nb = omnifmt::body_tokens(T), CB = D * bits / 8;
      REQUIRE(sim.segments.body_end == nb);
      int mismatches = 0;
      for (int h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int c = 0; c < D; ++c) {
            float kx, vx;
            if (t < nb) {  // float arithmetic exactly as the lib dequantizes (code * scale + zero, then * norm)
              const uint32_t kp = tw.k_params[(int64_t(h) * (cap / 32) + t / 32) * D + c];
              const uint32_t vp = tw.v_params[(int64_t(h) * cap + t) * (D / 32) + c / 32];
              const float n = half_bits_to_float(tw.k_norms[t]);
              const float ky = float(unpack_code(&tw.k_codes[(int64_t(h) * cap + t) * CB], c, bits)) * half_bits_to_float(uint16_t(kp)) +
                               half_bits_to_float(uint16_t(kp >> 16));
              kx = ky * n;
              vx = float(unpack_code(&tw.v_codes[(int64_t(h) * cap + t) * CB], c, bits)) * half_bits_to_float(uint16_t(vp)) +
                   half_bits_to_float(uint16_t(vp >> 16));
            } else {
              kx = bf16_bits_to_float(tw.k_res[(int64_t(h) * 128 + t - nb) * D + c]);
              vx = bf16_bits_to_float(tw.v_res[(int64_t(h) * 128 + t - nb) * D + c]);
            }
            const float ks = sim.k_hat.head(h)[t * D + c], vs = sim.v_hat.head(h)[t * D + c];
            if (ks != kx || vs != vx) ++mismatches;
          }
      INFO("bits " << bits << " T " << T);
      CHECK(mismatches == 0);
    }
  }
}
