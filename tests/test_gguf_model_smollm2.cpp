// test_gguf_model_smollm2.cpp: the GGUF forward pass on a real pretrained model, SmolLM2-135M-Instruct
// Q4_1 (data/fetch_smollm2.sh), against the facts of ../shared/data/README.md (Hugging Face transformers
// on the same file): the greedy continuation of "The capital of France is" exactly, and the mean
// next-token losses of the Revelation and Genesis passages within 0.01 nats. The passages' token ids
// are tests/fixtures/smollm2_*_ids.bin (written by make_smollm2_ids.py with HF tokenizers; their
// sha256s are checked here against the README's). Prints the forward and decode timings. When the file
// is absent the test prints "SKIPPED: SmolLM2 ..." and CTest reports it as skipped. The loss cases (2048-token
// passages) are [slow]: the full suite runs them, the quick and the sanitized suites leave them out.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <omp.h>

#include "oscar/01_core/file_io.h"
#include "oscar/02_model/forward/gguf_model.h"
#include "test_data.h"

using namespace oscar;

namespace {

const GgufModel& smollm2() {
  static const GgufModel g = GgufModel::load(oscar::test::smollm2_gguf());
  return g;
}

std::vector<int> passage_ids(const std::string& name, const std::string& sha) {
  const auto raw = read_file_bytes(std::string(OSCAR_DATA_DIR) + "/../tests/fixtures/smollm2_" + name + "_ids.bin");
  REQUIRE(raw.size() == 2048 * 4);
  REQUIRE(sha256_hex(raw.data(), raw.size()) == sha);  // ../shared/data/README.md
  std::vector<int> ids(2048);
  std::memcpy(ids.data(), raw.data(), raw.size());
  return ids;
}

// One forward pass over the passage in chunks of 512 (as oscar-dump runs it), timed.
MatrixRM chunked_logits(const Model& m, const std::vector<int>& ids, double& secs) {
  KvCache cache(m.config());
  MatrixRM logits(ids.size(), m.config().vocab_size);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t p = 0; p < ids.size(); p += 512) {
    const size_t n = std::min<size_t>(512, ids.size() - p);
    logits.middleRows(p, n) = m.forward(std::span<const int>(ids).subspan(p, n), cache);
  }
  secs = test::seconds_since(t0);
  return logits;
}

void check_passage(const std::string& name, const std::string& sha, double loss1024, double loss2048) {
  INFO(name);
  const Model& m = smollm2().model();
  const auto ids = passage_ids(name, sha);
  double secs = 0;
  const MatrixRM logits = chunked_logits(m, ids, secs);
  const double l1 = mean_next_token_loss(logits.topRows(1024), std::span<const int>(ids).first(1024));
  const double l2 = mean_next_token_loss(logits, ids);
  std::printf("SmolLM2 %s: loss first 1024 %.4f (README %.4f), 2048 %.4f (README %.4f); 2048 tokens in chunks of "
              "512: %.2f s on %d threads\n",
              name.c_str(), l1, loss1024, l2, loss2048, secs, omp_get_max_threads());
  CHECK(std::abs(l1 - loss1024) < 0.01);
  CHECK(std::abs(l2 - loss2048) < 0.01);
}

}  // namespace

TEST_CASE("SmolLM2 GGUF: config and identity", "[gguf][model][real]") {
  if (!test::present(test::smollm2_model())) return;
  const GgufModel& g = smollm2();
  const ModelConfig& c = g.config();
  CHECK(c.architecture == "llama");
  CHECK(c.n_layers == 30);
  CHECK(c.dim == 576);
  CHECK(c.hidden_dim == 1536);
  CHECK(c.head_dim() == 64);
  CHECK(c.kv_dim() == 192);
  CHECK(c.rope_theta == 100000.0);
  CHECK(c.rope_convention == "adjacent-pairs");
  CHECK(c.seq_len == 8192);
  CHECK(c.shared_classifier);
  CHECK(g.model().weights().classifier.type_name() == "Q8_0");
  CHECK(g.model().weights().layers[0].wq.type_name() == "Q4_1");
  CHECK(g.name() == "SmolLM2-135M-Instruct.Q4_1");
  CHECK(g.sha256() == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");
  CHECK(g.storage() == "gguf Q8_0 (1 tensor), F32 (61 tensors), Q4_1 (210 tensors)");  // types in file order
}

TEST_CASE("SmolLM2 GGUF: greedy continuation of 'The capital of France is'", "[gguf][model][real]") {
  if (!test::present(test::smollm2_model())) return;
  const std::vector<int> prompt = {504, 3575, 282, 4649, 314};
  const std::vector<int> expect = {7042, 30, 198, 198, 504, 2988, 314, 42, 216, 34, 32, 33,
                                   40,   29, 32,  33,  29,  34,   34,  216, 33, 34, 42, 33};
  CHECK(generate_greedy(smollm2().model(), prompt, 24) == expect);
}

TEST_CASE("SmolLM2 GGUF: Revelation losses", "[gguf][model][real][slow]") {
  if (!test::present(test::smollm2_model())) return;
  check_passage("revelation", "c470784bac4d48fc1f7ae582de8f7c7f890021a75ee477129ed910d86cb1a0a3", 2.805, 2.7413);
}

TEST_CASE("SmolLM2 GGUF: Genesis losses", "[gguf][model][real][slow]") {
  if (!test::present(test::smollm2_model())) return;
  check_passage("genesis", "0faeb170687fa97eb9c7ba77c5c4b2d749d981feb920fa4b04fa148c756eca31", 1.2679, 1.5498);
}

TEST_CASE("SmolLM2 GGUF: decode steps of one token", "[gguf][model][real]") {
  if (!test::present(test::smollm2_model())) return;
  const Model& m = smollm2().model();
  const auto ids = passage_ids("genesis", "0faeb170687fa97eb9c7ba77c5c4b2d749d981feb920fa4b04fa148c756eca31");
  // 200 steps after a 56-token prefix; the step logits equal the chunked forward's.
  KvCache cache(m.config());
  const MatrixRM prefix = m.forward(std::span<const int>(ids).first(56), cache);
  MatrixRM steps(200, m.config().vocab_size);
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < 200; ++t) steps.row(t) = m.forward(std::span<const int>(ids).subspan(56 + t, 1), cache);
  const double secs = test::seconds_since(t0);
  KvCache c2(m.config());
  const MatrixRM whole = m.forward(std::span<const int>(ids).first(256), c2);
  const double diff = (steps - whole.bottomRows(200)).cwiseAbs().maxCoeff() / whole.cwiseAbs().maxCoeff();
  std::printf("SmolLM2: 200 decode steps in %.2f s (%.1f ms/token) on %d threads; max relative difference to the "
              "chunked forward %.2e\n",
              secs, 1000 * secs / 200, omp_get_max_threads(), diff);
  CHECK(diff < 1e-4);
  (void)prefix;
}
