// Horizon: the slow twin of fused_attention, composed of primitive autograd ops. It
// materialises the (B, H, Tq, Tk) scores, so it is for tests only. The mask and the transform
// coefficients are built here by direct loops over (i, j) from docs/methods.md's definitions, written
// independently of the kernel's range arithmetic (reference_visibility, the float64 oracle).
// Packed documents (cfg.documents) are read straight from their cumulative lengths. Sinks are an
// extra column of logits, FoX's decay a (Tq, Tk) bias from the prefix sums of log f, GRAPE's additive
// term -|t| (dist_q_i + dist_k_j) a broadcast sum times the distances.
#pragma once
#include <cstdint>
#include <vector>

#include "attention/fused.h"

namespace hz::attn {

// The mask and the logit coefficients of one call (B sequences, H query heads, Tq queries, Tk keys),
// in float64: which keys each query row sees and the L_ij = coef_ij s_ij + bias_ij (times LogN's c_h)
// of the pairs it sees. This is the oracle: tests/attention/oracle_test.cpp writes it for a few
// hundred drawn calls into tests/fixtures/attention_oracle.json, the case table that tiling.h (the
// kernels' arithmetic), the fused op and hf/remote/modeling_horizon.py are held to.
// B is the call's batch, or 1 when neither packed documents nor token positions make the
// coefficients differ per sequence (reference_attention broadcasts them then). LogN over the whole
// row (logn_whole_row) is not modelled: refused.
struct ReferenceMask {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0;
  std::vector<uint8_t> visible;    // (B, H, Tq, Tk): 1 when key j is visible to row i of head h
  std::vector<double> row_factor;  // (B, H, Tq): r_i without LogN's c_h (Llama 4's temperature included)
  std::vector<double> coef, bias;  // (B, H, Tq, Tk): r_i a_t and m_t - slope_h t; 0 and -inf where hidden
  std::vector<double> distance;    // (B, H, Tq, Tk): |t| where visible, 0 where hidden (GRAPE's rates multiply it)
};
ReferenceMask reference_visibility(const AttnConfig& cfg, int64_t B, int64_t H, int64_t Tq, int64_t Tk,
                                   const std::vector<int64_t>& rows = {});

// The attention probabilities of a few query rows of one call, which the fused op never forms
// (eval/retrieval.h's probe reads them): p_ij = exp(L_ij - lse_i) in float64 with L_ij from
// reference_visibility's coefficients, LogN's c_h, FoX's c_(p_i) - c_j and the sink's column in
// the log-sum-exp, as reference_attention composes them. q (B, H, Tq, D) and k (B, Hkv, Tk, D) as
// the op takes them (rotated), any dtype and device. O(B H rows (Tk + D Tk)).
struct RowProbabilities {
  int64_t B = 0, H = 0, R = 0, Tk = 0;
  std::vector<int64_t> rows;  // the query rows, R of them
  std::vector<double> p;      // (B, H, R, Tk): 0 where hidden
  std::vector<double> sink;   // (B, H, R): the sink's share of the row (0 without a sink)
};
RowProbabilities reference_row_probabilities(const Tensor& q, const Tensor& k, const AttnConfig& cfg,
                                             const AttnTerms& terms, const std::vector<int64_t>& rows);

ag::Variable reference_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                                 const AttnConfig& cfg, const AttnTerms& terms = {});

}  // namespace hz::attn
