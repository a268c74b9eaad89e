// long_tasks.cpp: the long-context retrieval tasks of long_tasks.h: prompt templates, haystacks fitted to a token
// length, needles at a depth, JSONL in and out, RULER's string-match score.
#include "oscar/11_eval/long_tasks.h"

#include <algorithm>
#include <cctype>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "oscar/01_core/error.h"
#include "oscar/01_core/file_io.h"
#include "oscar/02_model/tokenizers/gguf_vocab.h"
#include "oscar/02_model/loaded_model.h"

namespace oscar {
namespace {

// KIVI's passkey prompt (after Landmark Attention's passkey test): its task description, noise sentence and needle.
constexpr std::string_view kPasskeyIntro =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz you about "
    "the important information there.";
constexpr std::string_view kNoise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

// This project's wording for the needle tasks.
constexpr std::string_view kNeedleIntro =
    "A long text follows. Hidden in it are special numbers, each filed under a key of two words. Remember them: you will "
    "be asked for one at the end.";
constexpr std::string_view kVariableIntro =
    "A long text follows. Hidden in it are assignments of variables, some to a number and some to another variable. "
    "Remember them: you will be asked about them at the end.";

// Word lists of the keys (this project's own): an adjective and a noun make a key such as "amber-lantern".
constexpr std::array<std::string_view, 40> kAdjectives = {
    "amber",  "brisk",  "calm",   "dusty",  "eager",  "faded",  "gentle", "hollow", "icy",    "jolly",
    "keen",   "lofty",  "mellow", "narrow", "odd",    "pale",   "quiet",  "rusty",  "silent", "tidy",
    "upper",  "vivid",  "wary",   "young",  "zesty",  "bold",   "crisp",  "dim",    "early",  "fierce",
    "grand",  "humble", "inner",  "jagged", "kind",   "lucky",  "misty",  "noble",  "olive",  "proud"};
constexpr std::array<std::string_view, 40> kNouns = {
    "anchor", "basket", "candle", "desk",    "engine", "feather", "garden", "harbor", "island", "jacket",
    "kettle", "ladder", "mirror", "needle",  "orchard", "pillow", "quarry", "river",  "saddle", "tunnel",
    "umbrella", "valley", "window", "yard",  "zipper", "bridge", "cabin",  "drum",   "fence",  "glacier",
    "helmet", "inkwell", "jar",   "kiln",    "lantern", "meadow", "nest",  "oven",   "pebble", "quilt"};

// One deterministic stream per (seed, task, length, depth, sample): splitmix64 over the five.
std::mt19937_64 stream(uint64_t seed, int task, int length, int depth_index, int sample) {
  uint64_t x = seed;
  for (uint64_t v : {static_cast<uint64_t>(task), static_cast<uint64_t>(length), static_cast<uint64_t>(depth_index),
                     static_cast<uint64_t>(sample)}) {
    x += 0x9E3779B97F4A7C15ull + v;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
  }
  return std::mt19937_64(x);
}

int uniform(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

std::string word_key(std::mt19937_64& rng) {
  return std::string(kAdjectives[uniform(rng, 0, kAdjectives.size() - 1)]) + "-" + std::string(kNouns[uniform(rng, 0, kNouns.size() - 1)]);
}
std::string var_name(std::mt19937_64& rng) {
  std::string s(5, 'A');
  for (char& c : s) c = static_cast<char>('A' + uniform(rng, 0, 25));
  return s;
}

// A sample's parts: the haystack is `units(n)` (n units), the needles go after the units nearest their depths.
struct Layout {
  std::string intro, question, answer_prefix;
  bool needle_lines = false;  // each needle on a line of its own (KIVI's passkey prompt), else inside the haystack's text
  std::vector<std::string> answers;
  std::vector<std::pair<double, std::string>> needles;  // (depth, text), in order
  std::function<std::string(int i)> unit;               // haystack unit i
};

struct Built {
  std::string text;
  size_t needle_char = 0;                       // where the first needle starts
  size_t haystack_begin = 0, haystack_end = 0;  // the haystack's characters (needles included)
};

Built assemble(const Layout& l, int n) {
  Built b;
  b.text = l.intro;
  b.text += "\n";
  b.haystack_begin = b.text.size();
  size_t k = 0;
  bool first = true;
  auto put = [&](const std::string& s) {
    if (!first) b.text += ' ';
    first = false;
    b.text += s;
  };
  for (int i = 0; i <= n; ++i) {
    while (k < l.needles.size() && static_cast<int>(std::lround(l.needles[k].first * n)) <= i) {
      if (l.needle_lines) {  // KIVI: task description, noise, the needle, noise, question: lines joined by '\n'
        if (!first) b.text += '\n';
        if (k == 0) b.needle_char = b.text.size();
        b.text += l.needles[k++].second;
        b.text += '\n';
        first = true;
        continue;
      }
      if (k == 0) b.needle_char = b.text.size() + (first ? 0 : 1);
      put(l.needles[k++].second);
    }
    if (i < n) put(l.unit(i));
  }
  if (l.needle_lines && first && b.text.back() == '\n') b.text.pop_back();  // a needle at the very end: one line break
  b.haystack_end = b.text.size();
  b.text += "\n";
  b.text += l.question;
  b.text += " ";
  b.text += l.answer_prefix;
  return b;
}

Layout layout(LongTask task, double depth, std::mt19937_64& rng) {
  Layout l;
  switch (task) {
    case LongTask::passkey: {
      const std::string key = std::to_string(uniform(rng, 10000, 99999));
      l.intro = kPasskeyIntro;
      l.needles = {{depth, "The pass key is " + key + ". Remember it. " + key + " is the pass key."}};
      l.question = "What is the pass key?";
      l.answer_prefix = "The pass key is";
      l.answers = {key};
      l.needle_lines = true;
      l.unit = [](int) { return std::string(kNoise); };
      break;
    }
    case LongTask::niah_single:
    case LongTask::niah_multikey: {
      const std::string key = word_key(rng), value = std::to_string(uniform(rng, 1000000, 9999999));
      l.intro = kNeedleIntro;
      l.needles = {{depth, "The special number for " + key + " is " + value + "."}};
      l.question = "What is the special number for " + key + " in the text above?";
      l.answer_prefix = "The special number for " + key + " in the text above is";
      l.answers = {value};
      if (task == LongTask::niah_single) {
        l.unit = [](int) { return std::string(kNoise); };
      } else {  // distractors: other keys (never the asked one), each with its own value, drawn once per unit index
        auto seed = rng();
        l.unit = [key, seed](int i) {
          std::mt19937_64 r(seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i + 1));
          std::string k;
          do k = word_key(r);
          while (k == key);
          return "The special number for " + k + " is " + std::to_string(uniform(r, 1000000, 9999999)) + ".";
        };
      }
      break;
    }
    case LongTask::variable_tracking: {
      const std::string value = std::to_string(uniform(rng, 10000, 99999));
      std::set<std::string> seen;
      std::vector<std::string> names;
      while (names.size() < 5) {
        std::string v = var_name(rng);
        if (seen.insert(v).second) names.push_back(v);
      }
      l.intro = kVariableIntro;
      // the chain from `depth` on, its links evenly spread over the rest of the haystack, in order
      for (size_t i = 0; i < names.size(); ++i) {
        const double d = depth + (1.0 - depth) * static_cast<double>(i) / static_cast<double>(names.size());
        l.needles.push_back({d, "VAR " + names[i] + " = " + (i == 0 ? value : "VAR " + names[i - 1]) + "."});
      }
      l.question = "Which variables are assigned the value " + value + ", directly or through other variables, in the text above?";
      l.answer_prefix = "The variables assigned the value " + value + " are:";
      l.answers = names;
      l.unit = [](int) { return std::string(kNoise); };
      break;
    }
  }
  return l;
}

}  // namespace

const char* long_task_name(LongTask t) {
  switch (t) {
    case LongTask::passkey: return "passkey";
    case LongTask::niah_single: return "niah_single";
    case LongTask::niah_multikey: return "niah_multikey";
    case LongTask::variable_tracking: return "variable_tracking";
  }
  return "?";
}

LongTask long_task_from_name(std::string_view name) {
  for (LongTask t : {LongTask::passkey, LongTask::niah_single, LongTask::niah_multikey, LongTask::variable_tracking})
    if (name == long_task_name(t)) return t;
  fail("unknown long-context task '{}'; use passkey, niah_single, niah_multikey or variable_tracking", name);
}

std::vector<TaskSample> generate_long_tasks(const TaskSpec& spec, const TokenCounter& count_tokens) {
  for (int len : spec.lengths) {
    if (len < 256) fail("long-context task length {} tokens is too short; use 256 or more", len);
    if (spec.context > 0 && len > spec.context)
      fail("{}: a task of {} tokens is longer than the model's context of {} tokens; use lengths up to {}", spec.model, len, spec.context,
           spec.context);
  }
  for (double d : spec.depths)
    if (!(d >= 0.0 && d <= 1.0)) fail("needle depth {} is outside [0, 1]; give depths as fractions such as 0.1 0.5 0.9", d);
  if (spec.samples < 1) fail("samples per (task, length, depth) = {}; use 1 or more", spec.samples);
  std::vector<TaskSample> out;
  for (LongTask task : spec.tasks)
    for (int len : spec.lengths)
      for (size_t di = 0; di < spec.depths.size(); ++di)
        for (int s = 0; s < spec.samples; ++s) {
          std::mt19937_64 rng = stream(spec.seed, static_cast<int>(task), len, static_cast<int>(di), s);
          const Layout l = layout(task, spec.depths[di], rng);
          // At the model's context the answer needs room too: the prompt fits the context less the answer's tokens.
          const int fit = spec.context > 0 ? std::min(len, spec.context - answer_tokens(long_task_name(task))) : len;
          // the largest haystack that fits: exponential search up, then bisection
          if (count_tokens(assemble(l, 0).text) > fit)
            fail("a {} prompt does not fit in {} tokens even without a haystack; use a longer length", long_task_name(task), len);
          int lo = 0, hi = 16;
          while (count_tokens(assemble(l, hi).text) <= fit) {
            lo = hi;
            hi *= 2;
          }
          while (hi - lo > 1) {
            const int mid = lo + (hi - lo) / 2;
            (count_tokens(assemble(l, mid).text) <= fit ? lo : hi) = mid;
          }
          const Built b = assemble(l, lo);
          TaskSample t;
          t.task = long_task_name(task);
          t.target_tokens = len;
          t.prompt_tokens = count_tokens(b.text);
          t.depth = spec.depths[di];
          t.needle_position = static_cast<double>(b.needle_char - b.haystack_begin) / static_cast<double>(b.haystack_end - b.haystack_begin);
          t.index = s;
          t.prompt = b.text;
          t.answer_prefix = l.answer_prefix;
          t.answers = l.answers;
          out.push_back(std::move(t));
        }
  return out;
}

std::vector<int> default_task_lengths(int context) {
  if (context < 1024) return {context};
  std::vector<int> l;
  for (int n = 1024; n <= context; n *= 2) l.push_back(n);
  return l;
}

ModelTokens model_tokens(const std::string& model, const std::string& tokenizer) {
  ModelTokens m;
  m.name = std::filesystem::path(model).filename().string();
  if (is_gguf(model)) {
    if (!tokenizer.empty()) fail("{}: a GGUF file carries its tokenizer; leave out --tokenizer {}", model, tokenizer);
    const GgufFile f = GgufFile::open(model);
    const std::string arch = f.get_string("general.architecture");
    if (f.has(arch + ".context_length")) m.context_length = static_cast<int>(f.get_u32(arch + ".context_length"));
    auto bpe = std::make_shared<BpeTokenizer>(vocab_spec_from_gguf(f), model);
    m.encode = [bpe](std::string_view s) { return bpe->encode(s); };
  } else {
    auto lm = std::make_shared<LoadedModel>(LoadedModel::load(model, tokenizer));
    m.context_length = lm->config.seq_len;
    m.encode = [lm](std::string_view s) { return lm->encode(s); };
  }
  m.count = [enc = m.encode](std::string_view s) { return static_cast<int>(enc(s).size()); };
  return m;
}

int question_start(const TaskSample& s, const std::vector<int>& ids, const TokenEncoder& encode) {
  const size_t nl = s.prompt.rfind('\n');
  if (nl == std::string::npos || nl == 0 || ids.size() < 2) fail("internal: a {} prompt without a question line", s.task);
  const std::vector<int> context = encode(std::string_view(s.prompt).substr(0, nl + 1));
  size_t k = 0;
  while (k < context.size() && k < ids.size() && context[k] == ids[k]) ++k;
  return static_cast<int>(std::clamp<size_t>(k, 1, ids.size() - 1));
}

void add_prompt_ids(std::vector<TaskSample>& samples, const TokenEncoder& encode) {
  for (TaskSample& s : samples) {
    s.prompt_ids = encode(s.prompt);
    s.question_start = question_start(s, s.prompt_ids, encode);
  }
}

void write_tasks_jsonl(const std::filesystem::path& path, const std::vector<TaskSample>& samples) {
  std::string text;
  for (const TaskSample& s : samples) {
    nlohmann::json j = {{"task", s.task},     {"target_tokens", s.target_tokens},     {"prompt_tokens", s.prompt_tokens},
                        {"depth", s.depth},   {"needle_position", s.needle_position}, {"index", s.index},
                        {"prompt", s.prompt}, {"answer_prefix", s.answer_prefix},     {"answers", s.answers}};
    if (!s.prompt_ids.empty()) j["prompt_ids"] = s.prompt_ids, j["question_start"] = s.question_start;
    text += j.dump();
    text += '\n';
  }
  AtomicOutput out(path);
  out.write(text);
  out.commit();
}

std::vector<TaskSample> read_tasks_jsonl(const std::filesystem::path& path) {
  const std::string text = read_text_file(path.string());
  std::vector<TaskSample> out;
  size_t line = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line;
    const std::string_view row(text.data() + pos, end - pos);
    pos = end + 1;
    if (row.empty()) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(row);
      TaskSample s;
      s.task = j.at("task").get<std::string>();
      long_task_from_name(s.task);
      s.target_tokens = j.at("target_tokens").get<int>();
      s.prompt_tokens = j.at("prompt_tokens").get<int>();
      s.depth = j.at("depth").get<double>();
      s.needle_position = j.at("needle_position").get<double>();
      s.index = j.at("index").get<int>();
      s.prompt = j.at("prompt").get<std::string>();
      s.answer_prefix = j.at("answer_prefix").get<std::string>();
      s.answers = j.at("answers").get<std::vector<std::string>>();
      if (s.answers.empty()) fail("no answers");
      if (j.contains("prompt_ids")) {
        s.prompt_ids = j.at("prompt_ids").get<std::vector<int>>();
        s.question_start = j.at("question_start").get<int>();
        if (s.question_start < 1 || s.question_start >= static_cast<int>(s.prompt_ids.size()))
          fail("question_start {} is outside the prompt's {} ids", s.question_start, s.prompt_ids.size());
      }
      out.push_back(std::move(s));
    } catch (const std::exception& e) {
      fail("{}: line {}: not a task of write_tasks_jsonl ({}); regenerate the file", path.string(), line, e.what());
    }
  }
  return out;
}

