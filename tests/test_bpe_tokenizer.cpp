// test_bpe_tokenizer.cpp: BpeTokenizer on (1) the bundled stories260K vocabulary as a SentencePiece-style
// llama VocabSpec, which must give exactly llama2.c's ids (oscar::Tokenizer) on every KJV line; (2) a tiny
// hand-made GPT-2 byte-level vocabulary whose expected ids are derived by hand in the comments; (3) specs
// that cannot be used.
#include <catch2/catch.hpp>

#include <algorithm>

#include "oscar/01_core/error.h"
#include "oscar/02_model/tokenizers/bpe_pretokenizer.h"
#include "oscar/02_model/tokenizers/bpe_tokenizer.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/02_model/tokenizers/tokenizer.h"
#include "test_data.h"

using oscar::BpeTokenizer;
using oscar::Tokenizer;
using oscar::VocabSpec;
using V = std::vector<int>;

namespace {

const BpeTokenizer& stories_spm() {
  static const BpeTokenizer t(oscar::vocab_spec_from_llama2c(Tokenizer::load(oscar::test::stories_tokenizer(), 512)),
                              "tok512.bin");
  return t;
}

// GPT-2's byte alphabet, written out independently of the library: printable Latin-1 stands for itself,
// the other bytes take U+0100.. in order.
std::string byte_char(int b) {
  int cp = b, extra = 256;
  const auto self = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255); };
  if (!self(b)) {
    for (int x = 0; x < b; ++x) extra += !self(x);
    cp = extra;
  }
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Tokens 0..255: the byte alphabet in byte order (so a lone byte's id is its value: ' ' = 32 "Ġ",
// '\n' = 10 "Ċ"); then one token per merge, 256 + rank; then "xyz" (272), a token no merge makes.
// é is C3 A9 = "Ã©". Merges by rank:
//   0 Ġ t  1 h e  2 Ġt he  3 ' s  4 ' t  5 Ġ Ġ  6 1 2  7 Ã ©  8 c a  9 ca f  10 caf Ã©  11 Ċ Ċ
//   12 e e  13 b c  14 a b  15 ' T
VocabSpec tiny_gpt2(const std::string& pre) {
  VocabSpec s = oscar::vocab_spec_defaults("gpt2", pre);
  s.bos = s.eos = -1;
  s.add_bos = false;
  for (int b = 0; b < 256; ++b) s.tokens.push_back(byte_char(b));
  const std::string C3 = byte_char(0xC3), A9 = byte_char(0xA9), G = byte_char(' '), NL = byte_char('\n');
  const std::vector<std::pair<std::string, std::string>> m = {
      {G, "t"}, {"h", "e"}, {G + "t", "he"}, {"'", "s"}, {"'", "t"}, {G, G}, {"1", "2"}, {C3, A9},
      {"c", "a"}, {"ca", "f"}, {"caf", C3 + A9}, {NL, NL}, {"e", "e"}, {"b", "c"}, {"a", "b"}, {"'", "T"}};
  for (const auto& [l, r] : m) {
    s.merges.push_back(l + " " + r);
    s.tokens.push_back(l + r);
  }
  s.tokens.push_back("xyz");
  return s;
}

}  // namespace

TEST_CASE("llama SPM encoding equals llama2.c's on every KJV line", "[bpe_tokenizer][spm]") {
  const Tokenizer ref = Tokenizer::load(oscar::test::stories_tokenizer(), 512);
  const BpeTokenizer& spm = stories_spm();
  CHECK(spm.spec().add_bos);
  CHECK(spm.vocab_size() == 512);
  const auto lines = oscar::read_lines(oscar::test::kjv_text());
  REQUIRE(lines.size() == 31102);
  size_t tokens = 0, mismatches = 0;
  for (const std::string& l : lines) {
    const V a = ref.encode(l, true, false), b = spm.encode(l);
    tokens += a.size();
    if (a != b && ++mismatches <= 3) CHECK(a == b);  // show the first few differences in full
  }
  CHECK(mismatches == 0);
  CHECK(tokens > 1000000);
  // Multi-line stretches (newlines become <0x0A> byte tokens) and the text's first 20,000 characters.
  for (size_t first = 0; first + 25 < lines.size(); first += 1531) {
    std::string chunk;
    for (size_t i = first; i < first + 25; ++i) chunk += (i > first ? "\n" : "") + lines[i];
    CHECK(ref.encode(chunk, true, false) == spm.encode(chunk));
  }
  std::string head;
  for (size_t i = 0; head.size() < 20000; ++i) head += (i ? "\n" : "") + lines[i];
  CHECK(ref.encode(head, true, false) == spm.encode(head));
}

