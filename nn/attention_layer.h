// Horizon: the attention layer. x (B, T, C) -> q (B, H, T, D), k/v (B, Hkv, T, D) via projections
// (bias-free, or with q/k/v biases as Qwen2 has); optional QK-norm (full: RMSNorm over the whole q / k projection with gains of
// size H*D / Hkv*D, as in DroPE; per_head: RMSNorm over each head's D with a shared gain of D);
// RoPE / p-RoPE at explicit positions; the fused attention op with this layer's windows, ALiBi
// slopes and logit transform, sinks, FoX's forget gates and GRAPE-A's gated distance rates; an optional output gate; output
// projection wo (a residual projection).
#pragma once
#include <optional>

#include "attention/fused.h"
#include "attention/lampe.h"
#include "attention/rope.h"
#include "attention/spec.h"
#include "nn/layers.h"
#include "nn/route.h"

namespace hz::nn {

class LayerKV;  // nn/kv_cache.h

struct AttentionDims {
  int64_t d_model = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  bool qkv_bias = false;  // additive biases on the q, k and v projections (wo stays bias-free)
};

// Per-call context: the stage's sequence length T (SCOPE scopes follow it) and the training
// context (extension factor s = T / train_len for temperature and dynamic scalings).
// Activation recomputation in training (recipe train.recompute): none keeps every activation for
// backward; attention keeps each block's input to attention and recomputes norm1 + the attention
// sublayer (projections, RoPE, the fused op) in backward; layer keeps only each block's input and
// recomputes the whole block. Gradients are bitwise those of none (autograd/recompute.h).
enum class Recompute : uint8_t { None, Attention, Layer, Count };
const char* name(Recompute r);
Recompute parse_recompute(const std::string& s);

struct AttnCall {
  int64_t T = 0;
  int64_t train_len = 0;
  int64_t block_q = 0, block_k = 0;  // the attention kernels' tiles (0: the device's, attention/fused.h)
  // Packed documents of the batch (attention/documents.h): the mask of every layer and, through
  // Transformer::hidden, the positions. Null: one document per sequence.
  std::shared_ptr<const attn::Documents> documents;
  // Drawn token positions of the whole sequence, (B, T) f64 (train.positions: PoSE, randomized, real;
  // undefined: the indices). RoPE rotates by them; the logit terms that read positions or distances
  // (AttentionSpec::logits_read_positions) take them through the fused op, under context
  // parallelism too (each route places its keys with key_position).
  Tensor positions;
  Recompute recompute = Recompute::None;  // applies while recording a graph without a KV cache
  // How every layer reaches its keys (nn/route.h); null: the fused op over the call's own rows. A
  // route that holds a share of the sequence (context parallelism) makes the ids that share.
  std::shared_ptr<AttentionRoute> route;
};

class AttentionLayer : public Module {
 public:
  AttentionLayer(const AttentionDims& dims, const attn::AttentionSpec& spec, double init_std,
                 double resid_std, DType dt);
  // x (B, T, C), positions (T) or (B, T) i64. With a cache (decoding, B = 1), the new keys and values go
  // into it and the queries attend to everything it keeps (nn/kv_cache.h).
  ag::Variable forward(const ag::Variable& x, const Tensor& positions, const AttnCall& call,
                       LayerKV* cache = nullptr) const;
  attn::AttnConfig attn_config(const AttnCall& call) const;  // windows, slopes, transform
  // The memory this layer keeps and makes for a call of shape s (nn/cost.h), its route's share
  // included (call.route; the fused op keeps nothing more). kept: its output's (B, T, C) copy; q, k,
  // v after RoPE and the attention output; the rows' log-sum-exps; with QK-norm the pre-norm q and k
  // and their statistics; with an output gate its logits, the gates and the gated output; with FoX
  // the gate's logits, log f (f32), its transpose and c; with GRAPE-A's gates, per gated side the heads
  // before rotation, the projections, softplus and rates (f32) and the op's f64 rates. transient: dO, dq, dk, dv, the gradients of
  // its input and output, the rows' softmax statistics; f32 on a GPU (CallShape::split_attention) adds the
  // split kernels' bf16 pairs of q, k, v and dO.
  ActivationCost cost(const CallShape& s, const AttnCall& call) const;
  // This layer's attention shape for a call (what a route's costs read).
  AttnShape shape(const CallShape& s) const;
  // The projections with QK-norm, before any rotation: q (B, H, T, D), k and v (B, Hkv, T, D).
  // forward() and incremental decoding (nn/kv_cache.h) both start from here.
  struct QKV {
    ag::Variable q, k, v;
  };
  QKV project_qkv(const ag::Variable& x) const;
  bool rotary() const;  // RoPE or p-RoPE
  // The fused op's query heads: n_heads, or 2 n_heads for DIFF V2 (spec.diff).
  int64_t attn_heads() const { return spec.attn_heads(dims.n_heads); }
  // Whether a call with this kernel config runs as LaMPE: a LaMPE setting on a causal RoPE layer.
  bool uses_lampe(const attn::AttnConfig& cfg) const;
  // This layer's rotary frequencies for a call (RoPE scalings resolved against call.T/train_len).
  attn::RopeFreqs rope_freqs(const AttnCall& call) const;