namespace {

std::string lowered(std::string_view x) {
  std::string t(x);
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t;
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// Whether `value` occurs in `text` as a whole value: no letter or digit right before or after it, so that the key
// 22855 is not found in "228555" nor "x22855".
bool holds_whole(const std::string& text, const std::string& value) {
  if (value.empty()) return false;
  for (size_t pos = text.find(value); pos != std::string::npos; pos = text.find(value, pos + 1)) {
    const size_t end = pos + value.size();
    if ((pos == 0 || !word_char(text[pos - 1])) && (end == text.size() || !word_char(text[end]))) return true;
  }
  return false;
}

}  // namespace

double score_answer(const TaskSample& s, std::string_view generated) {
  const std::string g = lowered(generated);
  int found = 0;
  for (const std::string& a : s.answers) found += holds_whole(g, lowered(a)) ? 1 : 0;
  return s.answers.empty() ? 0.0 : static_cast<double>(found) / static_cast<double>(s.answers.size());
}

int answer_tokens(const std::string& task) {
  switch (long_task_from_name(task)) {
    case LongTask::passkey: return 8;
    case LongTask::niah_single:
    case LongTask::niah_multikey: return 12;
    case LongTask::variable_tracking: return 32;
  }
  return 16;
}

}  // namespace oscar
