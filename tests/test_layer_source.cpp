// test_layer_source.cpp: the one layer-source interface fed by the model (in memory) and by a dump: the
// same layers and the same covariance fit for the same passage; and the content-based calibration checks
// (a renamed copy, a float16 re-dump, an overlapping offset are the same data; a renamed checkpoint is the
// same model).
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include "dump_fixture.h"
#include "oscar/01_core/error.h"
#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/02_model/tokenizers/tokenizer.h"
#include "oscar/03_dump/dump.h"
#include "oscar/03_dump/layer_source.h"
#include "oscar/06_rotate/rotation.h"
#include "same_fields.h"

using namespace oscar;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

struct Stories {
  Checkpoint ck = load_checkpoint(test::stories_model());
  Tokenizer tok = Tokenizer::load(test::stories_tokenizer(), ck.config.vocab_size);
  std::vector<std::string> lines = read_lines(test::kjv_text());
  Model model{ck};
  mutable std::map<std::pair<long, int>, PassageOrigin> cache;  // select_passage encodes much of the text: once each
  PassageOrigin origin(long offset, int tokens) const {
    auto it = cache.find({offset, tokens});
    if (it == cache.end()) {
      const Passage p = select_passage(test::kjv_text(), lines, offset, tokens, tok);
      it = cache.emplace(std::pair{offset, tokens}, passage_origin(p, lines, ck, tok, "kjv.txt.gz offset " + std::to_string(offset))).first;
    }
    return it->second;
  }
};
const Stories& stories() {
  static const Stories s;
  return s;
}

std::string dump_of(const std::string& name, const std::string& model, long offset, int tokens, const std::string& dtype = "float32") {
  const std::string path = (test::scratch() / name).string();
  if (!fs::exists(path)) dump_passage(DumpRequest{model, test::stories_tokenizer(), test::kjv_text(), path, offset, tokens, dtype, false});
  return path;
}

PassageOrigin tokens_only(PassageOrigin o) {  // what a dump knows: no text range
  o.text_sha256.clear();
  o.first_line = o.last_line = -1;
  return o;
}

}  // namespace

TEST_CASE("model-fed and dump-fed layer sources give the same layers and the same covariance fit", "[layer-source]") {
  const Stories& s = stories();
  const std::string path = test::small_dump("float32", 96);  // stories260K, KJV lines 0.., 96 tokens
  const DumpLayerSource dump(path);
  const ModelLayerSource mem(s.model, s.origin(0, 96), "kjv.txt.gz lines 0..");
  const DumpInfo &a = dump.info(), &b = mem.info();
  test::check_same_fields(a, b, &DumpInfo::model_name, &DumpInfo::checkpoint_sha256, &DumpInfo::n_layers,
                          &DumpInfo::n_heads, &DumpInfo::n_kv_heads, &DumpInfo::head_dim, &DumpInfo::token_count);
  CHECK(dump.origin().token_ids == mem.origin().token_ids);
  CHECK(mem.mean_next_token_loss() == Approx(a.mean_next_token_loss).epsilon(1e-6));
  const std::vector<std::string> all{"q", "q_pre", "k", "k_pre", "v"};
  for (int l = 0; l < a.n_layers; ++l) {
    const LayerDump x = dump.layer(l, all), y = mem.layer(l, all);
    INFO("layer " << l);
    CHECK(y.layer == l);
    for (auto [p, q] : {std::pair{&x.q, &y.q}, {&x.q_pre, &y.q_pre}, {&x.k, &y.k}, {&x.k_pre, &y.k_pre}, {&x.v, &y.v}}) {
      REQUIRE(p->heads == q->heads);
      REQUIRE(p->tokens == 96);
      REQUIRE(q->tokens == 96);
      REQUIRE(p->head_dim == q->head_dim);
      CHECK(p->data == q->data);  // the same float32 values: the dump stores what the forward pass produced
    }
  }
  const CovarianceRotations from_dump = fit_covariance_rotations(dump, false);
  const CovarianceRotations from_mem = fit_covariance_rotations(mem, false);
  REQUIRE(from_dump.n_layers == from_mem.n_layers);
  for (int l = 0; l < from_dump.n_layers; ++l) {
    CHECK(from_dump.key_cov[l] == from_mem.key_cov[l]);
    CHECK(from_dump.value_cov[l] == from_mem.value_cov[l]);
    CHECK(from_dump.key_eigenvectors[l] == from_mem.key_eigenvectors[l]);
    CHECK(from_dump.value_eigenvectors[l] == from_mem.value_eigenvectors[l]);
    CHECK(from_dump.key_eigenvalues[l] == from_mem.key_eigenvalues[l]);
  }
  CHECK(from_mem.calibration.token_ids == dump.origin().token_ids);
  CHECK(from_mem.calibration.text_sha256 == text_lines_sha256(s.lines));
  CHECK(from_dump.calibration.text_sha256.empty());

  SECTION("a float16 dump of the same passage: the same layers within float16 rounding") {
    const DumpLayerSource half(dump_of("half96.h5", test::stories_model(), 0, 96, "float16"));
    const LayerDump x = half.layer(2, {"k"}), y = mem.layer(2, {"k"});
    double worst = 0;
    for (size_t i = 0; i < x.k.data.size(); ++i) worst = std::max(worst, std::abs(double(x.k.data[i]) - y.k.data[i]) / (1e-3 + std::abs(y.k.data[i])));
    CHECK(worst < 1e-3);
    CHECK(worst > 0);  // float16 rounding did happen
  }
  SECTION("only the kept tensors, only existing layers") {
    const ModelLayerSource kv(s.model, s.origin(0, 32), "short", {"k", "v"});
    CHECK(kv.layer(0, {"k", "v"}).k.tokens == 32);
    CHECK_THROWS_WITH(kv.layer(0, {"q"}), Contains("'q' was not kept"));
    CHECK_THROWS_WITH(kv.layer(5, {"k"}), Contains("layer 5 out of range"));
    CHECK_THROWS_WITH(kv.layer(0, {"x"}), Contains("unknown layer tensor 'x'"));
    CHECK_THROWS_WITH(ModelLayerSource(s.model, s.origin(0, 32), "short", {"kk"}), Contains("unknown layer tensor 'kk'"));
  }
}