TEST_CASE("llama SPM: byte fallback, empty text, decode", "[bpe_tokenizer][spm]") {
  const Tokenizer ref = Tokenizer::load(oscar::test::stories_tokenizer(), 512);
  const BpeTokenizer& spm = stories_spm();
  // Accents, a dash, a check mark and CJK are missing from the 512-token vocabulary: their bytes
  // become <0xNN> tokens (id = byte + 3 in this file); tab and newline too.
  const std::string u = "H\xc3\xa9llo w\xc3\xb6rld \xe2\x80\x94 na\xc3\xafve caf\xc3\xa9 \xe2\x9c\x93 \xe6\x97\xa5\xe6\x9c\xac\n\tend";
  const V ids = spm.encode(u);
  CHECK(ids == ref.encode(u, true, false));
  CHECK(ids == V{1, 320, 485, 306, 414, 263, 198, 185, 420, 341, 410, 481, 297, 412, 198, 178, 360, 280,
                 412, 431, 485, 410, 229, 159, 150, 410, 233, 154, 168, 233, 159, 175, 13, 12, 367});
  CHECK(spm.decode(ids) == "<s>" + u);
  CHECK(spm.decode(spm.encode_text(u)) == u);  // the added leading space is dropped again
  CHECK(spm.encode("") == V{1});
  CHECK(spm.encode_text("").empty());
  CHECK(spm.piece(13) == "\n");
  CHECK(spm.piece(1) == "<s>");
  CHECK(spm.find("\xe2\x96\x81the") >= 0);  // spaces are U+2581 in the vocabulary
  CHECK(spm.piece(spm.find("\xe2\x96\x81the")) == " the");
  CHECK_THROWS_WITH(spm.piece(512), Catch::Contains("outside the vocabulary of 512"));
  // Without the space prefix, "the" alone is not preceded by U+2581.
  VocabSpec s = spm.spec();
  s.add_space_prefix = false;
  s.add_bos = false;
  const BpeTokenizer raw(std::move(s));
  const V a = raw.encode("the"), b = spm.encode_text("the");
  CHECK(a != b);
  CHECK(raw.decode(a) == "the");
}

TEST_CASE("gpt2 BPE: merges by rank, leftmost first, whole words", "[bpe_tokenizer][gpt2]") {
  const BpeTokenizer t(tiny_gpt2("gpt2"));
  CHECK(t.encode(" the") == V{258});         // Ġ t -> Ġt (0), h e -> he (1), Ġt he -> Ġthe (2)
  CHECK(t.encode("the") == V{116, 257});     // no "t he" merge
  CHECK(t.encode("abc") == V{97, 269});      // b c (13) beats a b (14) although further right
  CHECK(t.encode("eee") == V{268, 101});     // equal ranks: leftmost pair first
  CHECK(t.encode("eeee") == V{268, 268});
  CHECK(t.encode("") == V{});
  CHECK(t.encode("a") == V{97});
}

