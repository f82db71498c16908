// Horizon: the feasible RoPE base for a length, after "Rotary Positional Embeddings as Phase Modulation:
// Theoretical Bounds on the RoPE Base for Long-Context Transformers" (Liu 2026, arXiv 2602.10959).
//
// RoPE's pair m turns by w_m per position; its slowest pair, w_min = base^(-(D-2)/D) for plain RoPE,
// carries the longest-range signal. Over a length L (docs/methods.md, "RoPE base bounds"):
//   aliasing   the slowest pair must not wrap:                       L w_min < 2 pi
//   stability  its phase must keep its cosine above eps, compounded
//              over the N rotating layers (the paper's depth bound):  L w_min <= arccos(eps^(1/N))
//   precision  one position's phase step must stay above the phase's
//              machine epsilon, or positions become indistinguishable: w_min > eps_mach
// The paper states them with w_min ~ 1/base (L < 2 pi base, base >= L / arccos(eps^(1/N)), base <
// 1/eps_mach); here they are solved exactly for base through w_min = base^(-(D-2)/D):
//   base > (L / (2 pi))^(D/(D-2)),  base >= (L / arccos(eps^(1/N)))^(D/(D-2)),  base < eps_mach^(-D/(D-2)).
// A layer whose frequencies are scaled, partial or factored is judged by its own slowest rotating pair,
// expressed as the plain-RoPE base with that w_min (its effective base).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attention/rope.h"

namespace hz::attn {

struct RopeBaseBounds {
  double aliasing = 0;   // base must exceed this
  double stability = 0;  // base must be at least this (the binding lower bound: it is >= aliasing for eps >= 0)
  double precision = 0;  // base must stay below this
  double lower() const { return stability > aliasing ? stability : aliasing; }
};

// eps: the smallest cosine the slowest pair's phase may reach over L (0 < eps < 1); depth: the rotating
// layers N >= 1; eps_mach: the machine epsilon of the format the phase is held in.
RopeBaseBounds rope_base_bounds(int64_t L, int64_t head_dim, int64_t depth, double eps, double eps_mach);

// The slowest rotating pair's frequency of a frequency table (0 when no pair rotates) and the plain
// RoPE base with that slowest pair: w_min^(-D/(D-2)).
double slowest_frequency(const RopeFreqs& f);
double effective_base(double w_min, int64_t head_dim);

// One row of `horizon info`'s table: a rotating layer kind at one length.
struct RopeBoundsRow {
  std::string kind;
  int64_t L = 0;
  bool training = false;  // L is the training length (else an evaluation length)
  double base = 0;        // the layer's effective base at L (its scaling resolved for L)
  RopeBaseBounds bounds;
  // "" inside the range, else what is violated ("below the stability bound", "above the precision bound")
  std::string verdict;
};
std::string rope_bounds_verdict(double base, const RopeBaseBounds& b);

// The table for a model: one row per rotating layer kind (kinds: name and spec, in order, each once) and
// length (train_len first, then each evaluation length that differs). The depth N counts the model's
// rotating layers (rotating_layers); each kind's frequencies are resolved at L against train_len as a
// layer's are (original_context 0 = train_len). Kinds whose spec does not rotate are skipped.
std::vector<RopeBoundsRow> rope_bounds_table(const std::vector<std::pair<std::string, AttentionSpec>>& kinds,
                                             int64_t head_dim, int64_t rotating_layers, int64_t train_len,
                                             const std::vector<int64_t>& eval_lengths, double eps, double eps_mach);

}  // namespace hz::attn
