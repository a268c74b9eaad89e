// test_dump_v2.cpp: dump format v2: a round trip of every root and per-layer attribute and the sinks, with
// and without pre-RoPE tensors; a v1 file read with v1's implicit attention; the reader's validation of the new attributes; oscar-dump's v2 attributes; and a dump
// without pre-RoPE tensors analyzed and swept, its attention description reaching the metrics.
#include <catch2/catch.hpp>

#include <H5Cpp.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <filesystem>
#include <random>

#include "dump_fixture.h"
#include "oscar/01_core/error.h"
#include "oscar/01_core/h5_attrs.h"
#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/03_dump/dump.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/04_stats/analyze.h"
#include "oscar/12_sweep/sweep.h"
#include "same_fields.h"
#include "test_data.h"

using namespace oscar;
namespace fs = std::filesystem;

namespace {

constexpr int kLayers = 3, kHeads = 4, kKv = 2, kHd = 8;

// The layers of the synthetic dump: standard attention; gemma/gpt-oss-like (scaling, window, soft-cap,
// half-split partial RoPE, sinks); a NoPE layer.
std::vector<LayerAttention> synthetic_layers() {
  std::vector<LayerAttention> L(kLayers);
  L[0] = LayerAttention::standard(kHd, "adjacent-pairs", 10000.0);
  L[1].scaling = 0.3;
  L[1].sliding_window = 5;
  L[1].softcap = 2.0;
  L[1].rope_convention = "half-split";
  L[1].rotary_dim = 4;
  L[1].rope_theta = 1e6;
  L[1].sinks = {0.5f, -1.0f, 2.0f, 0.25f};
  L[2].scaling = 0.125;
  L[2].rope_convention = "none";
  L[2].rotary_dim = 0;
  L[2].rope_theta = 10000.0;
  return L;
}

MatrixRM random_matrix(int rows, int cols, std::mt19937& rng, float sd) {
  std::normal_distribution<float> n(0.0f, sd);
  MatrixRM m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
  return m;
}

struct Synthetic {
  std::vector<MatrixRM> q, qp, k, kp, v;
};

// Writes a synthetic v2 dump of T tokens; the same seed gives the same tensors whatever the attention.
Synthetic write_synthetic(const std::string& path, bool pre, const std::vector<LayerAttention>& layers, int T = 12,
                          int n_layers = kLayers) {
  DumpInfo I;
  I.model_name = "synthetic";
  I.checkpoint_sha256 = std::string(64, 'a');
  I.n_layers = n_layers;
  I.n_heads = kHeads;
  I.n_kv_heads = kKv;
  I.head_dim = kHd;
  I.text_source = "random";
  I.token_count = T;
  I.architecture = "gpt_oss";
  I.config_json = R"({"model_type":"gpt_oss","num_hidden_layers":3,"sliding_window":5})";
  I.has_pre_rope = pre;
  I.layers = layers;
  std::vector<int> ids(T);
  for (int t = 0; t < T; ++t) ids[t] = t + 1;
  DumpWriter w(path, I, ids, {});
  std::mt19937 rng(42);
  Synthetic s;
  const MatrixRM empty;
  for (int l = 0; l < n_layers; ++l) {
    s.q.push_back(random_matrix(T, kHeads * kHd, rng, 1.0f));
    s.qp.push_back(random_matrix(T, kHeads * kHd, rng, 1.0f));
    s.k.push_back(random_matrix(T, kKv * kHd, rng, 1.5f));
    s.kp.push_back(random_matrix(T, kKv * kHd, rng, 1.0f));
    s.v.push_back(random_matrix(T, kKv * kHd, rng, 1.0f));
    w.write_layer(LayerQKV{l, 0, pre ? s.qp[l] : empty, pre ? s.kp[l] : empty, s.q[l], s.k[l], s.v[l]});
  }
  w.finish();
  return s;
}

void check_same(const LayerAttention& a, const LayerAttention& b) {
  using A = LayerAttention;
  test::check_same_fields(a, b, &A::scaling, &A::sliding_window, &A::softcap, &A::rope_convention, &A::rotary_dim,
                          &A::rope_theta, &A::sinks);
}

std::string copy_of(const std::string& src, const std::string& name) {
  const std::string dst = (test::scratch() / name).string();
  fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
  return dst;
}

}  // namespace