TEST_CASE("gpt2 BPE: pre-tokenizers split digits, contractions and whitespace as named", "[bpe_tokenizer][gpt2]") {
  const BpeTokenizer gpt2(tiny_gpt2("gpt2")), smollm(tiny_gpt2("smollm")), llama3(tiny_gpt2("llama-bpe")),
      qwen2(tiny_gpt2("qwen2"));
  // "the cat's 12345": words the | Ġcat | 's | Ġ12345 (gpt2); smollm splits every digit first, leaving
  // "Ġ" alone; Ġcat = Ġ ca t (c a is rank 8, "ca t" no merge).
  const std::string s = "the cat's 12345";
  CHECK(gpt2.encode(s) == V{116, 257, 32, 264, 116, 259, 32, 262, 51, 52, 53});
  CHECK(smollm.encode(s) == V{116, 257, 32, 264, 116, 259, 32, 49, 50, 51, 52, 53});
  // Digits: gpt2 keeps a run (1 2 merges twice), llama-bpe cuts groups of 3 (121|2), qwen2 and smollm
  // single digits.
  CHECK(gpt2.encode("1212") == V{262, 262});
  CHECK(llama3.encode("1212") == V{262, 49, 50});
  CHECK(qwen2.encode("1212") == V{49, 50, 49, 50});
  CHECK(smollm.encode("1212") == V{49, 50, 49, 50});
  // Contractions: gpt2's are lower-case only ("'" and "T" apart), llama-bpe's ignore case ('T, rank 15).
  CHECK(gpt2.encode("DON'T") == V{68, 79, 78, 39, 84});
  CHECK(llama3.encode("DON'T") == V{68, 79, 78, 271});
  CHECK(gpt2.encode("don't") == V{100, 111, 110, 260});
  // Spaces: a run keeps its last space for the next word: a | ĠĠ | Ġb.
  CHECK(gpt2.encode("a   b") == V{97, 261, 32, 98});
  CHECK(smollm.encode("a   b") == V{97, 261, 32, 98});
  // Newlines: gpt2 takes "\n" (its look-ahead keeps the last one) then "\n"; llama-bpe takes the run
  // "\n\n" (Ċ Ċ, rank 11).
  CHECK(gpt2.encode("a\n\nb") == V{97, 10, 10, 98});
  CHECK(llama3.encode("a\n\nb") == V{97, 267, 98});
  CHECK(gpt2.encode("a  b\n\n c") == V{97, 32, 32, 98, 267, 32, 99});
  // llama-bpe does not split a word that is a token by itself (ignore_merges): "xyz" is id 272.
  CHECK(llama3.encode("xyz") == V{272});
  CHECK(gpt2.encode("xyz") == V{120, 121, 122});
}

TEST_CASE("gpt2 BPE: Unicode letters, CJK and emoji are bytes in the GPT-2 alphabet", "[bpe_tokenizer][gpt2]") {
  const BpeTokenizer t(tiny_gpt2("smollm"));
  // " café": é is a letter (\p{L}), so the word is Ġcafé: Ã © (7), c a (8), ca f (9), caf é (10).
  CHECK(t.encode("un caf\xc3\xa9") == V{117, 110, 32, 266});
  // 日本 (E6 97 A5 E6 9C AC) is one word of letters; " 👍!" (F0 9F 91 8D) one word of symbols.
  const std::string cjk = "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x91\x8d!";
  CHECK(t.encode(cjk) == V{230, 151, 165, 230, 156, 172, 32, 240, 159, 145, 141, 33});
  CHECK(t.piece(266) == "caf\xc3\xa9");
  CHECK(t.piece(32) == " ");
  CHECK(t.piece(10) == "\n");
  for (const std::string& x : {cjk, std::string("un caf\xc3\xa9"), std::string("a  b\n\n c 1212 DON'T"),
                               std::string("\xff\xfe invalid \xc3 utf8")})
    CHECK(t.decode(t.encode(x)) == x);
}

TEST_CASE("parse_special turns special tokens' texts into their ids, leftmost-longest", "[bpe_tokenizer]") {
  VocabSpec s = tiny_gpt2("gpt2");
  s.tokens.push_back("<|x|>");   // 273, control
  s.tokens.push_back("<|x|>y");  // 274, user-defined
  s.token_types.assign(s.tokens.size(), oscar::kTokNormal);
  s.token_types[273] = oscar::kTokControl;
  s.token_types[274] = oscar::kTokUserDefined;
  const BpeTokenizer t(s);
  CHECK(t.encode("a<|x|>yb<|x|>", true) == V{97, 274, 98, 273});
  // As plain text: a | <| | x | |> | yb | <| | x | |>
  CHECK(t.encode("a<|x|>yb<|x|>") == V{97, 60, 124, 120, 124, 62, 121, 98, 60, 124, 120, 124, 62});
  CHECK(t.decode({97, 274, 98, 273}) == "a<|x|>yb<|x|>");
  // llama: "<s>" is the control token 1 and each plain stretch gets its own space prefix.
  const BpeTokenizer& spm = stories_spm();
  V want{1, 1};
  for (int id : spm.encode_text("Once upon")) want.push_back(id);
  want.push_back(2);
  for (int id : spm.encode_text("a time")) want.push_back(id);
  CHECK(spm.encode("<s>Once upon</s>a time", true) == want);
}

