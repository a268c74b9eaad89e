// layer_source.cpp: the dump-fed and model-fed layer sources, passage origins, and the content test
// that says whether two passages are the same data.
#include "oscar/03_dump/layer_source.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unordered_map>

#include <fmt/ranges.h>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "oscar/01_core/progress.h"

namespace oscar {

namespace {

const char* const kTensorNames[] = {"q", "q_pre", "k", "k_pre", "v"};

HeadTensor* slot(LayerDump& d, const std::string& t) {
  return t == "q" ? &d.q : t == "q_pre" ? &d.q_pre : t == "k" ? &d.k : t == "k_pre" ? &d.k_pre : t == "v" ? &d.v : nullptr;
}

// The run of equal consecutive ids around the first k-gram of `a` (in a's order) that also occurs in `b`,
// extended both ways as far as the ids agree: {length, start in a, start in b}; length 0 when none is shared.
struct Run {
  long len = 0, pos_a = 0, pos_b = 0;
};
Run shared_run(const std::vector<int>& a, const std::vector<int>& b, long k) {
  Run best;
  if (k <= 0 || static_cast<long>(a.size()) < k || static_cast<long>(b.size()) < k) return best;
  auto gram_hash = [k](const std::vector<int>& v, long i) {
    uint64_t h = 1469598103934665603ull;
    for (long j = i; j < i + k; ++j) h = (h ^ static_cast<uint32_t>(v[j])) * 1099511628211ull;
    return h;
  };
  std::unordered_multimap<uint64_t, long> grams;
  grams.reserve(b.size());
  for (long i = 0; i + k <= static_cast<long>(b.size()); ++i) grams.emplace(gram_hash(b, i), i);
  for (long i = 0; i + k <= static_cast<long>(a.size()); ++i) {
    auto [lo, hi] = grams.equal_range(gram_hash(a, i));
    for (auto it = lo; it != hi; ++it) {
      const long j = it->second;
      if (!std::equal(a.begin() + i, a.begin() + i + k, b.begin() + j)) continue;  // hash collision
      long s = 0;  // extend both ways
      while (i - s - 1 >= 0 && j - s - 1 >= 0 && a[i - s - 1] == b[j - s - 1]) ++s;
      long e = k;
      while (i + e < static_cast<long>(a.size()) && j + e < static_cast<long>(b.size()) && a[i + e] == b[j + e]) ++e;
      if (s + e > best.len) best = {s + e, i - s, j - s};
    }
    if (best.len > 0) return best;  // the first shared k-gram, extended maximally
  }
  return best;
}

}  // namespace

HeadTensor to_head_major(const MatrixRM& m, int heads, int head_dim) {
  if (m.cols() != static_cast<Eigen::Index>(heads) * head_dim)
    fail("internal: a layer tensor has {} columns, expected {} heads x head_dim {}", m.cols(), heads, head_dim);
  HeadTensor t;
  t.heads = heads;
  t.tokens = static_cast<int>(m.rows());
  t.head_dim = head_dim;
  t.data.resize(static_cast<size_t>(heads) * t.tokens * head_dim);
  for (int h = 0; h < heads; ++h)
    for (int r = 0; r < t.tokens; ++r)
      for (int c = 0; c < head_dim; ++c) t.data[(static_cast<size_t>(h) * t.tokens + r) * head_dim + c] = m(r, h * head_dim + c);
  return t;
}

std::string text_lines_sha256(const std::vector<std::string>& lines) {
  std::string all;
  size_t n = 0;
  for (const auto& l : lines) n += l.size() + 1;
  all.reserve(n);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) all += '\n';
    all += lines[i];
  }
  return sha256_hex(all.data(), all.size());
}

PassageOrigin passage_origin(const Passage& p, const std::vector<std::string>& lines, const Checkpoint& ck,
                             const Tokenizer& tok, std::string where) {
  PassageOrigin o;
  o.where = std::move(where);
  o.checkpoint_sha256 = ck.sha256;
  o.model_name = ck.name;
  o.token_ids = p.tokens;
  o.text_sha256 = text_lines_sha256(lines);
  o.first_line = p.first_line;
  o.last_line = passage_last_line(p, static_cast<long>(lines.size()), 1,
                                  [&](int prev, int id) { return tok.decode_piece(prev, id); });
  return o;
}

PassageOrigin dump_origin(const DumpReader& r) {
  PassageOrigin o;
  o.where = r.path();
  o.checkpoint_sha256 = r.info().checkpoint_sha256;
  o.model_name = r.info().model_name;
  o.token_ids = r.token_ids();
  return o;
}

