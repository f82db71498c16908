// Horizon: LaMPE (training-free, inference-time, RoPE models; the LaMPE paper).
//
// For input length l the mapping length is m = L / (1 + exp(-(a l + b))). Relative to query i
// (absolute position p = q_offset + i), keys fall in three regions, each attended separately by
// the fused kernel with its own position ids and merged exactly by log-sum-exp:
//   local  (t = p - j < s_local):              q at p, k at j                -> r = t
//   middle (j >= s_sink, t >= s_local):        q at s_local + floor((p - s_local) rho),
//                                              k at floor(j rho)             -> squeezed
//   sink   (j < s_sink, t >= s_local):         q at min(p, M), k at j        -> r = min(t, M - j)
// with rho = min(1, (m - s_local - s_sink) / (l - s_local - s_sink)) and M = floor(m) + 1.
// When l <= m nothing is squeezed and LaMPE equals plain RoPE attention. The mapping is
// monotone: a farther key never gets a smaller relative position (lampe_relative_position).
#pragma once
#include "attention/fused.h"
#include "attention/rope.h"

namespace hz::attn {

struct LampeConfig {
  double L = 0;            // mapping scale, about 3/4 of C_train
  double a = 0, b = 0;     // sigmoid slope / offset in the input length l
  int64_t s_local = 512;   // public code defaults
  int64_t s_sink = 200;
  int64_t length = 0;      // input length l of the mapping (0: Tk, the number of keys given);
                           // decoding sets the whole context so prefill and steps share one map
};

double lampe_mapping_length(const LampeConfig& c, int64_t l);
// Mapped relative position of key j for the query at absolute position p in a length-l input.
int64_t lampe_relative_position(const LampeConfig& c, int64_t l, int64_t p, int64_t j);

// q (B, H, Tq, D), k/v (B, Hkv, Tk, D) WITHOUT rotary encoding; queries are the last Tq of the
// Tk positions (l = cfg.length, or Tk when 0). Causal; base carries the logit transform / tiles (its windows must be
// unbounded). Returns the merged output and row log-sum-exp. Inference only: gradients reach
// each region but the merge weights are treated as constants.
AttnOutput lampe_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                           const RopeFreqs& freqs, const LampeConfig& cfg, AttnConfig base = {});

}  // namespace hz::attn