TEST_CASE("v2 round trip: every attribute, the sinks, with and without pre-RoPE tensors", "[dump][v2]") {
  const std::vector<LayerAttention> L = synthetic_layers();
  for (const bool pre : {true, false}) {
    INFO("has_pre_rope " << pre);
    const std::string path = (test::scratch() / (pre ? "v2_pre.h5" : "v2_nopre.h5")).string();
    const Synthetic s = write_synthetic(path, pre, L);
    const DumpReader r(path);
    const DumpInfo& I = r.info();
    CHECK(I.format_version == 2);
    CHECK(I.architecture == "gpt_oss");
    CHECK(nlohmann::json::parse(I.config_json)["sliding_window"] == 5);
    CHECK(I.has_pre_rope == pre);
    REQUIRE(I.layers.size() == kLayers);
    for (int l = 0; l < kLayers; ++l) check_same(I.attention(l), L[l]);
    const DumpLayerSource src(r);
    check_same(src.attention(1), L[1]);
    for (int l = 0; l < kLayers; ++l) {
      const LayerDump d = r.read_layer(l, {"q", "k", "v"});
      CHECK(d.k.data == to_head_major(s.k[l], kKv, kHd).data);
      CHECK(d.q.data == to_head_major(s.q[l], kHeads, kHd).data);
      CHECK(d.v.data == to_head_major(s.v[l], kKv, kHd).data);
    }
    {  // the file itself: format_version 2, has_pre_rope, q_pre present exactly when pre, sinks only in layer 1
      h5::silence();
      H5::H5File f(path, H5F_ACC_RDONLY);
      long long v = 0, hp = -1;
      f.openAttribute("format_version").read(H5::PredType::NATIVE_LLONG, &v);
      f.openAttribute("has_pre_rope").read(H5::PredType::NATIVE_LLONG, &hp);
      CHECK(v == 2);
      CHECK(hp == (pre ? 1 : 0));
      for (int l = 0; l < kLayers; ++l) {
        const H5::Group g = f.openGroup(fmt::format("layer_{:03d}", l));
        CHECK(g.nameExists("q_pre") == pre);
        CHECK(g.nameExists("k_pre") == pre);
        CHECK(g.nameExists("sinks") == (l == 1));
      }
    }
    if (pre) {
      const LayerDump d = r.read_layer(2, {"q_pre", "k_pre"});
      CHECK(d.k_pre.data == to_head_major(s.kp[2], kKv, kHd).data);
      CHECK(d.q_pre.data == to_head_major(s.qp[2], kHeads, kHd).data);
    } else {
      CHECK_THROWS_WITH(r.read_layer(0, {"k_pre", "k"}),
                        Catch::Contains("v2_nopre.h5") && Catch::Contains("has_pre_rope=0") && Catch::Contains("'k_pre'"));
      CHECK_THROWS_WITH(r.read_head(0, "q_pre", 1), Catch::Contains("has_pre_rope=0"));
      CHECK_THROWS_WITH(src.layer(1, {"q_pre"}), Catch::Contains("has_pre_rope=0"));
    }
  }
}

TEST_CASE("a v1 file still opens, with v1's implicit attention", "[dump][v2][v1]") {
  // A v2 file taken back to v1: no v2 root attribute, no per-layer attribute, no sinks, format_version 1,
  // the root's RoPE half-split with base 500000. (core.tsv's analyze-foreign-dump-numbers reads an h5py-written v1 file.)
  const std::string v2 = (test::scratch() / "for_v1.h5").string();
  const Synthetic s = write_synthetic(v2, true, synthetic_layers());
  const std::string path = copy_of(v2, "v1.h5");
  {
    h5::silence();
    H5::H5File f(path, H5F_ACC_RDWR);
    for (const char* a : {"architecture", "config_json", "has_pre_rope", "format_version", "rope_convention", "rope_theta"})
      f.removeAttr(a);
    h5::put_i64(f, "format_version", 1);
    h5::put_str(f, "rope_convention", "half-split");
    h5::put_f64(f, "rope_theta", 500000.0);
    for (int l = 0; l < kLayers; ++l) {
      H5::Group g = f.openGroup(fmt::format("layer_{:03d}", l));
      for (const char* a : {"scaling", "sliding_window", "softcap", "rope_convention", "rotary_dim", "rope_theta"}) g.removeAttr(a);
      if (g.nameExists("sinks")) g.unlink("sinks");
    }
  }
  const DumpReader r(path);
  const DumpInfo& I = r.info();
  CHECK(I.format_version == 1);
  CHECK(I.architecture == "llama");
  CHECK(I.config_json.empty());
  CHECK(I.has_pre_rope);
  CHECK(I.layers.empty());
  for (int l = 0; l < kLayers; ++l) {
    const LayerAttention a = I.attention(l);
    CHECK(a.scaling == 1.0 / std::sqrt(8.0));
    CHECK(a.sliding_window == 0);
    CHECK(a.softcap == 0);
    CHECK(a.rope_convention == "half-split");  // the root's
    CHECK(a.rope_theta == 500000.0);
    CHECK(a.rotary_dim == kHd);
    CHECK(a.sinks.empty());
  }
  CHECK(r.read_layer(1, {"q_pre", "k_pre", "k"}).k_pre.data == to_head_major(s.kp[1], kKv, kHd).data);
}