  AttentionDims dims;
  attn::AttentionSpec spec;
  std::shared_ptr<Linear> wq, wk, wv, wo;
  std::shared_ptr<Linear> wg;  // gated output (spec.gate): C -> H (head) or H D (element), no bias
  std::shared_ptr<Linear> wl;  // DIFF V2 (spec.diff): C -> H, lambda per token and output head, no bias
  std::shared_ptr<RMSNorm> q_norm, k_norm;
  // per attention head (Ha = attn_heads()):
  ag::Variable logn_c;  // (Ha): a parameter when learnable, else a constant
  ag::Variable sink;    // (Ha): the sink logits (spec.sink), initialised to 0
  ag::Variable forget_w, forget_b;  // FoX (spec.forget): (Ha, C) ~ normal(init_std), (Ha) = forget_bias
  // Learned angles (spec.pos.learned_angles(); docs/methods.md), G angle groups (angle_groups()):
  ag::Variable angle_w, angle_b;  // rope_angles accumulated: (G D/2, C) ~ normal(init_std), (G D/2) = ln(e - 1)
  // learned_freqs (GRAPE-M): (Gf D/2), Gf = 1 (layer) or Hkv (head), initialised to rope_freq_factors
  // (or 1). Stored flat, one vector per group, so the optimizer treats it as a gain (AdamW), not as a
  // matrix (Muon).
  ag::Variable freq_factors;
  // 1, or Hkv when the accumulated angles are per head or the frequencies per head.
  int64_t angle_groups() const;
  // The angles (B or 1, G, T, D/2) of input x (B, T, C) at `positions`, in attn::angle_dtype: the
  // accumulated steps' running sum through `route` (every route gives the whole sequence's sum at its
  // rows), or positions times RoPE's frequencies f; times the learned frequency factors.
  ag::Variable angles(const ag::Variable& x, const Tensor& positions, const attn::RopeFreqs& f,
                      AttentionRoute& route) const;
  // Forward FLOPs per token of the learned angles: the rotations and the steps' elementwise work
  // (the projection angle_w is a GEMM weight, counted with the others).
  double angle_flops_per_token() const;
  // GRAPE-A (spec.additive key / query / query_key): the gates' directions u (keys) and v (queries),
  // (Ha, D) ~ normal(1/sqrt(D)), used unit-normalised; w (Ha) = ln(e - 1), so omega_h = softplus(w_h)
  // slope_h starts at ALiBi's slope (a parameter when spec.additive_learned_slope, else a constant).
  ag::Variable additive_u, additive_v, additive_w;
  // The op's terms for input x (B, T, C) and its projections q (B, Ha, T, D), k (B, Hkv, T, D) after
  // QK-norm and before any rotation: LogN's c, the sinks, FoX's log f (B, H, T) and GRAPE-A's rates
  // dist_k / dist_q (B, Ha, T) (f32 for bf16 x).
  attn::AttnTerms terms(const ag::Variable& x, const ag::Variable& q, const ag::Variable& k) const;
  // Inference: when set on a causal RoPE layer, attention runs as LaMPE (attention/lampe.h).
  std::optional<attn::LampeConfig> lampe;

 protected:
  void move_buffers(Device dev) override;  // logn_c and additive_w when they are constants
};

}  // namespace hz::nn