TEST_CASE("gpt2 BPE: long words, long whitespace runs and invalid UTF-8", "[bpe_tokenizer][gpt2]") {
  const BpeTokenizer t(tiny_gpt2("llama-bpe"));
  // One word of a million e's: e e (rank 12) pairs them from the left: 500,000 x "ee".
  const V ids = t.encode(std::string(1000000, 'e'));
  CHECK(ids.size() == 500000);
  CHECK(std::all_of(ids.begin(), ids.end(), [](int id) { return id == 268; }));
  // A million spaces before a letter: the run minus its last space (999,999: 499,999 ĠĠ and a Ġ), then
  // Ġx as Ġ x (no such merge).
  const V sp = t.encode(std::string(1000000, ' ') + "x");
  REQUIRE(sp.size() == 500002);
  CHECK((sp[0] == 261 && sp[499998] == 261 && sp[499999] == 32 && sp[500000] == 32 && sp[500001] == 120));
  // Bytes that are not UTF-8 still encode byte by byte and decode back.
  std::string junk;
  for (int i = 0; i < 100000; ++i) junk += static_cast<char>((i * 7919 + 13) & 0xFF);
  CHECK(t.decode(t.encode(junk)) == junk);
}

TEST_CASE("pre-tokenizer pieces cover the text", "[bpe_tokenizer][gpt2]") {
  const oscar::BpePretokenizer p("smollm", "test");
  std::vector<std::string_view> out;
  p.split("Hello world! 2018-01-22 \xe6\x97\xa5\xe6\x9c\xac  x\n", out);
  std::vector<std::string> got(out.begin(), out.end());
  CHECK(got == std::vector<std::string>{"Hello", " world", "!", " ", "2", "0", "1", "8", "-", "0", "1", "-", "2",
                                        "2", " \xe6\x97\xa5\xe6\x9c\xac", " ", " x", "\n"});
}

// Expected pieces from Hugging Face tokenizers 0.23.3 (Split with the tokenizer.json regex, isolated, then
// ByteLevel without regex; gpt2: ByteLevel's own regex). The same comparison over the whole KJV gave no
// difference for any of the four names.
TEST_CASE("pre-tokenizers split like Hugging Face tokenizers", "[bpe_tokenizer][gpt2]") {
  using S = std::vector<std::string>;
  const auto pieces = [](const char* pre, const std::string& text) {
    std::vector<std::string_view> v;
    oscar::BpePretokenizer(pre, "test").split(text, v);
    return S(v.begin(), v.end());
  };
  const std::string a = "I'm sure they've said 'DON'T' \u2014 it's 3.14159 or 2,048,000.\n\n\tTabs\r\nand CRLF  ";
  const std::string b = "(hello) [world]... 12345678 \u00e9t\u00e9\n\n\n  x";
  CHECK(pieces("llama-bpe", a) == S{"I", "'m", " sure", " they", "'ve", " said", " '", "DON", "'T", "'", " \u2014", " it",
                                    "'s", " ", "3", ".", "141", "59", " or", " ", "2", ",", "048", ",", "000", ".\n\n",
                                    "\tTabs", "\r\n", "and", " CRLF", "  "});
  CHECK(pieces("llama-bpe", b) ==
        S{"(hello", ")", " [", "world", "]...", " ", "123", "456", "78", " \u00e9t\u00e9", "\n\n\n", " ", " x"});
  CHECK(pieces("qwen2", a) == S{"I", "'m", " sure", " they", "'ve", " said", " '", "DON", "'T", "'", " \u2014", " it",
                                "'s", " ", "3", ".", "1", "4", "1", "5", "9", " or", " ", "2", ",", "0", "4", "8", ",",
                                "0", "0", "0", ".\n\n", "\tTabs", "\r\n", "and", " CRLF", "  "});
  CHECK(pieces("qwen2", b) == S{"(hello", ")", " [", "world", "]...", " ", "1", "2", "3", "4", "5", "6", "7", "8",
                                " \u00e9t\u00e9", "\n\n\n", " ", " x"});
  CHECK(pieces("gpt2", a) == S{"I", "'m", " sure", " they", "'ve", " said", " '", "DON", "'", "T", "'", " \u2014", " it",
                               "'s", " 3", ".", "14159", " or", " 2", ",", "048", ",", "000", ".", "\n\n", "\t", "Tabs",
                               "\r", "\n", "and", " CRLF", "  "});
  CHECK(pieces("gpt2", b) == S{"(", "hello", ")", " [", "world", "]...", " 12345678", " \u00e9t\u00e9", "\n\n\n ", " x"});
}