TEST_CASE("oscar-dump and the in-memory source describe the model's attention", "[dump][v2]") {
  const DumpLayerSource d(test::small_dump());
  const DumpInfo& I = d.info();
  CHECK(I.format_version == 2);
  CHECK(I.architecture == "llama");
  CHECK(I.has_pre_rope);
  const nlohmann::json j = nlohmann::json::parse(I.config_json);
  CHECK(j["n_layers"] == I.n_layers);
  CHECK(j["head_dim"] == I.head_dim);
  CHECK(j["architecture"] == "llama");
  // The model run in memory over the same tokens describes the same attention and the same model.
  const Checkpoint ck = load_checkpoint(test::stories_model());
  const Model model(ck);
  PassageOrigin o = dump_origin(d.reader());
  o.where = "in memory";
  const ModelLayerSource mem(model, o, "same tokens", {"q"});
  CHECK(mem.info().architecture == I.architecture);
  CHECK(mem.info().config_json == I.config_json);
  CHECK(mem.info().has_pre_rope);
  for (int l = 0; l < I.n_layers; ++l) {
    const LayerAttention a = d.attention(l);
    check_same(mem.attention(l), a);
    CHECK(a.scaling == Approx(1.0 / std::sqrt(double(I.head_dim))).epsilon(1e-15));
    CHECK(a.sliding_window == 0);
    CHECK(a.softcap == 0);
    CHECK(a.rope_convention == I.rope_convention);
    CHECK(a.rotary_dim == I.head_dim);
    CHECK(a.sinks.empty());
  }
}

TEST_CASE("the reader rejects bad v2 attributes with a message naming file, layer and attribute", "[dump][v2][bad-input]") {
  const std::string good = (test::scratch() / "v2_good.h5").string();
  write_synthetic(good, true, synthetic_layers());
  h5::silence();
  const auto edit = [&](const std::string& name, const std::function<void(H5::H5File&)>& f) {
    const std::string p = copy_of(good, name);
    H5::H5File h(p, H5F_ACC_RDWR);
    f(h);
    h.close();
    return p;
  };
  const auto set_f64 = [](H5::H5Object& o, const char* n, double v) {
    if (o.attrExists(n)) o.removeAttr(n);
    h5::put_f64(o, n, v);
  };
  const auto set_i64 = [](H5::H5Object& o, const char* n, long long v) {
    if (o.attrExists(n)) o.removeAttr(n);
    h5::put_i64(o, n, v);
  };
  const auto set_str = [](H5::H5Object& o, const char* n, const std::string& v) {
    if (o.attrExists(n)) o.removeAttr(n);
    h5::put_str(o, n, v);
  };
  SECTION("version 3") {
    const auto p = edit("v3.h5", [&](H5::H5File& f) { set_i64(f, "format_version", 3); });
    CHECK_THROWS_WITH(DumpReader(p), Catch::Contains("v3.h5") && Catch::Contains("version 3 is not supported (this build reads 1 and 2)"));
  }
  SECTION("a missing per-layer attribute") {
    const auto p = edit("noscaling.h5", [&](H5::H5File& f) { f.openGroup("layer_002").removeAttr("scaling"); });
    CHECK_THROWS_WITH(DumpReader(p), Catch::Contains("noscaling.h5: /layer_002 lacks attribute 'scaling'"));
  }
  SECTION("bad values") {
    struct Case {
      const char* name;
      std::function<void(H5::Group&)> f;
      const char* msg;
    } cases[] = {
        {"scaling0.h5", [&](H5::Group& g) { set_f64(g, "scaling", 0.0); }, "scaling=0 must be a positive finite number"},
        {"scalingnan.h5", [&](H5::Group& g) { set_f64(g, "scaling", NAN); }, "scaling=nan must be"},
        {"window.h5", [&](H5::Group& g) { set_i64(g, "sliding_window", -1); }, "sliding_window=-1"},
        {"softcap.h5", [&](H5::Group& g) { set_f64(g, "softcap", -2.0); }, "softcap=-2"},
        {"conv.h5", [&](H5::Group& g) { set_str(g, "rope_convention", "neox"); }, "rope_convention='neox' is unknown"},
        {"rotodd.h5", [&](H5::Group& g) { set_i64(g, "rotary_dim", 3); }, "rotary_dim=3 must be an even number"},
        {"rotbig.h5", [&](H5::Group& g) { set_i64(g, "rotary_dim", 10); }, "rotary_dim=10"},
        {"sinkshape.h5",
         [&](H5::Group& g) {
           g.unlink("sinks");
           hsize_t n = 3;
           const float x[3] = {1, 2, 3};
           g.createDataSet("sinks", H5::PredType::IEEE_F32LE, H5::DataSpace(1, &n)).write(x, H5::PredType::NATIVE_FLOAT);
         },
         "/layer_001/sinks must be a float vector [n_heads=4], found 3 values"},
        {"sinknan.h5",
         [&](H5::Group& g) {
           const float x[4] = {1, NAN, 3, 4};
           g.openDataSet("sinks").write(x, H5::PredType::NATIVE_FLOAT);
         },
         "'sinks' holds a non-finite value (nan) at head 1"},
    };
    for (const Case& c : cases) {
      INFO(c.name);
      const auto p = edit(c.name, [&](H5::H5File& f) {
        H5::Group g = f.openGroup("layer_001");
        c.f(g);
      });
      CHECK_THROWS_WITH(DumpReader(p), Catch::Contains(std::string(c.name) + ": /layer_001") && Catch::Contains(c.msg));
    }
  }
  SECTION("has_pre_rope=1 without q_pre, and pre-RoPE data with has_pre_rope=0") {
    const auto p = edit("noqpre.h5", [&](H5::H5File& f) { f.openGroup("layer_000").unlink("q_pre"); });
    CHECK_THROWS_WITH(DumpReader(p), Catch::Contains("noqpre.h5: dataset /layer_000/q_pre is missing although has_pre_rope=1"));
    const auto p2 = edit("prezero.h5", [&](H5::H5File& f) { set_i64(f, "has_pre_rope", 0); });
    CHECK_THROWS_WITH(DumpReader(p2), Catch::Contains("prezero.h5: /layer_000/q_pre is present but has_pre_rope=0"));
  }
  SECTION("config_json that is not JSON, and a missing root attribute") {
    const auto p = edit("badjson.h5", [&](H5::H5File& f) { set_str(f, "config_json", "{\"n_layers\": 3,"); });
    CHECK_THROWS_WITH(DumpReader(p), Catch::Contains("badjson.h5: root attribute config_json is not a JSON object"));
    const auto p2 = edit("noarch.h5", [&](H5::H5File& f) { f.removeAttr("architecture"); });
    CHECK_THROWS_WITH(DumpReader(p2), Catch::Contains("noarch.h5: missing root attribute 'architecture'"));
  }
}

