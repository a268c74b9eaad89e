// tables.cpp: oscar-eval's Markdown tables, CSVs, recall plot and output folder check.
#include "oscar/09_eval/tables.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "oscar/11_report/plotting.h"

namespace fs = std::filesystem;

namespace oscar {

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

std::string eval_csv(const EvalResult& r) {
  std::string s = "recipe,bits,eff_bits,eff_bits_128k,loss,ppl,dloss,kl,top1,device\n";
  for (const EvalRow& x : r.rows)
    s += fmt::format("{},{},{:.4f},{:.4f},{:.6f},{:.6f},{:.6f},{:.6g},{:.6f},{}\n", x.recipe, x.bits, x.eff_bits, x.eff_bits_128k, x.loss,
                     x.ppl, x.dloss, x.kl, x.top1, x.gpu ? "gpu" : "cpu");
  return s;
}

std::string recall_csv(const EvalResult& r) {
  std::string s = "recipe,distance,repeat_loss,first_loss,device\n";
  for (const RecallRow& x : r.recall)
    s += fmt::format("{},{},{:.6f},{:.6f},{}\n", x.recipe, x.distance, x.repeat_loss, x.first_loss, x.gpu ? "gpu" : "cpu");
  return s;
}

void check_output_folder(const std::string& dir) {
  if (dir.empty()) fail("--out is empty; name the output folder");
  std::error_code ec;
  const fs::path p(dir);
  const fs::file_status st = fs::status(p, ec);
  fs::path probe_in;
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) fail("{}: --out names an existing file, not a folder; choose a folder", dir);
    probe_in = p;
  } else {
    fs::path a = fs::absolute(p, ec).parent_path();
    while (!fs::exists(a, ec) && a.has_parent_path() && a != a.parent_path()) a = a.parent_path();
    if (!fs::is_directory(a, ec))
      fail("{}: the output folder cannot be created: {} is not a folder; choose another --out", dir, a.string());
    probe_in = a;
  }
  // A folder made and removed at once: writable (and on a writable file system), leaving nothing behind.
  const fs::path probe = probe_in / fmt::format(".oscar-probe-{}", ::getpid());
  if (::mkdir(probe.c_str(), 0700) != 0)
    fail("{}: the output folder {} ({}); choose another --out", dir,
         probe_in == p ? "is not writable" : fmt::format("cannot be created in {}", probe_in.string()), std::strerror(errno));
  ::rmdir(probe.c_str());
}

void write_eval_outputs(const EvalRequest& req, const EvalResult& r, const std::string& out_dir) {
  check_output_folder(out_dir);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) fail("{}: cannot create the output folder ({}); choose another --out", out_dir, ec.message());
  AtomicOutput csv(fs::path(out_dir) / "eval.csv"), md(fs::path(out_dir) / "eval.md");
  auto put = [](AtomicOutput& o, const std::string& text) { o.write(text); };  // errors name the file and the reason
  put(csv, eval_csv(r));
  put(md, eval_markdown(req, r));
  std::unique_ptr<AtomicOutput> rcsv, rpng;
  if (!r.recall.empty()) {
    rcsv = std::make_unique<AtomicOutput>(fs::path(out_dir) / "recall.csv");
    rpng = std::make_unique<AtomicOutput>(fs::path(out_dir) / "recall.png");
    put(*rcsv, recall_csv(r));
    run_python(plots_script("recall.py"), {rcsv->temp_path().string(), rpng->temp_path().string(), r.model_name},
               rpng->final_path().string());
  }
  csv.commit();
  md.commit();
  if (rcsv) rcsv->commit(), rpng->commit();
}

}  // namespace oscar
