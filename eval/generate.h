// Horizon: text generation with the KV cache (nn/kv_cache.h): prefill the prompt, then one
// token per step, greedy (temperature 0) or sampled (temperature T > 0 and nucleus top-p).
//
// Sampling is reproducible: step i draws one uniform from hz::Generator(seed, /*stream=*/i)
// (Philox, core/rng.h), so a (model, prompt, options) triple always yields the same tokens, on
// any thread count. Nucleus: the smallest set of most likely tokens whose probability reaches
// top_p (ties broken by token id), renormalised.
//
// One generation holds prompt + max_new_tokens tokens (its capacity): every length-dependent
// choice (SCOPE scopes, dynamic NTK, DroPE temperature, LaMPE's mapping) is resolved for it, so
// greedy tokens equal the argmax of the full forward over the same tokens at that T. Inference
// options (eval/inference.h) are applied for that length while generating.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "eval/options.h"
#include "nn/transformer.h"

namespace hz::eval {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0 = greedy
  double top_p = 1.0;        // nucleus sampling mass in (0, 1]
  uint64_t seed = 0;
  int32_t stop_token = -1;   // >= 0: stop after generating it (e.g. the tokenizer's EOS)
  int64_t train_len = 0;       // training length (0 = the model's train_len)
  InferenceOptions inference;
  // Packed documents (masked, with position reset, as trained with data.documents: masked and
  // data.position_reset): the prompt's documents end at each `eos`; only the last one is visible
  // to what follows, so the cache holds it alone, from position 0; a generated eos ends the
  // document and the cache restarts after it. Stream: the whole prompt is one sequence.
  attn::DocumentOptions documents;
  int32_t eos = -1;
  std::string model;  // the model's file, named when its logits are not finite (eval::require_finite)
};

struct Generation {
  std::vector<int32_t> tokens;  // the continuation only
  int64_t prompt_kept = 0;   // prompt tokens the cache held (the last document with masked documents)
  double prefill_seconds = 0;
  std::vector<double> step_seconds;  // one per decoding step after the prefill
  int64_t capacity = 0;               // prompt + max_new_tokens
  int64_t kv_bytes = 0;              // the cache's keys and values
};

// Greedy or sampled continuation of `prompt` (non-empty).
Generation generate(nn::Transformer& m, const std::vector<int32_t>& prompt, const GenerateOptions& o);

// The token chosen from one row of logits (V): argmax at temperature 0, else a nucleus sample
// driven by the uniform u in [0, 1).
int32_t choose_token(const std::vector<double>& logits, double temperature, double top_p, double u);

}  // namespace hz::eval