TEST_CASE("a dump without pre-RoPE tensors is analyzed and swept, with its own attention", "[dump][v2][sweep]") {
  // Two dumps with the same tensors: one records standard attention, the other a window, soft-cap and sinks.
  constexpr int T = 80, NL = 2;
  std::vector<LayerAttention> plain(NL, LayerAttention::standard(kHd)), gpt(NL);
  for (LayerAttention& a : gpt) {
    a = LayerAttention::standard(kHd, "half-split");
    a.scaling = 0.6;
    a.sliding_window = 16;
    a.softcap = 3.0;
    a.sinks = {1.0f, 0.0f, -1.0f, 2.0f};
  }
  const std::string p_plain = (test::scratch() / "nopre_plain.h5").string(), p_gpt = (test::scratch() / "nopre_gpt.h5").string();
  write_synthetic(p_plain, false, plain, T, NL);
  write_synthetic(p_gpt, false, gpt, T, NL);

  const DumpReader r(p_gpt);
  const TniReport rep = analyze_dump(r, AnalyzeOptions{3.5, false});
  CHECK(rep.rows.size() == static_cast<size_t>(NL * kKv * 2));  // K and V only
  for (const TniRow& row : rep.rows) CHECK(row.tensor != "k_pre");

  const std::string out = (test::scratch() / "nopre-sweep").string();
  const auto cfg_text = [&](const std::string& path) {
    return "output: " + out + "\nqueries: 40\nbits: [2]\ndumps:\n  - path: " + path + "\nrecipes:\n  - naive\n";
  };
  const SweepResult a = run_sweep(load_sweep_config(test::scratch_file("nopre_plain.yaml", cfg_text(p_plain))), false);
  const SweepResult b = run_sweep(load_sweep_config(test::scratch_file("nopre_gpt.yaml", cfg_text(p_gpt))), false);
  REQUIRE(a.rows.size() == static_cast<size_t>(NL * kKv));
  REQUIRE(b.rows.size() == a.rows.size());
  // The simulated caches are the same (same key error); the attention metrics differ by the recorded attention.
  for (size_t i = 0; i < a.rows.size(); ++i) {
    CHECK(a.rows[i].f.k_rel_mse == b.rows[i].f.k_rel_mse);
    CHECK(std::abs(a.rows[i].f.kl - b.rows[i].f.kl) > 1e-3 * std::abs(a.rows[i].f.kl));
    CHECK(std::abs(a.rows[i].f.logit_rel_mse - b.rows[i].f.logit_rel_mse) > 1e-6);
  }
}
