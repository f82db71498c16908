// Horizon: what an evaluation does, independent of how a run was trained. train/ fills these
// from a recipe (Recipe::eval_options()); eval/ never sees a recipe.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attention/documents.h"
#include "attention/spec.h"
#include "data/needles.h"
#include "distributed/context/exchange.h"

namespace hz::eval {

// Inference-time changes to a trained model, applied per evaluation length (eval/inference.h).
struct InferenceOptions {
  // RoPE frequency scaling of the RoPE layers (unset: as trained); factor s = length / train_len
  std::optional<attn::RopeScaling> rope_scaling;
  // LongRoPE's searched rescale factors for rope_scaling longrope (empty: the layers' own)
  std::vector<double> longrope_long_factors, longrope_short_factors;
  double swan_a = 0;               // > 0: SWAN row scaling g(n) = ln(a + n) / ln(a) on global NoPE layers
  double drope_c = 0;              // != 0: temperature beta = 1 + c ln s on identity-logit layers
  bool lampe = false;              // LaMPE on RoPE layers
  double lampe_L = 0;              // mapping scale (0 = 3/4 of train_len)
  double lampe_a = 0, lampe_b = 10;
  int64_t lampe_local = 512, lampe_sink = 200;
};

// How packed validation sequences are scored: as trained (data.documents / data.position_reset).

// Needle-in-a-haystack tasks in RULER's formats (data/needles.h documents them).
struct NeedleOptions {
  std::vector<std::string> tasks;  // [] = off; names from data::needle_task_names()
  int64_t samples = 0;             // examples per (task, length, depth) cell
  std::vector<double> depths{0.0, 0.25, 0.5, 0.75, 1.0};
  data::NeedleFormat format = data::NeedleFormat::Ruler;  // RULER's wording | the same facts in fewer tokens
  bool per_example = false;        // every example's output and score (needles_examples.jsonl)
  bool retrieval_heads = false;    // score every attention head as a retrieval head (eval/retrieval.h)
};

struct EvalOptions {
  int64_t train_len = 256;           // training length: s = length / train_len
  uint64_t seed = 1234;            // examples of the synthetic tasks
  std::string tokenizer = "byte";
  std::vector<int64_t> lengths;    // evaluation lengths (must be set)
  int64_t batches = 4;             // validation batches per length
  int64_t skip_batches = 0;        // validation batches passed over first (a search selects on batches the report does not score)
  int64_t batch_size = 8;
  InferenceOptions inference;
  std::vector<double> fit_drope_c; // candidate DroPE c: the best per length (lengths > train_len)
  std::vector<double> fit_swan_a;  // candidate SWAN a: the best per 128-token window and per length
  int64_t swan_window = 128;       // window of the per-window fit of a (the SWAN paper)
  int64_t passkey_examples = 0;    // teacher-forced passkey grid (0 = off)
  std::vector<double> passkey_depths{0.0, 0.25, 0.5, 0.75, 1.0};
  NeedleOptions needles;           // generated answers over (task, length, depth)
  int64_t probe_sequences = 0;     // > 0: linear position probe per layer on this many sequences
  attn::DocumentOptions documents;       // validation batches: stream, or masked documents as trained
  // Context parallelism: the loss and the NLL by position score each sequence split over this
  // group's ranks (distributed/context/: the zigzag layout at each length), so a length no one rank
  // holds can be measured; every rank gets the whole result. Null: each rank scores alone. The
  // communicator must outlive the evaluation.
  dist::Communicator* context = nullptr;
  // how layers that read the whole sequence exchange keys over it (parallel.context_exchange);
  // a ring: keys and values go round the group, so no rank ever holds the whole sequence's
  dist::ContextExchange context_exchange = dist::ContextExchange::Ring;
};

}  // namespace hz::eval
