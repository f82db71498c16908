// Horizon: attention in parts, for a caller that splits each row's keys over several calls and
// combines them itself (context parallelism's ring, distributed/context/ring.h), after
// FlashAttention's split-KV combine. Every call is the fused op (attention/fused.h) without autograd
// and without a sink, over a slice of keys placed at their absolute positions by the config:
// key j of the slice sits at cfg.key_position + j, query i at cfg.key_position + cfg.q_offset + i,
// and cfg.logn_whole_row keeps LogN's n the whole row's.
//
// A part gives out_p (B, H, Tq, D) and lse_p (B, H, Tq) over its keys only, in the accumulation
// dtype (f32 for bf16; rows that see none of its keys: lse -inf, out 0). Parts combine as
//     lse = log(exp(lse_a) + exp(lse_b)),   out = out_a exp(lse_a - lse) + out_b exp(lse_b - lse),
// in any grouping, so a caller that combines in a fixed order is deterministic. A sink z_h is one
// more term of every row's denominator, folded in once after the last part:
//     lse' = log(exp(lse) + exp(z_h)),   out' = out exp(lse - lse').
// Backward: with the rows' FINAL out and lse (every part combined, the sink folded), each part's
// backward is exact for its keys, since p_ij = exp(L_ij - lse_i) and D_i = dO_i . O_i read nothing
// else; dLoss/dz_h = -sum_i exp(z_h - lse'_i) dO_i . O'_i.
#pragma once
#include "attention/fused.h"

namespace hz::attn {

// One part. q/k/v of one device and storage dtype; logn_c (H) or undefined; fox_c, FoX's
// c = cumsum(log f) itself (not log f), (B, H, fox_T) in the accumulation dtype with the keys' c at
// [0, Tk) and the queries' at [q_offset, q_offset + Tq) (fox_T >= both ends; what lies between is
// not read), or undefined; dist_q (B, H, Tq) and dist_k (B, H, Tk), GRAPE-A's rates (fused.h), or
// undefined.
struct Partial {
  Tensor out, lse;
};
Partial partial_attention(const AttnConfig& cfg, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& logn_c = {}, const Tensor& fox_c = {}, const Tensor& dist_q = {},
                          const Tensor& dist_k = {});

// acc (rows of the parts so far) combined in place with one more part of the same rows. acc_out /
// acc_lse may be views (a chunk's rows of a larger buffer).
void combine_partial(Tensor acc_out, Tensor acc_lse, const Tensor& out, const Tensor& lse);

// The sink z (H), in lse's dtype on its device, folded into (out, lse); out keeps its dtype.
void fold_sink(const Tensor& z, Tensor& out, Tensor& lse);
// dLoss/dz (H) in lse's dtype, from the final (out', lse') and dO.
Tensor sink_grad(const Tensor& z, const Tensor& lse, const Tensor& out, const Tensor& gout);

// One part's gradients given the rows' final out and lse: dq, dk, dv in the accumulation dtype;
// dc (H, f64 on the host) LogN's c when want_c; dfox dLoss/d(fox_c) (B, H, fox_T) with fox_c; ddist_q
// and ddist_k (the accumulation dtype) with GRAPE-A's rates.
struct PartialGrads {
  Tensor dq, dk, dv, dc, dfox, ddist_q, ddist_k;
};
PartialGrads partial_attention_backward(const AttnConfig& cfg, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& lse, const Tensor& gout,
                                        const Tensor& logn_c = {}, const Tensor& fox_c = {}, bool want_c = false,
                                        const Tensor& dist_q = {}, const Tensor& dist_k = {});

}  // namespace hz::attn