TEST_CASE("a passage's origin: its line range, from the line breaks its tokens decode to", "[layer-source]") {
  const Stories& s = stories();
  for (long offset : {0L, 300L, -404L})
    for (int tokens : {8, 96, 300}) {
      const PassageOrigin o = s.origin(offset, tokens);
      INFO("offset " << offset << " tokens " << tokens << ": lines " << o.first_line << ".." << o.last_line);
      std::string text;  // the passage as text (run.c drops the dummy-prefix space after BOS)
      for (size_t i = 1; i < o.token_ids.size(); ++i) text += s.tok.decode_piece(o.token_ids[i - 1], o.token_ids[i]);
      std::string joined, before_last;
      for (long l = o.first_line; l <= o.last_line; ++l) {
        if (l == o.last_line) before_last = joined;
        joined += (l > o.first_line ? "\n" : "") + s.lines[l];
      }
      CHECK(joined.substr(0, text.size()) == text);  // the passage lies in lines first..last
      CHECK(text.size() > before_last.size());       // and reaches into the last of them
    }
}

TEST_CASE("same data by content: identical, contained, shared runs, overlapping lines", "[layer-source][leak]") {
  const Stories& s = stories();
  const PassageOrigin gen = s.origin(0, 96), rev = s.origin(-404, 96);
  CHECK(same_data_reason(gen, rev).empty());
  CHECK(same_data_reason(gen, s.origin(300, 128)).empty());
  CHECK_THAT(same_data_reason(gen, gen), Contains("identical"));
  CHECK_THAT(same_data_reason(tokens_only(gen), tokens_only(s.origin(0, 128))), Contains("the second contains all 95 tokens of the first"));
  CHECK_THAT(same_data_reason(tokens_only(s.origin(0, 160)), tokens_only(s.origin(1, 160))), Contains("share a run of"));
  CHECK_THAT(same_data_reason(s.origin(0, 160), s.origin(1, 160)), Contains("overlapping lines"));
  // Adjacent but disjoint lines of the same text are other data.
  const PassageOrigin first = s.origin(0, 64);
  CHECK(same_data_reason(first, s.origin(first.last_line + 1, 64)).empty());
  // The bundled sweeps' and evaluations' passages: Genesis vs held-out Revelation, 2048 tokens each, share no run.
  const Tokenizer& tok = s.tok;
  const Passage g = select_passage(test::kjv_text(), s.lines, 0, 2048, tok), r = select_passage(test::kjv_text(), s.lines, -404, 2048, tok);
  CHECK(same_data_reason(tokens_only(passage_origin(g, s.lines, s.ck, tok, "g")), tokens_only(passage_origin(r, s.lines, s.ck, tok, "r"))).empty());
  // Other text with the same line numbers is other data.
  PassageOrigin other_text = s.origin(300, 64);
  other_text.text_sha256 = "another text";
  other_text.first_line = gen.first_line, other_text.last_line = gen.last_line;
  CHECK(same_data_reason(gen, other_text).empty());
}

