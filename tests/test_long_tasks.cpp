// test_long_tasks.cpp: the long-context task generator (lib 11_eval/long_tasks.h) with the bundled stories260K
// tokenizer counting tokens: every prompt fits its length and fills it (one more haystack unit would not fit), the
// needle sits at its depth, the answers are in the prompt exactly where the needle put them, a seed gives the same
// tasks and another seed other ones, JSONL round-trips, the score is RULER's string match, bad specs are refused.
#include <catch2/catch.hpp>

#include <cctype>

#include <cmath>
#include <fstream>

#include "oscar/01_core/error.h"
#include "oscar/02_model/tokenizers/tokenizer.h"
#include "oscar/11_eval/long_tasks.h"
#include "test_data.h"

using namespace oscar;

namespace {

const Tokenizer& tok() {
  static const Tokenizer t = Tokenizer::load(oscar::test::stories_tokenizer(), 512);
  return t;
}
int count(std::string_view s) { return static_cast<int>(tok().encode(s, true, false).size()); }
// KIVI's noise sentence, the haystack's unit (a multi-key distractor needle is about as long)
int unit_tokens() { return count("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."); }

TaskSpec spec(uint64_t seed = 7) {
  TaskSpec s;
  s.tasks = {LongTask::passkey, LongTask::niah_single, LongTask::niah_multikey, LongTask::variable_tracking};
  s.lengths = {512, 2048};
  s.depths = {0.1, 0.5, 0.9};
  s.samples = 2;
  s.seed = seed;
  return s;
}

}  // namespace

TEST_CASE("long-context tasks fit their lengths and put the needle at its depth", "[long_tasks]") {
  const auto samples = generate_long_tasks(spec(), count);
  REQUIRE(samples.size() == 4 * 2 * 3 * 2);
  for (const TaskSample& s : samples) {
    INFO(s.task << " " << s.target_tokens << " depth " << s.depth << " #" << s.index);
    CHECK(s.prompt_tokens == count(s.prompt));
    CHECK(s.prompt_tokens <= s.target_tokens);
    CHECK(s.prompt_tokens > s.target_tokens - 2 * unit_tokens());  // filled: one more unit would not fit
    CHECK(s.prompt.size() >= s.answer_prefix.size());
    CHECK(s.prompt.compare(s.prompt.size() - s.answer_prefix.size(), s.answer_prefix.size(), s.answer_prefix) == 0);
    // the needle starts where `depth` of the haystack's units precede it (within one unit's share)
    CHECK(std::abs(s.needle_position - s.depth) < 0.02 + 1.5 * unit_tokens() / (s.target_tokens - 100.0));
    REQUIRE_FALSE(s.answers.empty());
    for (const std::string& a : s.answers) CHECK(s.prompt.find(a) != std::string::npos);
    CHECK(score_answer(s, "so: " + [&] {
            std::string all;
            for (const auto& a : s.answers) all += a + ", ";
            return all;
          }()) == 1.0);
    CHECK(score_answer(s, "I do not know.") == 0.0);
    if (s.answers.size() == 5) {  // variable tracking: RULER's partial credit, case ignored
      const std::string lower = [&] {
        std::string t = s.answers[0] + " and " + s.answers[3];
        for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return t;
      }();
      CHECK(score_answer(s, lower) == Approx(0.4));
    }
  }
  // the key of a passkey sample is 5 digits, a needle value 7, a variable chain 5 names
  CHECK(samples[0].answers[0].size() == 5);
  CHECK(samples[12].answers[0].size() == 7);
  CHECK(samples.back().answers.size() == 5);
  // a multi-key haystack is all needles: other keys, never the one asked for
  const TaskSample& mk = samples[24];
  CHECK(mk.task == "niah_multikey");
  const std::string asked = mk.answer_prefix.substr(std::string("The special number for ").size(), mk.answer_prefix.find(" in the text") - 23);
  size_t n_needles = 0, n_asked = 0;
  for (size_t p = mk.prompt.find("The special number for "); p != std::string::npos; p = mk.prompt.find("The special number for ", p + 1)) {
    ++n_needles;
    n_asked += mk.prompt.compare(p + 23, asked.size() + 4, asked + " is ") == 0;
  }
  CHECK(n_needles > 10);
  CHECK(n_asked == 1);
}

TEST_CASE("an answer scores only as a whole value", "[long_tasks]") {
  TaskSample key;
  key.answers = {"22855"};
  CHECK(score_answer(key, " 228555.") == 0.0);  // an extra digit is a wrong key
  CHECK(score_answer(key, " 122855") == 0.0);
  CHECK(score_answer(key, "x22855") == 0.0);
  CHECK(score_answer(key, " 22855.") == 1.0);
  CHECK(score_answer(key, "The pass key is 22855\nThe grass") == 1.0);
  CHECK(score_answer(key, "228555 or 22855") == 1.0);  // a later whole occurrence counts
  TaskSample values;
  values.answers = {"1234567", "Blue"};
  CHECK(score_answer(values, "1234567, 76543210 and BLUE") == 1.0);
  CHECK(score_answer(values, "12345678 and blue") == Approx(0.5));
  CHECK(score_answer(values, "bluest 1234567") == Approx(0.5));
}

