// long_tasks.h: long-context retrieval tasks generated in the project (no download), after RULER's rules
// (NVIDIA/RULER) in this project's own code, wording and word lists, plus KIVI's passkey prompt:
//   passkey            a 5-digit key in a haystack of one repeated noise sentence (KIVI's prompt and noise; as in
//                      KIVI, the needle is a line of its own between the noise before and after it);
//   niah_single        one needle, a 7-digit value under a word-pair key, in the noise haystack;
//   niah_multikey      the haystack is all needles: distractor word-pair keys with their own values, one asked for;
//   variable_tracking  a chain VAR A = 12345, VAR B = VAR A, ... spread through the noise; every name of the chain
//                      is the answer.
// Each sample's prompt is fitted to a target length in tokens of the model's tokenizer (the largest haystack that
// fits, counted with `count_tokens`; at the model's context, less the answer's tokens), with the needle after the
// haystack unit nearest `depth` of it. Deterministic for
// a seed (std::mt19937_64, its own stream per task x length x depth x sample). Written as JSONL so that other tools
// can run the same prompts; score_answer() is RULER's string_match_all (the share of the expected answers that
// appear in the output, case-insensitively), each answer matched as a whole value: not inside a longer run of letters
// and digits (the key 22855 is not found in "228555").
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace oscar {

enum class LongTask { passkey, niah_single, niah_multikey, variable_tracking };
const char* long_task_name(LongTask t);
// The task named `name` (as long_task_name gives); throws Error listing the names otherwise.
LongTask long_task_from_name(std::string_view name);

struct TaskSample {
  std::string task;                  // long_task_name
  int target_tokens = 0;             // the length asked for
  int prompt_tokens = 0;             // what the prompt counts (<= target_tokens)
  double depth = 0;                  // where the needle was asked to go, 0..1 of the haystack
  double needle_position = 0;        // where it went: the (first) needle's start over the haystack's characters
  int index = 0;                     // sample number within (task, length, depth)
  std::string prompt;                // the text to encode (the tokenizer adds BOS where it does)
  std::string answer_prefix;         // what the model's answer starts with (appended to the prompt by the caller)
  std::vector<std::string> answers;  // every one must appear in the generated text
  // The prompt as the model's tokenizer encodes it (BOS first where it adds one) and where its question begins (the
  // context is ids [0, question_start)): written by oscar-tasks so that tools without this tokenizer (transformers'
  // GGUF tokenizer of Gemma 3 is wrong) run the same tokens; empty / -1 in files without them.
  std::vector<int> prompt_ids;
  int question_start = -1;
};

struct TaskSpec {
  std::vector<LongTask> tasks;
  std::vector<int> lengths;    // tokens, each >= 256
  std::vector<double> depths;  // each in [0, 1]
  int samples = 5;             // per (task, length, depth)
  uint64_t seed = 20261125;
  int context = 0;             // > 0: the model's context; longer lengths are refused
  std::string model;           // the model's file, named in that refusal
};
// 1024 doubling up to `context` (the context itself when it is below 1024).
std::vector<int> default_task_lengths(int context);

// Tokens of a text as the model's tokenizer counts them (BOS included where it adds one).
using TokenCounter = std::function<int(std::string_view)>;
// A text's ids as the model's tokenizer encodes it (BOS included where it adds one).
using TokenEncoder = std::function<std::vector<int>(std::string_view)>;

// Every sample of `spec`, in the order task, length, depth, sample. Throws Error when a length is below 256 tokens or
// above spec.context, a depth outside [0, 1], or when even the smallest haystack does not fit a length.
std::vector<TaskSample> generate_long_tasks(const TaskSpec& spec, const TokenCounter& count_tokens);

// The token counter of a model's tokenizer, and its context length: `model` a *.gguf file (the tokenizer from its
// metadata; the model itself is not built, so any architecture's vocabulary serves) or a llama2.c checkpoint with its
// tokenizer.bin. Throws Error naming the file.
struct ModelTokens {
  TokenCounter count;
  TokenEncoder encode;
  int context_length = 0;
  std::string name;
};
ModelTokens model_tokens(const std::string& model, const std::string& tokenizer);

// Where the question of `s` begins in `ids` (its prompt encoded): after the tokens that encode the prompt up to its
// last line break (the context); the longest common prefix of the two encodings.
int question_start(const TaskSample& s, const std::vector<int>& ids, const TokenEncoder& encode);
// Fills prompt_ids and question_start of every sample with `encode`.
void add_prompt_ids(std::vector<TaskSample>& samples, const TokenEncoder& encode);

// One JSON object per line (the fields of TaskSample), written through AtomicOutput.
void write_tasks_jsonl(const std::filesystem::path& path, const std::vector<TaskSample>& samples);
// Reads what write_tasks_jsonl writes; throws Error naming the file and line on anything else.
std::vector<TaskSample> read_tasks_jsonl(const std::filesystem::path& path);

// RULER's string_match_all: the share of the expected answers that appear in `generated`, ignoring case (1 when
// every one does; single-answer tasks score 0 or 1).
double score_answer(const TaskSample& s, std::string_view generated);
// The greedy tokens a task's answer gets (passkey 8, the needle tasks 12, variable tracking 32), as RULER sizes its
// tokens_to_generate to the answer.
int answer_tokens(const std::string& task);

}  // namespace oscar