TEST_CASE("calibration checks compare content, not file names", "[layer-source][leak]") {
  const std::string rev = dump_of("rev96.h5", test::stories_model(), -404, 96);
  const DumpReader ev(rev);
  const DumpInfo& I = ev.info();
  const PassageOrigin ev_origin = dump_origin(ev);

  SECTION("a byte-identical copy of the evaluated dump under another name is refused") {
    const std::string copy = (test::scratch() / "calibration_copy.h5").string();
    fs::copy_file(rev, copy, fs::copy_options::overwrite_existing);
    CHECK_THROWS_WITH(check_calibration_source(DumpLayerSource(copy), I, ev_origin),
                      Contains("calibration_copy.h5") && Contains("same data") && Contains("identical"));
  }
  SECTION("a float16 re-dump of the same passage is refused") {
    const std::string half = dump_of("rev96_f16.h5", test::stories_model(), -404, 96, "float16");
    CHECK_THROWS_WITH(check_calibration_source(DumpLayerSource(half), I, ev_origin), Contains("same data"));
  }
  SECTION("a longer dump that contains the evaluated passage is refused") {
    const std::string longer = dump_of("rev160.h5", test::stories_model(), -404, 160);
    CHECK_THROWS_WITH(check_calibration_source(DumpLayerSource(longer), I, ev_origin), Contains("the first contains all 95 tokens of the second"));
  }
  SECTION("a dump starting one line later (overlapping text) is refused") {
    const DumpReader ev160(dump_of("rev160.h5", test::stories_model(), -404, 160));  // lines 30698..30700
    const std::string shifted = dump_of("rev160_shift.h5", test::stories_model(), -403, 160);
    CHECK_THROWS_WITH(check_calibration_source(DumpLayerSource(shifted), ev160.info(), dump_origin(ev160)), Contains("share a run of"));
  }
  SECTION("other text from the same checkpoint under another file name is accepted") {
    const fs::path renamed = test::scratch() / "renamed-stories.bin";
    fs::copy_file(test::stories_model(), renamed, fs::copy_options::overwrite_existing);
    const DumpLayerSource cal(dump_of("gen_renamed.h5", renamed.string(), 0, 96));
    CHECK(cal.info().model_name != I.model_name);
    CHECK(cal.info().checkpoint_sha256 == I.checkpoint_sha256);
    CHECK_NOTHROW(check_calibration_source(cal, I, ev_origin));
    const CovarianceRotations c = fit_covariance_rotations(cal, false);
    CHECK_NOTHROW(check_calibration_matches(c, I, ev_origin));
  }
  SECTION("another model is refused") {
    DumpInfo other = I;
    other.checkpoint_sha256 = std::string(64, 'a');
    const DumpLayerSource cal(dump_of("gen96.h5", test::stories_model(), 0, 96));
    CHECK_THROWS_WITH(check_calibration_source(cal, other, ev_origin), Contains("same model") && Contains("aaaaaaaaaaaa"));
  }
  SECTION("rotations saved to a file keep the calibration's tokens, so the check still works after loading") {
    const CovarianceRotations c = fit_covariance_rotations(DumpLayerSource(rev), false);
    const std::string p = (test::scratch() / "rev_rotations.h5").string();
    save_covariance_rotations(c, p);
    CHECK_THROWS_WITH(check_calibration_matches(load_covariance_rotations(p), I, ev_origin), Contains("same data"));
    // In-memory rotations also keep the text range.
    const Stories& s = stories();
    const CovarianceRotations m = fit_covariance_rotations(ModelLayerSource(s.model, s.origin(0, 64), "gen", {"q", "k", "v"}), false);
    save_covariance_rotations(m, p);
    const CovarianceRotations back = load_covariance_rotations(p);
    CHECK(back.calibration.text_sha256 == m.calibration.text_sha256);
    CHECK(back.calibration.first_line == 0);
    CHECK(back.calibration.last_line == m.calibration.last_line);
    CHECK_THROWS_WITH(check_calibration_matches(back, I, s.origin(m.calibration.last_line, 64)), Contains("overlapping lines"));
  }
}
