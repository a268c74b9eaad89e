// test_bad_input.cpp: damaged checkpoints, passages beyond the text or the context, and dumps that
// must not leave a file under the final name when they fail.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "oscar/02_model/formats/checkpoint.h"
#include "oscar/03_dump/dump_passage.h"
#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/02_model/tokenizers/tokenizer.h"
#include "test_data.h"

using namespace oscar;
namespace fs = std::filesystem;

TEST_CASE("checkpoints that disagree with their header", "[bad-input][checkpoint]") {
  auto bytes = read_file_bytes(test::stories_model());
  SECTION("truncated") {
    bytes.resize(bytes.size() - 100);
    CHECK_THROWS_WITH(load_checkpoint(test::scratch_file("trunc.bin", bytes)),
                      Catch::Contains("trunc.bin") && Catch::Contains("disagrees with its header"));
  }
  SECTION("extra bytes") {
    bytes.push_back(0);
    CHECK_THROWS_WITH(load_checkpoint(test::scratch_file("long.bin", bytes)), Catch::Contains("disagrees with its header"));
  }
  SECTION("implausible header") {
    const int32_t bad = 7;  // n_heads = 7 does not divide dim = 64
    std::memcpy(bytes.data() + 12, &bad, 4);
    CHECK_THROWS_WITH(load_checkpoint(test::scratch_file("heads.bin", bytes)), Catch::Contains("n_heads must divide dim"));
  }
  SECTION("not a checkpoint") {
    CHECK_THROWS_WITH(load_checkpoint(test::scratch_file("tiny.bin", std::vector<uint8_t>{1, 2, 3})), Catch::Contains("too short"));
  }
  SECTION("corrupt float16 parts") {
    auto f16 = read_file_bytes(test::hd128_model());
    f16[f16.size() / 2] ^= 0x40;
    CHECK_THROWS_WITH(load_checkpoint(test::scratch_file("corrupt.f16", f16)), Catch::Contains("corrupt.f16") && Catch::Contains("sha256"));
  }
}

TEST_CASE("passages beyond the text or the model's context", "[bad-input][passage]") {
  const Tokenizer tok = Tokenizer::load(test::stories_tokenizer(), 512);
  const auto lines = read_lines(test::kjv_text());
  CHECK(lines.size() == 31102);
  CHECK_THROWS_WITH(select_passage(test::kjv_text(), lines, -2, 512, tok),
                    Catch::Contains("--tokens 512 is beyond the text") && Catch::Contains("kjv.txt.gz"));
  CHECK_THROWS_WITH(select_passage(test::kjv_text(), lines, 40000, 16, tok), Catch::Contains("--offset 40000 is outside the text"));
  DumpRequest r{test::stories_model(), test::stories_tokenizer(), test::kjv_text(), (test::scratch() / "ctx.h5").string()};
  r.tokens = 600;  // stories260K's seq_len is 512
  r.progress = false;
  CHECK_THROWS_WITH(dump_passage(r), Catch::Contains("beyond the model's context") && Catch::Contains("seq_len 512"));
  CHECK_FALSE(fs::exists(r.out));
}

TEST_CASE("a failed dump leaves no file behind", "[bad-input][dump]") {
  DumpRequest r{test::stories_model(), test::stories_tokenizer(), test::kjv_text(), (test::scratch() / "fail.h5").string()};
  r.offset = -1;
  r.tokens = 400;  // the last verse has far fewer tokens
  r.progress = false;
  CHECK_THROWS(dump_passage(r));
  CHECK_FALSE(fs::exists(r.out));
  for (const auto& e : fs::directory_iterator(test::scratch()))
    CHECK(e.path().filename().string().find("fail.h5.tmp") == std::string::npos);
}

TEST_CASE("atomic output is removed unless committed", "[file_io]") {
  const fs::path p = test::scratch() / "atomic.txt";
  {
    AtomicOutput o(p);
    std::ofstream(o.temp_path()) << "partial";
    REQUIRE(fs::exists(o.temp_path()));
  }
  CHECK_FALSE(fs::exists(p));
  {
    AtomicOutput o(p);
    std::ofstream(o.temp_path()) << "complete";
    o.commit();
  }
  CHECK(fs::exists(p));
  // a missing folder is created with the output; a path under a file is refused
  const fs::path deep = p.parent_path() / "made" / "deeper" / "x.h5";
  {
    AtomicOutput o(deep);
    std::ofstream(o.temp_path()) << "complete";
    o.commit();
  }
  CHECK(fs::exists(deep));
  CHECK_THROWS_WITH(AtomicOutput(p / "x.h5"), Catch::Contains("is a file, not a folder"));
}
