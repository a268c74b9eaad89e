// bpe_tokenizer.cpp: GGUF vocabularies (VocabSpec) to ids and back. Two encoders share the vocabulary
// index:
//   gpt2  - each pre-tokenized word is mapped to the GPT-2 byte alphabet (one character per byte) and
//           merged with a min-heap over adjacent pairs ordered by (merge rank, position): the pair with
//           the lowest rank, leftmost among equals, merges first, as Hugging Face's BPE does. Words
//           repeat a lot, so each encode() call caches the ids of the words it has seen.
//   llama - SentencePiece-style BPE: ' ' becomes U+2581, one U+2581 goes in front when add_space_prefix,
//           the text splits into UTF-8 characters, and a max-heap over adjacent pairs ordered by (score
//           of the merged token, position) merges the highest-scoring pair, leftmost among equals, into
//           normal or user-defined tokens only. A final symbol that is not a token falls back to its
//           bytes' <0xNN> tokens, else to the unknown token.
// Known difference from llama2.c's run.c (oscar::Tokenizer): on invalid UTF-8 a lead byte here takes the
// length its bits announce (as llama.cpp does), while run.c stops at the next non-continuation byte; and
// run.c would merge into any token text (control and byte tokens too). On valid text without special
// tokens' texts both give the same ids (tests/test_bpe_tokenizer.cpp checks the KJV).
#include "oscar/02_model/tokenizers/bpe_tokenizer.h"

#include <algorithm>
#include <queue>

#include "oscar/01_core/error.h"
#include "oscar/02_model/tokenizers/bpe_pretokenizer.h"
#include "oscar/02_model/tokenizers/tokenizer.h"

namespace oscar {
namespace {

const std::string kSpmSpace = "\xe2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Length of the UTF-8 sequence a lead byte announces (1 for a stray continuation or invalid byte).
size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1; }

// Decodes one UTF-8 character at s[i] (advancing i); invalid sequences yield 0xFFFFFFFF and one byte.
uint32_t next_cp(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = utf8_len(c);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return c < 0x80 ? c : 0xFFFFFFFFu;
  }
  uint32_t cp = c & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) {
      ++i;
      return 0xFFFFFFFFu;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  i += n;
  return cp;
}

// GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes take the code
// points 256, 257, ... in byte order.
struct ByteAlphabet {
  uint32_t cp[256];
  std::string utf8[256];
  std::unordered_map<uint32_t, uint8_t> back;
  ByteAlphabet() {
    uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      cp[b] = self ? static_cast<uint32_t>(b) : extra++;
      append_utf8(utf8[b], cp[b]);
      back.emplace(cp[b], static_cast<uint8_t>(b));
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

int parse_byte_token(std::string_view t) {  // "<0xNN>" -> NN, else -1
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[k];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

VocabSpec vocab_spec_defaults(const std::string& model, const std::string& pre) {
  VocabSpec s;
  s.model = model;
  s.pre = pre;
  if (model == "gpt2") {
    s.bos = 11;
    s.eos = 11;
    s.add_bos = pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
    s.add_space_prefix = false;
  } else {
    s.bos = 1;
    s.eos = 2;
    s.unk = 0;
    s.add_bos = true;
    s.add_space_prefix = true;
  }
  return s;
}

VocabSpec vocab_spec_from_llama2c(const Tokenizer& tok) {
  VocabSpec s = vocab_spec_defaults("llama", "");
  const auto& v = tok.vocab();
  s.tokens.reserve(v.size());
  s.token_types.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    std::string t;
    int32_t type = kTokNormal;
    if (i == 0) {
      t = "<unk>", type = kTokUnknown;
    } else if (i == 1) {
      t = "<s>", type = kTokControl;
    } else if (i == 2) {
      t = "</s>", type = kTokControl;
    } else if (parse_byte_token(v[i]) >= 0) {
      t = v[i], type = kTokByte;
    } else {
      for (char c : v[i]) c == ' ' ? t += kSpmSpace : t += c;
    }
    s.tokens.push_back(std::move(t));
    s.token_types.push_back(type);
  }
  s.scores = tok.scores();
  return s;
}

BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

BpeTokenizer::BpeTokenizer(VocabSpec spec, std::string source) : spec_(std::move(spec)), source_(std::move(source)) {
  const std::string& src = source_;
  const size_t n = spec_.tokens.size();
  if (spec_.model != "gpt2" && spec_.model != "llama")
    fail("{}: unknown tokenizer model tokenizer.ggml.model = '{}'; supported: gpt2 (byte-level BPE), llama "
         "(SentencePiece BPE)",
         src, spec_.model);
  gpt2_ = spec_.model == "gpt2";
  if (n == 0) fail("{}: the vocabulary has no tokens (tokenizer.ggml.tokens is missing or empty); a {} tokenizer needs them", src, spec_.model);
  if (n > 0x7FFFFFFF) fail("{}: {} tokens is more than int32 ids can address", src, n);
  if (!spec_.token_types.empty() && spec_.token_types.size() != n)
    fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens; they must match", src, spec_.token_types.size(), n);
  for (size_t i = 0; i < spec_.token_types.size(); ++i)  // llama.cpp's types: 0 undefined, 1 normal .. 6 byte
    if (spec_.token_types[i] < 0 || spec_.token_types[i] > 6)
      fail("{}: tokenizer.ggml.token_type[{}] = {} is not a token type (0..6); the file's tokenizer metadata is damaged", src,
           i, spec_.token_types[i]);
  if (!spec_.scores.empty() && spec_.scores.size() != n)
    fail("{}: tokenizer.ggml.scores has {} entries for {} tokens; they must match", src, spec_.scores.size(), n);
  const std::pair<const char*, int> ids[] = {{"bos_token_id", spec_.bos}, {"eos_token_id", spec_.eos},
                                             {"unknown_token_id", spec_.unk}, {"padding_token_id", spec_.pad}};
  for (const auto& [name, id] : ids)
    if (id < -1 || id >= static_cast<int>(n))
      fail("{}: tokenizer.ggml.{} = {} is outside the vocabulary of {} tokens; the file's tokenizer metadata is damaged "
           "(an id is 0..{}, or -1 for none)",
           src, name, id, n, n - 1);
  if (spec_.add_bos && spec_.bos < 0) fail("{}: add_bos_token is set but there is no bos_token_id", src);
  if (spec_.add_eos && spec_.eos < 0) fail("{}: add_eos_token is set but there is no eos_token_id", src);

  index_.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) index_.emplace(std::string_view(spec_.tokens[i]), static_cast<int>(i));
  special_by_byte_.resize(256);
  for (size_t i = 0; i < n; ++i) {
    const int t = type_of(static_cast<int>(i));
    if ((t == kTokControl || t == kTokUserDefined || t == kTokUnknown) && !spec_.tokens[i].empty())
      special_by_byte_[static_cast<unsigned char>(spec_.tokens[i][0])].push_back(static_cast<int>(i));
  }
  for (auto& v : special_by_byte_)
    std::stable_sort(v.begin(), v.end(), [&](int a, int b) { return spec_.tokens[a].size() > spec_.tokens[b].size(); });

  if (gpt2_) {
    if (spec_.merges.empty())
      fail("{}: a gpt2 (byte-level BPE) vocabulary needs tokenizer.ggml.merges, which is missing or empty", src);
    if (spec_.pre.empty())
      fail("{}: tokenizer.ggml.pre is missing; a gpt2 vocabulary needs its pre-tokenizer name (supported: {})", src,
           BpePretokenizer::supported_names());
    pre_ = std::make_unique<BpePretokenizer>(spec_.pre, src);
    ignore_merges_ = spec_.pre == "llama-bpe" || spec_.pre == "llama3" || spec_.pre == "llama-v3";
    const ByteAlphabet& a = alphabet();
    for (int b = 0; b < 256; ++b) byte_token_[b] = find(a.utf8[b]);
    merge_rank_.reserve(spec_.merges.size() * 2);
    for (size_t r = 0; r < spec_.merges.size(); ++r) {
      const std::string& m = spec_.merges[r];
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (sp == std::string::npos)
        fail("{}: merge {} ('{}') is not two tokens separated by a space", src, r, m);
      const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
      const int l = find(left), rt = find(right), mg = find(m.substr(0, sp) + m.substr(sp + 1));
      if (l < 0 || rt < 0 || mg < 0)
        fail("{}: merge {} ('{}') uses or makes a token that is not in the vocabulary; the merges do not belong to "
             "these tokens",
             src, r, m);
      merge_rank_.emplace((static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(rt),
                          (static_cast<uint64_t>(r) << 32) | static_cast<uint32_t>(mg));
    }
  } else {
    if (spec_.scores.empty())
      fail("{}: a llama (SentencePiece) vocabulary needs tokenizer.ggml.scores, which is missing or empty", src);
    char buf[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      byte_fallback_[b] = find(buf);
    }
  }
}

int BpeTokenizer::find(std::string_view token_text) const {
  auto it = index_.find(token_text);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> BpeTokenizer::encode(std::string_view text) const { return encode(text, false); }

std::vector<int> BpeTokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int> out;
  out.reserve(text.size() / 3 + 4);
  if (spec_.add_bos) out.push_back(spec_.bos);
  if (!parse_special) {
    encode_plain(text, out);
  } else {
    size_t from = 0;  // start of the plain stretch not yet encoded
    for (size_t i = 0; i < text.size(); ++i) {
      for (int id : special_by_byte_[static_cast<unsigned char>(text[i])]) {
        const std::string& t = spec_.tokens[id];
        if (text.compare(i, t.size(), t) != 0) continue;
        encode_plain(text.substr(from, i - from), out);
        out.push_back(id);
        from = i + t.size();
        i = from - 1;
        break;
      }
    }
    encode_plain(text.substr(from), out);
  }
  if (spec_.add_eos) out.push_back(spec_.eos);
  return out;
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<int>& out) const {
  if (gpt2_) encode_gpt2(text, out);
  else encode_spm(text, out);
}

std::vector<int> BpeTokenizer::encode_text(std::string_view text) const {
  std::vector<int> out;
  out.reserve(text.size() / 3 + 2);
  encode_plain(text, out);
  return out;
}

void BpeTokenizer::encode_gpt2(std::string_view text, std::vector<int>& out) const {
  std::vector<std::string_view> words;
  words.reserve(text.size() / 4 + 1);
  pre_->split(text, words);
  // Per-call cache: word -> (start, count) in `store`.
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;
  std::vector<int> store, tmp;
  for (std::string_view w : words) {
    if (w.size() > 64) {
      bpe_word(w, out);
      continue;
    }
    auto it = cache.find(w);
    if (it == cache.end()) {
      tmp.clear();
      bpe_word(w, tmp);
      it = cache.emplace(w, std::make_pair(static_cast<uint32_t>(store.size()), static_cast<uint32_t>(tmp.size()))).first;
      store.insert(store.end(), tmp.begin(), tmp.end());
    }
    out.insert(out.end(), store.begin() + it->second.first, store.begin() + it->second.first + it->second.second);
  }
}

void BpeTokenizer::bpe_word(std::string_view word, std::vector<int>& out) const {
  const int n = static_cast<int>(word.size());
  if (n == 0) return;
  if (ignore_merges_) {
    std::string mapped;
    for (unsigned char c : word) mapped += alphabet().utf8[c];
    const int id = find(mapped);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  // A byte whose GPT-2 alphabet character the vocabulary lacks is dropped, as Hugging Face's byte-level BPE drops it
  // (SmolLM2 lacks 21 of them): mapped to the unknown token, which is often <|endoftext|>, it would plant a new
  // attention sink in the middle of the passage.
  std::vector<int> ids;
  ids.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    if (const int id = byte_token_[static_cast<unsigned char>(word[i])]; id >= 0) ids.push_back(id);
  const int m = static_cast<int>(ids.size());
  if (m == 0) return;
  std::vector<int> next(static_cast<size_t>(m)), prev(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) {
    next[i] = i + 1 < m ? i + 1 : -1;
    prev[i] = i - 1;
  }
  if (m == 1) {
    out.push_back(ids[0]);
    return;
  }
  struct Cand {
    uint32_t rank;
    int pos, left, right, merged;
  };
  auto later = [](const Cand& a, const Cand& b) { return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos; };
  std::priority_queue<Cand, std::vector<Cand>, decltype(later)> heap(later);
  auto push = [&](int l) {
    if (l < 0 || next[l] < 0) return;
    const int r = next[l];
    auto it = merge_rank_.find((static_cast<uint64_t>(ids[l]) << 32) | static_cast<uint32_t>(ids[r]));
    if (it != merge_rank_.end())
      heap.push({static_cast<uint32_t>(it->second >> 32), l, ids[l], ids[r], static_cast<int>(it->second & 0xFFFFFFFFu)});
  };
  for (int i = 0; i + 1 < m; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const int l = c.pos, r = next[l];
    // Stale when l was absorbed (its id slot then no longer starts a live symbol: prev chain skips it),
    // or l or its right neighbour changed since the candidate was made.
    if (ids[l] != c.left || r < 0 || ids[r] != c.right) continue;
    ids[l] = c.merged;
    next[l] = next[r];
    if (next[r] >= 0) prev[next[r]] = l;
    ids[r] = -1;  // dead
    push(prev[l]);
    push(l);
  }
  for (int i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
}

void BpeTokenizer::encode_spm(std::string_view text, std::vector<int>& out) const {
  if (text.empty()) return;
  std::string s;
  s.reserve(text.size() + text.size() / 4 + 3);
  if (spec_.add_space_prefix) s += kSpmSpace;
  for (char c : text) c == ' ' ? s += kSpmSpace : s += c;
  // Symbols: UTF-8 characters, as (start, length) in s, in a linked list.
  std::vector<int> start, len, next, prev;
  for (size_t i = 0; i < s.size();) {
    const size_t l = std::min(utf8_len(static_cast<unsigned char>(s[i])), s.size() - i);
    start.push_back(static_cast<int>(i));
    len.push_back(static_cast<int>(l));
    i += l;
  }
  const int n = static_cast<int>(start.size());
  next.resize(n);
  prev.resize(n);
  for (int i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Cand {
    float score;
    int left, right, size;
  };
  auto worse = [](const Cand& a, const Cand& b) { return a.score != b.score ? a.score < b.score : a.left > b.left; };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> heap(worse);
  auto push = [&](int l) {
    if (l < 0 || next[l] < 0) return;
    const int r = next[l];
    const int id = find(std::string_view(s).substr(start[l], len[l] + len[r]));
    if (id < 0) return;
    const int t = type_of(id);
    if (t != kTokNormal && t != kTokUserDefined && t != kTokUndefined) return;
    heap.push({spec_.scores[id], l, r, len[l] + len[r]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (len[c.left] == 0 || len[c.right] == 0 || next[c.left] != c.right || len[c.left] + len[c.right] != c.size) continue;
    len[c.left] += len[c.right];
    len[c.right] = 0;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  for (int i = 0; i >= 0; i = next[i]) {
    const std::string_view sym = std::string_view(s).substr(start[i], len[i]);
    const int id = find(sym);
    if (id >= 0) {
      const int t = type_of(id);
      if (t != kTokByte && t != kTokControl && t != kTokUnused) {
        out.push_back(id);
        continue;
      }
    }
    bool bytes = true;
    for (unsigned char c : sym) bytes = bytes && byte_fallback_[c] >= 0;
    if (bytes) {
      for (unsigned char c : sym) out.push_back(byte_fallback_[c]);
    } else if (spec_.unk >= 0) {
      out.push_back(spec_.unk);
    } else {
      fail("{}: cannot encode '{}': no such token, no <0xNN> byte tokens and no unknown token", source_, std::string(sym));
    }
  }
}

std::string BpeTokenizer::piece(int id) const {
  if (id < 0 || id >= vocab_size())
    fail("{}: token id {} is outside the vocabulary of {} tokens", source_, id, vocab_size());
  const std::string& t = spec_.tokens[id];
  const int type = type_of(id);
  if (type == kTokControl || type == kTokUserDefined) return t;
  if (gpt2_) {
    const ByteAlphabet& a = alphabet();
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      const size_t at = i;
      const uint32_t cp = next_cp(t, i);
      auto it = a.back.find(cp);
      if (it != a.back.end()) out += static_cast<char>(it->second);
      else out.append(t, at, i - at);  // not in the byte alphabet: kept as it is
    }
    return out;
  }
  if (type == kTokByte || (spec_.token_types.empty() && parse_byte_token(t) >= 0)) {
    const int b = parse_byte_token(t);
    if (b >= 0) return std::string(1, static_cast<char>(b));
  }
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
      out += ' ';
      i += kSpmSpace.size();
    } else {
      out += t[i++];
    }
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int>& ids) const {
  std::string out;
  bool at_start = true;  // llama: the next piece is the first of the text (after nothing or BOS)
  for (int id : ids) {
    std::string p = piece(id);
    if (!gpt2_ && spec_.add_space_prefix && at_start && id != spec_.bos && !p.empty() && p[0] == ' ') p.erase(0, 1);
    if (id != spec_.bos) at_start = false;
    out += p;
  }
  return out;
}

}  // namespace oscar
