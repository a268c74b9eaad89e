// layer_source.h: where a passage's per-layer activations come from, behind one interface: a dump file
// (DumpLayerSource, over DumpReader) or the model itself run over a passage in memory (ModelLayerSource,
// one forward pass, no file). Consumers (the covariance-rotation fit) read layer by layer and cannot tell
// the two apart: for the same checkpoint and passage, a float32 dump and the model give identical layers.
// PassageOrigin says what a passage is by content (checkpoint sha256, token ids, and for passages cut from
// a text here, the text's sha256 and line range), so that "is this the same data?" never rests on names.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "oscar/03_dump/dump.h"
#include "oscar/02_model/forward/model.h"
#include "oscar/02_model/tokenizers/passage.h"
#include "oscar/02_model/tokenizers/tokenizer.h"

namespace oscar {

struct PassageOrigin {
  std::string where;             // for messages: a dump's path, or "kjv.txt.gz lines 0..41 (--calib-offset 0)"
  std::string checkpoint_sha256;  // the model's identity (may be empty in foreign dumps)
  std::string model_name;        // for messages, and identity only when a sha256 is missing
  std::vector<int> token_ids;    // the passage as the model read it, BOS first
  std::string text_sha256;       // sha256 of the text's lines joined by '\n' (empty: unknown, e.g. a dump)
  long first_line = -1, last_line = -1;  // inclusive 0-based line range of that text (-1: unknown)
};

// The origin of a passage cut from `lines` (the whole text, as read_lines returned it): its last line is
// found by counting the line breaks the tokens decode to. `where` is used as given.
PassageOrigin passage_origin(const Passage& p, const std::vector<std::string>& lines, const Checkpoint& ck,
                             const Tokenizer& tok, std::string where);
// sha256 of the lines joined by '\n' (what passage_origin stores as text_sha256).
std::string text_lines_sha256(const std::vector<std::string>& lines);
// The origin of a dump: its path, checkpoint attributes and /token_ids (no text range: dumps do not record one).
PassageOrigin dump_origin(const DumpReader& r);

// Why two passages are the same data, or "" when they are not: identical token ids, overlapping line
// ranges of the same text (by content sha256), one's tokens (BOS aside) contained as one run in the
// other's, or a shared run of at least kSharedRunTokens consecutive token ids (all of the shorter one when
// it is shorter). File names, storage dtype and checkpoint file names play no part. Limit: two dumps
// (which record no line range) that share fewer than kSharedRunTokens tokens pass.
inline constexpr int kSharedRunTokens = 32;
std::string same_data_reason(const PassageOrigin& a, const PassageOrigin& b);

class LayerSource {
 public:
  virtual ~LayerSource() = default;
  // Shapes and model identity, as a dump's root attributes would state them (v2: with the architecture,
  // config_json and has_pre_rope).
  virtual const DumpInfo& info() const = 0;
  virtual const PassageOrigin& origin() const = 0;
  // What attention received in layer l (scaling, window, soft-cap, sinks, RoPE): from the dump's per-layer
  // attributes (v1 dumps: standard attention), or from the model's configuration. Metrics use this.
  LayerAttention attention(int l) const { return info().attention(l); }
  // The named tensors ("q", "q_pre", "k", "k_pre", "v") of one layer, head-major float32; others stay
  // empty. q_pre and k_pre are optional: a source without them (info().has_pre_rope false) throws when
  // asked. Throws Error naming the source on a bad layer or tensor name, or a non-finite value.
  virtual LayerDump layer(int l, const std::vector<std::string>& tensors) const = 0;
};

class DumpLayerSource final : public LayerSource {
 public:
  explicit DumpLayerSource(const std::string& path);  // opens and validates the dump
  explicit DumpLayerSource(std::unique_ptr<DumpReader> reader);  // owns an open reader (e.g. of an image)
  explicit DumpLayerSource(const DumpReader& reader);  // borrows an open reader (it must outlive this)
  const DumpInfo& info() const override { return reader_->info(); }
  const PassageOrigin& origin() const override { return origin_; }
  LayerDump layer(int l, const std::vector<std::string>& tensors) const override;
  const DumpReader& reader() const { return *reader_; }

 private:
  std::unique_ptr<DumpReader> owned_;
  const DumpReader* reader_;
  PassageOrigin origin_;
};

class ModelLayerSource final : public LayerSource {
 public:
  // Runs `model` over `tokens` (one forward pass from an empty cache, as oscar-dump does) and keeps the
  // tensors named in `keep` of every layer in memory, in float32. `text_source` fills info().text_source.
  ModelLayerSource(const Model& model, PassageOrigin origin, const std::string& text_source,
                   const std::vector<std::string>& keep = {"q", "q_pre", "k", "k_pre", "v"}, bool progress = false);
  const DumpInfo& info() const override { return info_; }
  const PassageOrigin& origin() const override { return origin_; }
  LayerDump layer(int l, const std::vector<std::string>& tensors) const override;
  double mean_next_token_loss() const { return info_.mean_next_token_loss; }

 private:
  DumpInfo info_;
  PassageOrigin origin_;
  std::vector<std::string> kept_;
  std::vector<LayerDump> layers_;
};

// Rows = tokens, columns head-major (a LayerQKV tensor) -> HeadTensor [heads, tokens, head_dim].
HeadTensor to_head_major(const MatrixRM& m, int heads, int head_dim);

}  // namespace oscar
