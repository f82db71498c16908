// Horizon: the fused attention op (CPU; f32 and f64).
//
// Legend: B batch, H query heads, Hkv key/value heads (H % Hkv == 0, query head h reads kv head
// h / (H / Hkv)), Tq queries, Tk keys, D head dim.
//   q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, D) -> out (B, H, Tq, D), lse (B, H, Tq)
//
// Alignment: query i sits at absolute position p_i = q_offset + i, keys at positions j = 0..Tk-1.
// By default q_offset = Tk - Tq: the queries are the LAST Tq positions (decoding, chunked
// prefill, LaMPE regions). Distance t = p_i - j.
//
// Mask (one parameterisation for causal, sliding window and SCOPE): key j is visible to query i
// iff  key_begin <= j < key_end,  t >= min_distance (>= 0: causal),  and  t < window[h] when
// window[h] > 0. A row's visible keys are the interval [lo_i, hi_i]; both ends grow with i, so a
// query block needs only the key blocks in [lo_first, hi_last]; blocks masked for every row are
// skipped without being read, and the mask is evaluated only on boundary blocks.
//
// Logits: L_ij = r_hi * a_t * s_ij + b_t - slope_h * t,  s_ij = scale * q_i . k_j, where
//   identity: r = 1, a = 1, b = 0; scale_invariant: a_t, b_t = m_t (SPEC tables, tau);
//   logn: r = c_h ln(n_i), n_i = number of visible keys of row i (c_h may be learned);
//   swan_row: r = ln(swan_a + p_i) / ln(swan_a); temperature: r = beta;
//   ALiBi slopes (position encoding alibi) add -slope_h * t to any of them.
// Forward is a tiled online softmax returning out and the row log-sum-exp; backward recomputes
// the probabilities from the log-sum-exp block by block, so no (Tq, Tk) tensor ever exists.
#pragma once
#include <atomic>
#include <cstdint>
#include <vector>

#include "attention/spec.h"
#include "autograd/variable.h"

namespace hz::attn {

struct AttnConfig {
  std::vector<int64_t> window;      // per query head, 0 = unbounded
  std::vector<double> alibi_slope;  // per query head; empty = no ALiBi
  LogitKind logit = LogitKind::Identity;
  double tau = 10.0;     // scale_invariant
  double swan_a = 362.0; // swan_row
  double beta = 1.0;     // temperature
  double scale = 0.0;    // 0 -> 1/sqrt(D)
  int64_t q_offset = -1; // -1 -> Tk - Tq
  int64_t key_begin = 0, key_end = -1;  // -1 -> Tk
  int64_t min_distance = 0;
  int64_t block_q = 64, block_k = 64;
};

// Counters of the last calls (summed over threads), readable by tests and benchmarks.
struct AttnStats {
  std::atomic<int64_t> fwd_blocks{0};           // (query block, key block) pairs visited forward
  std::atomic<int64_t> fwd_boundary_blocks{0};  // of which needed masking
  std::atomic<int64_t> bwd_blocks{0};
  void reset() { fwd_blocks = 0; fwd_boundary_blocks = 0; bwd_blocks = 0; }
};
AttnStats& attn_stats();

struct AttnOutput {
  ag::Variable out;  // (B, H, Tq, D), differentiable in q, k, v (and logn_c)
  Tensor lse;        // (B, H, Tq), -inf for rows with no visible key
};

// logn_c: (H) per-head c for logit LogN (requires_grad -> learned); ignored otherwise.
AttnOutput fused_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                           const AttnConfig& cfg, const ag::Variable& logn_c = ag::Variable());

// Visible key interval of query i (absolute position p) for window w: [lo, hi] (empty if lo > hi).
struct KeyRange {
  int64_t lo, hi;
};
KeyRange visible_keys(const AttnConfig& cfg, int64_t Tk, int64_t p, int64_t w);

}  // namespace hz::attn