TEST_CASE("long-context tasks are deterministic for a seed", "[long_tasks]") {
  const auto a = generate_long_tasks(spec(7), count), b = generate_long_tasks(spec(7), count), c = generate_long_tasks(spec(8), count);
  REQUIRE(a.size() == b.size());
  size_t same_as_other_seed = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].prompt == b[i].prompt);
    CHECK(a[i].answers == b[i].answers);
    same_as_other_seed += a[i].answers == c[i].answers;
  }
  CHECK(same_as_other_seed == 0);
}

TEST_CASE("long-context tasks round-trip through JSONL; bad files and specs are refused", "[long_tasks]") {
  auto a = generate_long_tasks(spec(), count);
  const TokenEncoder encode = [](std::string_view s) { return tok().encode(s, true, false); };
  add_prompt_ids(a, encode);
  const auto path = oscar::test::scratch() / "tasks.jsonl";
  write_tasks_jsonl(path, a);
  const auto b = read_tasks_jsonl(path);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].prompt == b[i].prompt);
    CHECK(a[i].answers == b[i].answers);
    CHECK(a[i].answer_prefix == b[i].answer_prefix);
    CHECK(a[i].prompt_tokens == b[i].prompt_tokens);
    // the ids are the prompt's encoding; the question's ids encode the last line (question and answer prefix)
    CHECK(b[i].prompt_ids == encode(a[i].prompt));
    CHECK(static_cast<int>(b[i].prompt_ids.size()) == a[i].prompt_tokens);
    const size_t nl = a[i].prompt.rfind('\n');
    CHECK(b[i].question_start == static_cast<int>(encode(a[i].prompt.substr(0, nl + 1)).size()));
  }
  const auto bad = oscar::test::scratch_file("bad.jsonl", "{\"task\": \"passkey\"}\n");
  CHECK_THROWS_WITH(read_tasks_jsonl(bad), Catch::Contains("bad.jsonl: line 1"));
  oscar::test::scratch_file("bad.jsonl", "{\"task\": \"sudoku\", \"answers\": [\"1\"]}\n");
  CHECK_THROWS_WITH(read_tasks_jsonl(bad), Catch::Contains("unknown long-context task 'sudoku'"));
  {  // a question_start outside the prompt's ids, on line 2
    std::ifstream in(path);
    std::string first, second;
    std::getline(in, first);
    std::getline(in, second);
    const size_t at = second.find("\"question_start\":");
    REQUIRE(at != std::string::npos);
    second.replace(at, second.find_first_of(",}", at) - at, "\"question_start\":999999");
    oscar::test::scratch_file("bad.jsonl", first + "\n" + second + "\n");
    CHECK_THROWS_WITH(read_tasks_jsonl(bad), Catch::Contains("bad.jsonl: line 2") && Catch::Contains("question_start 999999"));
  }
  TaskSpec s = spec();
  s.lengths = {100};
  CHECK_THROWS_WITH(generate_long_tasks(s, count), Catch::Contains("too short"));
  s = spec();
  s.depths = {1.5};
  CHECK_THROWS_WITH(generate_long_tasks(s, count), Catch::Contains("outside [0, 1]"));
  CHECK_THROWS_WITH(long_task_from_name("needle"), Catch::Contains("use passkey, niah_single"));
}

TEST_CASE("long-context task lengths stay within the model's context", "[long_tasks]") {
  CHECK(default_task_lengths(32768) == std::vector<int>{1024, 2048, 4096, 8192, 16384, 32768});
  CHECK(default_task_lengths(8192) == std::vector<int>{1024, 2048, 4096, 8192});
  CHECK(default_task_lengths(512) == std::vector<int>{512});
  TaskSpec s = spec();
  s.context = 1024;
  s.model = "m.gguf";
  CHECK_THROWS_WITH(generate_long_tasks(s, count), Catch::Contains("m.gguf: a task of 2048 tokens is longer than the model's context of 1024"));
  // A length equal to the context leaves room for the answer: prompt + answer tokens fit the context.
  s.lengths = {1024};
  for (const TaskSample& t : generate_long_tasks(s, count)) {
    INFO(t.task);
    CHECK(t.prompt_tokens + answer_tokens(t.task) <= 1024);
    CHECK(t.prompt_tokens > 1024 - answer_tokens(t.task) - 2 * unit_tokens());
  }
}
