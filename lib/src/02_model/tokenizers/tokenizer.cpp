// tokenizer.cpp: llama2.c BPE, with a heap over adjacent pairs instead of run.c's quadratic scan.
// Equivalence: run.c merges, at each step, the highest-scoring mergeable pair, the leftmost among
// equals; the heap orders pairs by (score desc, left symbol's original position asc), and symbol
// order in the linked list never changes, so the same merge is chosen at every step.
#include "oscar/02_model/tokenizers/tokenizer.h"

#include <cmath>
#include <cstring>
#include <queue>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"

namespace oscar {

Tokenizer Tokenizer::load(const std::string& path, int vocab_size) {
  const std::vector<uint8_t> raw = read_file_bytes(path);
  Tokenizer t;
  t.path_ = path;
  size_t o = 4;
  if (raw.size() < 4) fail("{}: too short to be a llama2.c tokenizer ({} bytes)", path, raw.size());
  t.vocab_.reserve(vocab_size);
  for (int i = 0; i < vocab_size; ++i) {
    float score;
    int32_t len;
    if (o + 8 > raw.size())
      fail("{}: tokenizer holds only {} tokens but the model's vocab_size is {}; use the tokenizer the model was trained with",
           path, i, vocab_size);
    std::memcpy(&score, raw.data() + o, 4);
    std::memcpy(&len, raw.data() + o + 4, 4);
    o += 8;
    if (len < 0 || len > 1024 || o + static_cast<size_t>(len) > raw.size())
      fail("{}: corrupt tokenizer entry {} (length {}); the file is truncated or not a llama2.c tokenizer", path, i, len);
    if (!std::isfinite(score))
      fail("{}: token {} has a non-finite merge score ({}); the file is damaged or not a llama2.c tokenizer", path, i, score);
    t.vocab_.emplace_back(reinterpret_cast<const char*>(raw.data() + o), static_cast<size_t>(len));
    t.scores_.push_back(score);
    o += static_cast<size_t>(len);
  }
  if (o != raw.size())
    fail("{}: tokenizer holds more than the model's vocab_size {} tokens ({} bytes left over); use the tokenizer the "
         "model was trained with",
         path, vocab_size, raw.size() - o);
  for (int i = 0; i < vocab_size; ++i) t.index_.emplace(t.vocab_[i], i);  // first occurrence wins, as bsearch may not
  return t;
}

int Tokenizer::lookup(std::string_view s) const {
  auto it = index_.find(std::string(s));
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> Tokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int> ids;
  if (!text.empty()) {
    const int sp = lookup(" ");
    if (sp >= 0) ids.push_back(sp);
  }
  for (size_t i = 0; i < text.size();) {
    size_t n = 1;  // bytes of this UTF-8 code point, at most 4, stopping at the next lead byte (as run.c)
    while (i + n < text.size() && n < 4 && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) ++n;
    const int id = lookup(text.substr(i, n));
    if (id >= 0) {
      ids.push_back(id);
    } else {
      for (size_t j = 0; j < n; ++j) {  // run.c's byte fallback: tokens 3..258 are the bytes <0x00>..<0xFF>
        const unsigned byte = static_cast<unsigned char>(text[i + j]);
        if (byte + 3 >= vocab_.size())
          fail("{}: the text holds byte 0x{:02X} (at byte {}), which is not in the vocabulary, and the tokenizer's {} tokens "
               "have no byte fallback for it (it needs 259); remove such characters from the text or use a tokenizer "
               "with byte tokens",
               path_, byte, i + j, vocab_.size());
        ids.push_back(static_cast<int>(byte) + 3);
      }
    }
    i += n;
  }
  // Linked list of symbols; merges fold the right symbol into the left one.
  const int n = static_cast<int>(ids.size());
  std::vector<int> prev(n), next(n), version(n, 0);
  std::vector<char> alive(n, 1);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    float score;
    int left, right, merged, vl, vr;
  };
  auto worse = [](const Cand& a, const Cand& b) { return a.score != b.score ? a.score < b.score : a.left > b.left; };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> heap(worse);
  auto push = [&](int l) {
    const int r = next[l];
    if (l < 0 || r < 0) return;
    const int m = lookup(vocab_[ids[l]] + vocab_[ids[r]]);
    if (m >= 0) heap.push({scores_[m], l, r, m, version[l], version[r]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || version[c.left] != c.vl || version[c.right] != c.vr)
      continue;
    ids[c.left] = c.merged;
    ++version[c.left];
    alive[c.right] = 0;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    if (prev[c.left] >= 0) push(prev[c.left]);
    push(c.left);
  }
  std::vector<int> out;
  out.reserve(n + 2);
  if (bos) out.push_back(kBos);
  for (int i = n > 0 ? 0 : -1; i >= 0; i = next[i]) out.push_back(ids[i]);
  if (eos) out.push_back(kEos);
  return out;
}

std::string Tokenizer::decode_piece(int prev, int token) const {
  if (token < 0 || token >= vocab_size()) fail("token id {} is outside the vocabulary of {} entries", token, vocab_size());
  std::string_view p = vocab_[token];
  if (prev == kBos && !p.empty() && p[0] == ' ') p.remove_prefix(1);
  unsigned byte;
  if (p.size() == 6 && std::sscanf(std::string(p).c_str(), "<0x%02X>", &byte) == 1) return std::string(1, static_cast<char>(byte));
  return std::string(p);
}

std::string Tokenizer::display(int token) const {
  if (token < 0 || token >= vocab_size()) return fmt::format("<{}>", token);
  if (token == kBos) return "<s>";
  if (token == kEos) return "</s>";
  std::string out;
  for (unsigned char ch : vocab_[token]) {
    if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else if (ch == '"' || ch == '\\') { out += '\\'; out += static_cast<char>(ch); }
    else if (ch < 0x20 || ch == 0x7f) out += fmt::format("\\x{:02x}", ch);
    else out += static_cast<char>(ch);
  }
  return out;
}

}  // namespace oscar
