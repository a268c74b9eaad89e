// test_heldout_loss.cpp: the slowest known fact of kjv-llama-hd128: mean next-token loss 1.898 nats on
// the held-out last 3% of the KJV token stream (' ' + verses joined by '\n', encoded as llama2.c does),
// here over every non-overlapping window, laid out as in training: inputs BOS + 2047 tokens, targets the
// 2048 tokens that follow BOS. The reference 1.898 is the trainer's estimate over 32 windows at random
// starts (a seed-dependent sample); covering all 67,219 held-out tokens once gives 1.883, so the bound
// here is 0.03 nats (the other facts, in test_model.cpp, hold to 0.01).
#include <catch2/catch.hpp>

#include <chrono>

#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/01_core/file_io.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/02_model/tokenizers/tokenizer.h"
#include "test_data.h"

using namespace oscar;

TEST_CASE("kjv-llama-hd128 on the held-out 3% of the token stream", "[model][facts][slow]") {
  const auto t0 = std::chrono::steady_clock::now();
  const Checkpoint ck = load_checkpoint(test::hd128_model());
  const Tokenizer tok = Tokenizer::load(test::stories_tokenizer(), ck.config.vocab_size);
  std::string text = read_text_file(test::kjv_text());
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const std::vector<int> ids = tok.encode(text, false, false);  // dummy-prefix space included
  REQUIRE(ids.size() > 2000000);
  const size_t n_val = ids.size() * 3 / 100;  // int(len * 0.03), as the training script split it
  CHECK(n_val == 67219);                      // the training report's val_tokens
  const Model m(ck);
  double sum = 0;
  long count = 0;
  for (size_t start = ids.size() - n_val; start + 2048 <= ids.size(); start += 2048) {
    std::vector<int> seq{Tokenizer::kBos};  // BOS + 2048 targets; the model sees the first 2048 tokens
    seq.insert(seq.end(), ids.begin() + static_cast<long>(start), ids.begin() + static_cast<long>(start) + 2048);
    KvCache cache(ck.config);
    const auto losses = next_token_losses(m.forward(std::span<const int>(seq.data(), 2048), cache), seq);
    for (double l : losses) sum += l;
    count += static_cast<long>(losses.size());
  }
  const double mean = sum / static_cast<double>(count);
  WARN("held-out loss " << mean << " nats over " << count << " predictions in "
                        << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
  CHECK(mean == Approx(1.898).margin(0.03));
}
