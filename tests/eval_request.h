// eval_request.h: the oscar-eval requests the tests start from: a model over the KJV text, `tokens` tokens evaluated
// and as many calibrating, no progress lines. Recipes, widths, recall, greedy and the checks are the caller's.
#pragma once
#include <string>

#include "oscar/11_eval/eval_types.h"
#include "test_data.h"

namespace oscar::test {

// `model`: a llama2.c checkpoint with its `tokenizer`, or a GGUF file with tokenizer "" (its own).
inline EvalRequest eval_request(const std::string& model, const std::string& tokenizer, int tokens) {
  EvalRequest r;
  r.model = model;
  r.tokenizer = tokenizer;
  r.text = kjv_text();
  r.tokens = tokens;
  r.calib_tokens = tokens;
  r.progress = false;
  return r;
}

// The bundled llama2.c models (stories260K, kjv-llama-hd128), with the tokenizer they share.
inline EvalRequest stories_request(int tokens) { return eval_request(stories_model(), stories_tokenizer(), tokens); }
inline EvalRequest hd128_request(int tokens) { return eval_request(hd128_model(), stories_tokenizer(), tokens); }

// SmolLM2's GGUF on Revelation (the text's last 404 lines), calibrated on Genesis (its first lines).
inline EvalRequest smollm2_request(int tokens) {
  EvalRequest r = eval_request(smollm2_gguf(), "", tokens);
  r.offset = -404;
  r.calib_offset = 0;
  return r;
}

}  // namespace oscar::test
