// Horizon: applying inference-time options (eval/options.h) to a trained model for one
// evaluation length L, and restoring the layers afterwards:
//   rope_scaling  RoPE layers get PI / NTK / dynamic NTK / YaRN / Llama 3 / LongRoPE with s = L / train_len
//                 (LongRoPE with longrope_long_factors / longrope_short_factors when given);
//   swan_a        global NoPE layers (pos none, causal) get SWAN row scaling g(n) = ln(a + n) / ln(a);
//   drope_c       identity-logit layers get the temperature beta = 1 + c ln s;
//   lampe         RoPE layers attend through LaMPE (attention/lampe.h).
// Evaluation, decoding (eval/generate.h) and the needle grid all go through this one class, so
// an option means the same everywhere. An option that reaches no layer (e.g. swan_a on a model
// without global NoPE layers) throws ValueError instead of silently changing nothing.
#pragma once
#include <optional>
#include <utility>
#include <vector>

#include "eval/options.h"
#include "nn/transformer.h"

namespace hz::eval {

class ScopedInference {
 public:
  ScopedInference(nn::Transformer& m, const InferenceOptions& o, int64_t train_len, int64_t L);
  ~ScopedInference();
  ScopedInference(const ScopedInference&) = delete;
  ScopedInference& operator=(const ScopedInference&) = delete;

 private:
  nn::Transformer& m_;
  std::vector<std::pair<attn::AttentionSpec, std::optional<attn::LampeConfig>>> saved_;
};

}  // namespace hz::eval