std::string same_data_reason(const PassageOrigin& a, const PassageOrigin& b) {
  const std::vector<int>&x = a.token_ids, &y = b.token_ids;
  if (!x.empty() && x == y) return fmt::format("their token ids are identical ({} tokens)", x.size());
  if (!a.text_sha256.empty() && a.text_sha256 == b.text_sha256 && a.first_line >= 0 && b.first_line >= 0 &&
      a.first_line <= b.last_line && b.first_line <= a.last_line)
    return fmt::format("they read overlapping lines of the same text ({}..{} and {}..{})", a.first_line, a.last_line, b.first_line,
                       b.last_line);
  if (x.empty() || y.empty()) return "";
  const long shorter = static_cast<long>(std::min(x.size(), y.size()));
  const bool a_shorter = x.size() <= y.size();
  const std::vector<int>&s = a_shorter ? x : y, &l = a_shorter ? y : x;
  // Contained: the shorter sequence (BOS aside: a passage cut elsewhere starts with BOS all the same).
  const long skip = (s.size() > 1 && s[0] == Tokenizer::kBos) ? 1 : 0;
  if (std::search(l.begin(), l.end(), s.begin() + skip, s.end()) != l.end())
    return fmt::format("{} contains all {} tokens of {} (after BOS) as one run", a_shorter ? "the second" : "the first", s.size() - skip,
                       a_shorter ? "the first" : "the second");
  const long k = std::min<long>(kSharedRunTokens, shorter - skip);
  const Run r = shared_run(x, y, k);
  if (r.len >= k && k > 0)
    return fmt::format("they share a run of {} consecutive token ids (tokens {}..{} of the first = {}..{} of the second)", r.len, r.pos_a,
                       r.pos_a + r.len - 1, r.pos_b, r.pos_b + r.len - 1);
  return "";
}

// ---- dump-fed ----
DumpLayerSource::DumpLayerSource(const std::string& path)
    : owned_(std::make_unique<DumpReader>(path)), reader_(owned_.get()), origin_(dump_origin(*owned_)) {}
DumpLayerSource::DumpLayerSource(std::unique_ptr<DumpReader> reader)
    : owned_(std::move(reader)), reader_(owned_.get()), origin_(dump_origin(*owned_)) {}
DumpLayerSource::DumpLayerSource(const DumpReader& reader) : reader_(&reader), origin_(dump_origin(reader)) {}

LayerDump DumpLayerSource::layer(int l, const std::vector<std::string>& tensors) const { return reader_->read_layer(l, tensors); }

// ---- model-fed ----
ModelLayerSource::ModelLayerSource(const Model& model, PassageOrigin origin, const std::string& text_source,
                                   const std::vector<std::string>& keep, bool progress)
    : origin_(std::move(origin)), kept_(keep) {
  for (const std::string& t : keep)
    if (std::find(std::begin(kTensorNames), std::end(kTensorNames), t) == std::end(kTensorNames))
      fail("unknown layer tensor '{}' (expected q, q_pre, k, k_pre or v)", t);
  const ModelConfig& c = model.config();
  const std::vector<int>& ids = origin_.token_ids;
  if (ids.size() < 2) fail("{}: a passage needs at least 2 tokens, this one has {}", origin_.where, ids.size());
  if (static_cast<long>(ids.size()) > c.seq_len)
    fail("{}: {} tokens are beyond the model's context of {} tokens", origin_.where, ids.size(), c.seq_len);
  info_.model_name = origin_.model_name;  // the origin names the model (passage_origin): a GGUF has no Checkpoint
  info_.checkpoint_sha256 = origin_.checkpoint_sha256;
  set_model_fields(info_, c);  // shapes, RoPE, architecture, config_json, per-layer attention
  info_.text_source = text_source;
  info_.token_count = static_cast<long>(ids.size());
  info_.storage_dtype = "float32";
  info_.producer = "oscar-kv ModelLayerSource (in memory)";
  layers_.resize(c.n_layers);
  const int hd = c.head_dim();
  KvCache cache(c);
  Progress bar("forward pass (in memory)", c.n_layers, progress);
  const MatrixRM logits = model.forward(ids, cache, [&](const LayerQKV& a) {
    LayerDump& d = layers_[a.layer];
    d.layer = a.layer;
    for (const std::string& t : kept_) {
      const MatrixRM& m = t == "q" ? a.q : t == "q_pre" ? a.q_pre : t == "k" ? a.k : t == "k_pre" ? a.k_pre : a.v;
      if (!m.allFinite())
        fail("{}: layer {} tensor '{}' holds a non-finite value; the model overflowed on this passage: choose another passage",
             origin_.where, a.layer, t);
      *slot(d, t) = to_head_major(m, t[0] == 'q' ? c.n_heads : c.n_kv_heads, hd);
    }
    bar.advance();
  });
  bar.done();
  info_.mean_next_token_loss = oscar::mean_next_token_loss(logits, ids);
}

LayerDump ModelLayerSource::layer(int l, const std::vector<std::string>& tensors) const {
  if (l < 0 || l >= info_.n_layers) fail("{}: layer {} out of range (n_layers={})", origin_.where, l, info_.n_layers);
  LayerDump d;
  d.layer = l;
  for (const std::string& t : tensors) {
    HeadTensor* dst = slot(d, t);
    if (!dst) fail("unknown layer tensor '{}' (expected q, q_pre, k, k_pre or v)", t);
    if (std::find(kept_.begin(), kept_.end(), t) == kept_.end())
      fail("internal: {}: tensor '{}' was not kept by the in-memory forward pass (kept: {})", origin_.where, t, fmt::join(kept_, ", "));
    *dst = *slot(const_cast<LayerDump&>(layers_[l]), t);
  }
  return d;
}

}  // namespace oscar
