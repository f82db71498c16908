// Horizon: LongRoPE's search for per-pair RoPE rescale factors (Ding et al. 2024, "LongRoPE:
// Extending LLM Context Window Beyond 2 Million Tokens", arXiv 2402.13753, section 3.2), on a
// trained model and its validation text.
//
// A candidate is one factor per frequency pair, lambda_m for m = 0 .. D/2 - 1 (pair 0 the fastest,
// w_m = base^(-2m/D)), applied at evaluation as eval.rope_scaling=longrope does: w'_m = w_m / lambda_m
// with the attention factor sqrt(1 + ln s / ln C_train), s = L / C_train (attention/rope.h). The
// search minimises the held-out loss at the target length L over the same validation batches for
// every candidate — batches after the eval.batches that `horizon eval` reports, so a run evaluated
// with the found factors is scored on text the search never selected on — under LongRoPE's constraints: 1 <= lambda_m <= max_factor (1.25 s unless given)
// and lambda non-decreasing in m (a slower pair is never interpolated less than a faster one).
// Evolution as in the paper, at a CPU's budget: the first population holds PI (lambda = s), the
// NTK-aware factors (lambda_m = a^(2m/D), a = s^(D/(D-2))), YaRN's ramp (lambda_m = 1 / ((1 - g)/s
// + g), g the ramp of C_train / wavelength_m between 1 and 32) and mutations of them; each
// generation keeps the best `parents` and fills the population with their mutations (each factor
// multiplied by exp(N(0, sigma)) with probability 0.3) and crossovers (each factor from one of two
// parents), every child made monotone (running maximum) and clipped. Deterministic per seed.
// (LongRoPE also searches n_hat, the first positions left unscaled; Horizon's longrope applies
// the factors to every position, as transformers' "longrope" does, so the search leaves it out.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"
#include "eval/options.h"
#include "nn/transformer.h"

namespace hz::study {

struct LongRopeSearchOptions {
  int64_t length = 0;        // target evaluation length L (> the training length)
  int64_t population = 16;   // candidates per generation
  int64_t generations = 6;   // the first population's included
  int64_t parents = 4;       // the best kept from one generation to the next
  int64_t batches = 0;       // validation batches scoring each candidate (0 = eval.batches), after eval.batches
  double sigma = 0.25;       // mutation: lambda_m *= exp(N(0, sigma))
  double max_factor = 0.0;   // upper bound of lambda (0 = 1.25 s)
  uint64_t seed = 1;
};

struct LongRopeCandidate {
  std::vector<double> factors;
  double loss = 0.0;  // held-out nats per token at the target length
};

struct LongRopeSearchResult {
  int64_t length = 0, train_len = 0;
  LongRopeCandidate best;
  double loss_none = 0, loss_pi = 0, loss_yarn = 0;  // the same batches: as trained, PI, YaRN
  std::vector<double> best_per_generation;
  int64_t evaluated = 0;  // candidates scored
};

// The search on model m (its RoPE layers) over the validation shard `val`, scoring each candidate
// with eval::evaluate at opts.length on opts.batches batches of eo.batch_size after eo's own
// eo.batches (its other measurements are switched off).
LongRopeSearchResult longrope_search(nn::Transformer& m, const data::Shard& val, eval::EvalOptions eo,
                                     const LongRopeSearchOptions& opts);

// LongRoPE's factor file: {"long_factor": [...], "short_factor": [1, ...], ...} with the search's
// settings and losses, which eval.longrope_long_factors=FILE reads (and Hugging Face's rope_scaling
// uses the same keys).
std::string longrope_json(const LongRopeSearchResult& r, const LongRopeSearchOptions& opts);

}  // namespace hz::study
