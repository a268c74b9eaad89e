// test_gguf_dump_smollm2.cpp: oscar-dump's pipeline (dump_passage) on the real SmolLM2-135M-Instruct GGUF:
// the tokenizer and model come from the file, the passage is Revelation's first 1024 tokens as the shared
// data README defines it (no BOS), and the dump records the ids, token texts, RoPE convention and base, and
// the mean loss of ../shared/data/README.md (2.805 nats, within 0.01). Skipped where the file is absent.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include "oscar/03_dump/dump.h"
#include "oscar/03_dump/dump_passage.h"
#include "skip.h"
#include "test_data.h"

TEST_CASE("oscar-dump on SmolLM2's GGUF: Revelation, 1024 tokens", "[gguf][dump][optional-data]") {
  const std::string gguf = oscar::test::smollm2_gguf();
  OSCAR_SKIP_UNLESS_EXISTS(gguf, oscar::test::smollm2_model().fetch);
  const auto out = std::filesystem::temp_directory_path() / "oscar-test-smollm2-rev.h5";
  oscar::DumpRequest r;
  r.model = gguf;
  r.text = oscar::test::kjv_text();
  r.offset = -404;
  r.tokens = 1024;
  r.out = out.string();
  r.dtype = "float16";
  r.progress = false;
  const oscar::DumpSummary s = oscar::dump_passage(r);
  CHECK(s.mean_loss == Approx(2.805).margin(0.01));
  const oscar::DumpReader d(out.string());
  const auto& ids = d.token_ids();
  REQUIRE(ids.size() == 1024);
  const std::vector<int> first16{504, 26639, 282, 3886, 1926, 28, 527, 1839, 4502, 15032, 1272, 28, 288, 1041, 103, 15032};
  CHECK(std::vector<int>(ids.begin(), ids.begin() + 16) == first16);
  CHECK(d.token_text().at(0) == "The");
  CHECK(d.info().rope_convention == "adjacent-pairs");
  CHECK(d.info().rope_theta == 100000.0);
  CHECK(d.info().n_layers == 30);
  CHECK(d.info().n_kv_heads == 3);
  CHECK(d.info().head_dim == 64);
  CHECK(d.info().checkpoint_sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");
  std::filesystem::remove(out);
}