TEST_CASE("defaults follow llama.cpp for missing keys", "[bpe_tokenizer]") {
  const VocabSpec l = oscar::vocab_spec_defaults("llama", "");
  CHECK((l.bos == 1 && l.eos == 2 && l.unk == 0 && l.add_bos && !l.add_eos && l.add_space_prefix));
  const VocabSpec g = oscar::vocab_spec_defaults("gpt2", "smollm");
  CHECK((g.bos == 11 && g.eos == 11 && g.unk == -1 && !g.add_bos && !g.add_space_prefix));
  CHECK(oscar::vocab_spec_defaults("gpt2", "llama-bpe").add_bos);
}

TEST_CASE("unusable specs are errors that say what is missing", "[bpe_tokenizer][bad-input]") {
  VocabSpec s = tiny_gpt2("smollm");
  s.tokens.clear();
  CHECK_THROWS_WITH(BpeTokenizer(s, "m.gguf"), Catch::Contains("m.gguf") && Catch::Contains("no tokens"));
  s = tiny_gpt2("smollm");
  s.merges.clear();
  CHECK_THROWS_WITH(BpeTokenizer(s), Catch::Contains("needs tokenizer.ggml.merges"));
  s = tiny_gpt2("deepseek-llm");
  CHECK_THROWS_WITH(BpeTokenizer(s), Catch::Contains("unknown pre-tokenizer") && Catch::Contains("'deepseek-llm'") &&
                                         Catch::Contains("smollm, llama-bpe"));
  s = tiny_gpt2("");
  CHECK_THROWS_WITH(BpeTokenizer(s), Catch::Contains("tokenizer.ggml.pre is missing"));
  s = tiny_gpt2("smollm");
  s.model = "bert";
  CHECK_THROWS_WITH(BpeTokenizer(s), Catch::Contains("unknown tokenizer model") && Catch::Contains("'bert'") &&
                                         Catch::Contains("gpt2") && Catch::Contains("llama"));
  s = tiny_gpt2("smollm");
  s.merges.push_back("q zz");
  CHECK_THROWS_WITH(BpeTokenizer(s), Catch::Contains("merge 16 ('q zz')") && Catch::Contains("not in the vocabulary"));
  s = tiny_gpt2("smollm");
  s.merges.push_back("qz");
  CHECK_THROWS_WITH(BpeTokenizer(s), Catch::Contains("not two tokens"));
  s = tiny_gpt2("smollm");
  s.bos = 5000;
  CHECK_THROWS_WITH(BpeTokenizer(s), Catch::Contains("bos_token_id = 5000 is outside"));
  s = tiny_gpt2("smollm");
  s.add_bos = true;
  CHECK_THROWS_WITH(BpeTokenizer(s), Catch::Contains("no bos_token_id"));
  s = tiny_gpt2("smollm");
  s.token_types = {1, 1};
  CHECK_THROWS_WITH(BpeTokenizer(s), Catch::Contains("token_type has 2 entries for 273 tokens"));
  VocabSpec l = stories_spm().spec();
  l.scores.clear();
  CHECK_THROWS_WITH(BpeTokenizer(l), Catch::Contains("needs tokenizer.ggml.scores"));
}
