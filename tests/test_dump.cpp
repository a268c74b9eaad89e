// test_dump.cpp: dump round trip (float32 exact, float16 to half precision), per-head reads, and the
// reader's validation of damaged files (test_dump_v2.cpp covers v2's attention attributes and v1 files).
#include <catch2/catch.hpp>

#include <H5Cpp.h>

#include <cmath>
#include <filesystem>

#include "dump_fixture.h"
#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/03_dump/dump.h"
#include "oscar/01_core/error.h"
#include "oscar/float_formats.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/02_model/tokenizers/tokenizer.h"

using namespace oscar;
namespace fs = std::filesystem;

TEST_CASE("dump round trip equals the forward pass's activations", "[dump]") {
  const std::string path = test::small_dump("float32", 96);
  const DumpReader r(path);
  const DumpInfo& I = r.info();
  CHECK(I.model_name == "stories260K");
  CHECK(I.checkpoint_sha256 == "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696");
  CHECK(I.n_layers == 5);
  CHECK(I.n_heads == 8);
  CHECK(I.n_kv_heads == 4);
  CHECK(I.head_dim == 8);
  CHECK(I.token_count == 96);
  CHECK(I.rope_convention == "adjacent-pairs");
  CHECK(I.rope_theta == 10000.0);
  CHECK(I.storage_dtype == "float32");
  CHECK(std::isfinite(I.mean_next_token_loss));
  REQUIRE(r.token_ids().size() == 96);
  CHECK(r.token_ids()[0] == 1);
  REQUIRE(r.token_text().size() == 96);
  CHECK(r.token_text()[0] == "<s>");

  // Recompute the activations and compare every tensor of every layer bit for bit.
  const Checkpoint ck = load_checkpoint(test::stories_model());
  const Model m(ck);
  KvCache cache(ck.config);
  std::vector<LayerDump> want(ck.config.n_layers);
  auto to_head = [&](const MatrixRM& x, int heads) {
    HeadTensor h{heads, static_cast<int>(x.rows()), 8, {}};
    for (int hh = 0; hh < heads; ++hh)
      for (int t = 0; t < x.rows(); ++t)
        for (int c = 0; c < 8; ++c) h.data.push_back(x(t, hh * 8 + c));
    return h;
  };
  m.forward(r.token_ids(), cache, [&](const LayerQKV& a) {
    want[a.layer] = LayerDump{a.layer, to_head(a.q, 8), to_head(a.q_pre, 8), to_head(a.k, 4), to_head(a.k_pre, 4), to_head(a.v, 4)};
  });
  for (int l = 0; l < 5; ++l) {
    const LayerDump d = r.read_layer(l, {"q", "q_pre", "k", "k_pre", "v"});
    CHECK(d.q.data == want[l].q.data);
    CHECK(d.q_pre.data == want[l].q_pre.data);
    CHECK(d.k.data == want[l].k.data);
    CHECK(d.k_pre.data == want[l].k_pre.data);
    CHECK(d.v.data == want[l].v.data);
    const auto head2 = r.read_head(l, "v", 2);
    CHECK(std::equal(head2.begin(), head2.end(), d.v.head(2)));
  }
}

TEST_CASE("float16 dumps store the activations rounded to half precision", "[dump]") {
  const DumpReader a(test::small_dump("float32", 64)), b(test::small_dump("float16", 64));
  CHECK(b.info().storage_dtype == "float16");
  const auto x = a.read_layer(3, {"k"}), y = b.read_layer(3, {"k"});
  REQUIRE(x.k.data.size() == y.k.data.size());
  for (size_t i = 0; i < x.k.data.size(); ++i) REQUIRE(y.k.data[i] == round_to_half(x.k.data[i]));
  CHECK(fs::file_size(test::small_dump("float16", 64)) < fs::file_size(test::small_dump("float32", 64)));
}

// Copies the fixture and applies `edit` to the copy with the HDF5 API.
static std::string damaged(const std::string& name, const std::function<void(H5::H5File&)>& edit) {
  const std::string src = test::small_dump("float32", 96);
  const std::string dst = (test::scratch() / name).string();
  fs::copy_file(src, dst, fs::copy_options::overwrite_existing);
  H5::H5File f(dst, H5F_ACC_RDWR);
  edit(f);
  f.close();
  return dst;
}

TEST_CASE("the reader rejects damaged dumps with a message naming the file", "[dump][bad-input]") {
  SECTION("missing file") { CHECK_THROWS_WITH(DumpReader("/nonexistent/x.h5"), Catch::Contains("no such file")); }
  SECTION("not HDF5") {
    const std::string p = test::scratch_file("garbage.h5", "this is not an HDF5 file at all");
    CHECK_THROWS_WITH(DumpReader(p), Catch::Contains("garbage.h5") && Catch::Contains("not an HDF5 file"));
  }
  SECTION("truncated") {
    const std::string src = test::small_dump("float32", 96);
    const std::string p = (test::scratch() / "truncated.h5").string();
    fs::copy_file(src, p, fs::copy_options::overwrite_existing);
    fs::resize_file(p, fs::file_size(src) / 2);
    // Either the open fails or the first layer read past the end fails: never silent garbage.
    CHECK_THROWS_WITH(
        [&] {
          DumpReader r(p);
          for (int l = 0; l < r.info().n_layers; ++l) r.read_layer(l, {"q", "q_pre", "k", "k_pre", "v"});
        }(),
        Catch::Contains("truncated.h5"));
  }
  SECTION("missing attribute") {
    const auto p = damaged("noattr.h5", [](H5::H5File& f) { f.removeAttr("head_dim"); });
    CHECK_THROWS_WITH(DumpReader(p), Catch::Contains("missing root attribute 'head_dim'"));
  }
  SECTION("attributes disagree with shapes") {
    const auto p = damaged("badshape.h5", [](H5::H5File& f) {
      f.removeAttr("n_kv_heads");
      long long v = 2;
      f.createAttribute("n_kv_heads", H5::PredType::STD_I64LE, H5::DataSpace(H5S_SCALAR)).write(H5::PredType::NATIVE_LLONG, &v);
    });
    CHECK_THROWS_WITH(DumpReader(p), Catch::Contains("has shape [4, 96, 8]") && Catch::Contains("[2, 96, 8]"));
  }
  SECTION("missing layer") {
    const auto p = damaged("nolayer.h5", [](H5::H5File& f) { f.unlink("layer_004"); });
    CHECK_THROWS_WITH(DumpReader(p), Catch::Contains("group /layer_004 is missing"));
  }
  SECTION("NaN in activations") {
    const auto p = damaged("nan.h5", [](H5::H5File& f) {
      H5::DataSet ds = f.openDataSet("layer_002/v");
      std::vector<float> buf(4 * 96 * 8);
      ds.read(buf.data(), H5::PredType::NATIVE_FLOAT);
      buf[(1 * 96 + 17) * 8 + 3] = NAN;
      ds.write(buf.data(), H5::PredType::NATIVE_FLOAT);
    });
    const DumpReader r(p);
    CHECK_NOTHROW(r.read_layer(1, {"v"}));
    CHECK_THROWS_WITH(r.read_layer(2, {"v"}), Catch::Contains("nan.h5") && Catch::Contains("layer 2 dataset 'v'") &&
                                                  Catch::Contains("head 1, token 17, channel 3"));
  }
}
