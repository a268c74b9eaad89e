// eval.cpp: end-to-end evaluation of recipes with the model decoding from a quantized cache (the CPU
// reference QuantizedKvCache, or GpuKvCache with --gpu).
#include "oscar/09_eval/eval.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>

#include "oscar/06_quantize/cache_policy.h"
#include "oscar/02_model/checkpoint.h"
#include "oscar/03_dump/dump.h"
#include "oscar/03_dump/dump_passage.h"
#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "oscar/08_cache/gpu_kv_cache.h"
#include "oscar/02_model/passage.h"
#include "oscar/11_report/plotting.h"
#include "oscar/01_core/progress.h"
#include "oscar/08_cache/quantized_cache.h"
#include "oscar/05_rotate/rotation.h"
#include "oscar/02_model/tokenizer.h"

namespace fs = std::filesystem;

namespace oscar {

namespace {

// Logits of every position, the tokens fed one at a time through `cache`.
MatrixRM decode_all(const Model& m, KvCache& cache, const std::vector<int>& toks) {
  MatrixRM out(toks.size(), m.config().vocab_size);
  for (size_t t = 0; t < toks.size(); ++t) out.row(t) = m.forward(std::span<const int>(&toks[t], 1), cache).row(0);
  return out;
}

Eigen::VectorXd log_softmax(const Eigen::RowVectorXf& x) {
  Eigen::VectorXd d = x.transpose().cast<double>();
  const double m = d.maxCoeff();
  const double lse = m + std::log((d.array() - m).exp().sum());
  return d.array() - lse;
}


}  // namespace

EvalResult run_eval(const EvalRequest& req) {
  const Checkpoint ck = load_checkpoint(req.model);
  const Tokenizer tok = Tokenizer::load(req.tokenizer, ck.config.vocab_size);
  const auto lines = read_lines(req.text);
  if (req.tokens > ck.config.seq_len)
    fail("--tokens {} is beyond the model's context ({} has seq_len {})", req.tokens, req.model, ck.config.seq_len);
  const Passage p = select_passage(req.text, lines, req.offset, req.tokens, tok);
  if (req.generate > 0 && !req.prompt.empty()) {  // checked before any work
    const auto prompt = tok.encode(req.prompt, true, false);
    if (static_cast<int>(prompt.size()) + req.generate > ck.config.seq_len)
      fail("--prompt has {} tokens; with --generate {} that exceeds {}'s context of {} tokens: shorten the prompt or "
           "generate fewer tokens", prompt.size(), req.generate, req.model, ck.config.seq_len);
  }
  const Model m(ck);
  const int hd = ck.config.head_dim();
  EvalResult res;
  res.model_name = ck.name;
  res.tokens = static_cast<int>(p.tokens.size());
  res.passage = fmt::format("{} lines {}.., {} tokens", fs::path(req.text).filename().string(), p.first_line, p.tokens.size());

  // Resolve every recipe first, so that a recipe that cannot apply stops the run before any work.
  struct Job {
    Recipe r;
    int bits;
    bool gpu;  // attends through the CUDA kernels
  };
  std::vector<Job> jobs;
  bool need_calib = false;
  for (const auto& rf : req.recipes) {
    const bool fp = rf.bits.size() == 1 && rf.bits[0] == 16;
    for (int b : fp ? std::vector<int>{16} : req.bits) {
      Recipe r = resolve_recipe(rf.recipe, b, hd);
      const bool gpu = req.gpu && (r.key.quantized() || r.value.quantized());  // fp16 stays on the CPU
      if (gpu)
        if (const std::string why = gpu_unsupported_reason(r, ck.config); !why.empty())
          fail("--gpu: recipe '{}' is not supported by the CUDA kernels ({}; {}); run it without --gpu", r.name, why, kGpuSupported);
      jobs.push_back({std::move(r), b, gpu});
      need_calib = need_calib || jobs.back().r.calibrated();
    }
  }
  if (req.gpu) require_cuda_device();
  std::unique_ptr<CovarianceRotations> calib;
  // The cache a job decodes through, sized for a sequence of `tokens` tokens.
  auto make_cache = [&](const Job& j, size_t tokens) -> std::unique_ptr<KvCache> {
    if (j.gpu) return std::make_unique<GpuKvCache>(ck.config, j.r, calib.get(), static_cast<int>(tokens));
    return std::make_unique<QuantizedKvCache>(ck.config, j.r, calib.get());
  };
  if (need_calib) {
    const long n = static_cast<long>(lines.size());
    const long c0 = req.calib_offset < 0 ? n + req.calib_offset : req.calib_offset;
    if (c0 == p.first_line) fail("the calibration passage (--calib-offset {}) is the evaluated passage; calibrate on other text", req.calib_offset);
    const ScratchFile scratch(fs::temp_directory_path() / fmt::format(".oscar-eval-calib-{}.h5", ::getpid()));  // gone on any exit
    const std::string tmp = scratch.path().string();
    DumpRequest d{req.model, req.tokenizer, req.text, tmp, req.calib_offset, std::min(req.calib_tokens, ck.config.seq_len), "float32", false};
    dump_passage(d);
    {
      const DumpReader cal(tmp);
      calib = std::make_unique<CovarianceRotations>(fit_covariance_rotations(cal, false));
    }
    fs::remove(tmp);
  }

  const long work = static_cast<long>(jobs.size()) * (1 + static_cast<long>(req.recall_distances.size())) + (req.generate > 0 ? 1 : 0);
  Progress bar("eval", work, req.progress);
  // Full-precision reference, decoded the same way.
  KvCache ref_cache(ck.config);
  const MatrixRM ref = decode_all(m, ref_cache, p.tokens);
  const double ref_loss = mean_next_token_loss(ref, p.tokens);
  for (const Job& j : jobs) {
    const auto cache = make_cache(j, p.tokens.size());
    const MatrixRM q = decode_all(m, *cache, p.tokens);
    EvalRow row;
    row.recipe = j.r.name;
    row.bits = j.bits;
    row.gpu = j.gpu;
    row.loss = mean_next_token_loss(q, p.tokens);
    row.ppl = std::exp(row.loss);
    row.dloss = row.loss - ref_loss;
    const long n = static_cast<long>(p.tokens.size()) - 1;
    for (long t = 0; t < n; ++t) {
      const Eigen::VectorXd a = log_softmax(ref.row(t)), b = log_softmax(q.row(t));
      row.kl += (a.array().exp() * (a - b).array()).sum();
      Eigen::Index ia, ib;
      ref.row(t).maxCoeff(&ia);
      q.row(t).maxCoeff(&ib);
      row.top1 += ia == ib ? 1.0 : 0.0;
    }
    row.kl /= static_cast<double>(n);
    row.top1 /= static_cast<double>(n);
    row.eff_bits = effective_bits(j.r, static_cast<long>(p.tokens.size()), hd, ck.config.n_kv_heads).total();
    row.eff_bits_128k = effective_bits(j.r, 131072, hd, ck.config.n_kv_heads).total();
    res.rows.push_back(row);
    bar.advance();
  }

  // Recall: BOS + passage A + filler (distance tokens) + passage A again.
  if (!req.recall_distances.empty()) {
    const int span = req.recall_span;
    const std::vector<int> a(p.tokens.begin() + 1, p.tokens.begin() + 1 + span);
    const int newline = tok.encode("\n", false, false).back();
    const Passage filler = select_passage(req.text, lines, req.calib_offset, std::min<int>(ck.config.seq_len, 4096), tok);
    for (int dist : req.recall_distances) {
      if (1 + 2 * span + dist > ck.config.seq_len)
        fail("recall distance {} with a span of {} exceeds the model's context {}", dist, span, ck.config.seq_len);
      // BOS, A, newline, filler (cut to dist - 2 tokens), newline, A: both copies of A start a line.
      std::vector<int> seq{Tokenizer::kBos};
      seq.insert(seq.end(), a.begin(), a.end());
      seq.push_back(newline);
      seq.insert(seq.end(), filler.tokens.begin() + 2, filler.tokens.begin() + dist);
      seq.push_back(newline);
      seq.insert(seq.end(), a.begin(), a.end());
      auto span_loss = [&](const MatrixRM& logits, int first) {  // mean loss predicting tokens first..first+span-1
        const auto l = next_token_losses(logits, seq);
        double s = 0;
        for (int t = first; t < first + span; ++t) s += l[t - 1];
        return s / span;
      };
      for (const Job& j : jobs) {
        const auto cache = make_cache(j, seq.size());
        const MatrixRM q = decode_all(m, *cache, seq);
        res.recall.push_back({j.r.name, dist, span_loss(q, 1 + span + dist), span_loss(q, 1), j.gpu});
        bar.advance();
      }
    }
  }

  // Greedy generation from a fixed prompt.
  if (req.generate > 0 && !req.prompt.empty()) {
    const std::vector<int> prompt = tok.encode(req.prompt, true, false);
    auto gen = [&](KvCache& cache) {
      std::vector<int> out;
      MatrixRM logits = decode_all(m, cache, prompt);
      for (int i = 0; i < req.generate && cache.length() < ck.config.seq_len; ++i) {
        Eigen::Index best;
        logits.row(logits.rows() - 1).maxCoeff(&best);
        out.push_back(static_cast<int>(best));
        logits = m.forward(std::span<const int>(out.data() + out.size() - 1, 1), cache);
      }
      return out;
    };
    KvCache fp(ck.config);
    const std::vector<int> base = gen(fp);
    auto text_of = [&](const std::vector<int>& ids) {
      std::string s;
      int prev = prompt.back();
      for (int t : ids) s += tok.decode_piece(prev, t), prev = t;
      return s;
    };
    res.greedy.push_back({"full precision (fp32)", text_of(base), static_cast<int>(base.size()), static_cast<int>(base.size())});
    for (const Job& j : jobs) {
      const auto cache = make_cache(j, std::min<size_t>(prompt.size() + req.generate, ck.config.seq_len));
      const auto ids = gen(*cache);
      int same = 0;
      while (same < static_cast<int>(std::min(ids.size(), base.size())) && ids[same] == base[same]) ++same;
      res.greedy.push_back({j.r.name, text_of(ids), same, static_cast<int>(ids.size()), j.gpu});
    }
    bar.advance();
  }
  bar.done();
  return res;
}

std::string eval_label(const std::string& recipe, bool gpu) { return gpu ? recipe + " (gpu)" : recipe; }

std::string eval_markdown(const EvalRequest& req, const EvalResult& r) {
  bool any_gpu = false;
  for (const EvalRow& x : r.rows) any_gpu = any_gpu || x.gpu;
  std::string md = fmt::format("**{}**, {} (each token decoded from the recipe's quantized cache{})\n\n", r.model_name, r.passage,
                               any_gpu ? "; rows marked (gpu): attention by the CUDA decode kernels over their own quantized cache" : "");
  md += "| recipe | eff. bits (passage / 128K) | loss (nats) | perplexity | Δ loss vs fp32 | KL(fp32 ‖ quant) | top-1 agreement |\n|---|---|---|---|---|---|---|\n";
  for (const EvalRow& x : r.rows)
    md += fmt::format("| {} | {:.2f} / {:.2f} | {:.4f} | {:.3f} | {:+.4f} | {:.4f} | {:.3f} |\n", eval_label(x.recipe, x.gpu), x.eff_bits, x.eff_bits_128k, x.loss,
                      x.ppl, x.dloss, x.kl, x.top1);
  if (!r.recall.empty()) {
    md += fmt::format("\nRecall: loss (nats) on a {}-token passage repeated after D tokens of other text (first occurrence in brackets)\n\n| recipe |", req.recall_span);
    for (int d : req.recall_distances) md += fmt::format(" D = {} |", d);
    md += "\n|---|";
    for (size_t i = 0; i < req.recall_distances.size(); ++i) md += "---|";
    md += "\n";
    for (const EvalRow& x : r.rows) {
      md += "| " + eval_label(x.recipe, x.gpu) + " |";
      for (const RecallRow& c : r.recall)
        if (c.recipe == x.recipe) md += fmt::format(" {:.3f} ({:.2f}) |", c.repeat_loss, c.first_loss);
      md += "\n";
    }
  }
  if (!r.greedy.empty()) {
    md += fmt::format("\nGreedy continuation of \"{}\" ({} tokens; shared prefix with fp32 in tokens):\n\n| recipe | shared | text |\n|---|---|---|\n",
                      req.prompt, req.generate);
    for (const GreedyRow& g : r.greedy) {
      std::string t;
      for (char c : g.text) t += c == '\n' ? std::string("⏎") : c == '|' ? std::string("\\|") : std::string(1, c);
      md += fmt::format("| {} | {} | {} |\n", eval_label(g.recipe, g.gpu), g.shared_prefix, t);
    }
  }
  return md;
}

void write_eval_outputs(const EvalRequest& req, const EvalResult& r, const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) fail("{}: cannot create the output folder ({})", out_dir, ec.message());
  AtomicOutput csv(fs::path(out_dir) / "eval.csv"), md(fs::path(out_dir) / "eval.md");
  {
    std::ofstream f(csv.temp_path());
    f << "recipe,bits,eff_bits,eff_bits_128k,loss,ppl,dloss,kl,top1,device\n";
    for (const EvalRow& x : r.rows)
      f << fmt::format("{},{},{:.4f},{:.4f},{:.6f},{:.6f},{:.6f},{:.6g},{:.6f},{}\n", x.recipe, x.bits, x.eff_bits, x.eff_bits_128k, x.loss,
                       x.ppl, x.dloss, x.kl, x.top1, x.gpu ? "gpu" : "cpu");
    if (!f.flush()) fail("{}: write failed", csv.final_path().string());
  }
  {
    std::ofstream f(md.temp_path());
    f << eval_markdown(req, r);
    if (!f.flush()) fail("{}: write failed", md.final_path().string());
  }
  std::unique_ptr<AtomicOutput> rcsv, rpng;
  if (!r.recall.empty()) {
    rcsv = std::make_unique<AtomicOutput>(fs::path(out_dir) / "recall.csv");
    rpng = std::make_unique<AtomicOutput>(fs::path(out_dir) / "recall.png");
    std::ofstream f(rcsv->temp_path());
    f << "recipe,distance,repeat_loss,first_loss,device\n";
    for (const RecallRow& x : r.recall)
      f << fmt::format("{},{},{:.6f},{:.6f},{}\n", x.recipe, x.distance, x.repeat_loss, x.first_loss, x.gpu ? "gpu" : "cpu");
    f.close();
    run_python(plots_script("recall.py"), {rcsv->temp_path().string(), rpng->temp_path().string(), r.model_name},
               rpng->final_path().string());
  }
  csv.commit();
  md.commit();
  if (rcsv) rcsv->commit(), rpng->commit();
}

}  // namespace oscar
