// Horizon: incremental decoding with a per-layer key/value cache.
//
// One generation is one context of `context` tokens (prompt + new tokens). Everything in a
// layer that depends on the sequence length is resolved once for that context, exactly as a
// full forward over `context` tokens resolves it: SCOPE scopes follow T = context (or stay
// frozen), dynamic NTK and the DroPE temperature use s = context / train_T, and LaMPE maps
// relative positions for the input length l = context. So the logits of every decoding step
// equal those of Transformer::forward over the same tokens with AttnCall{T = context} (tested
// for every layer kind; the argmax tokens are identical).
//
// What each layer keeps (legend: H query heads, Hkv key/value heads, D head dim, p the
// position of the newest token, w_h the window of query head h, 0 = unbounded):
//   - a ring buffer per key/value head of capacity C = max over its query heads of
//     (w_h ? min(w_h, context) : context): a sliding-window layer keeps W keys, a SCOPE head
//     group keeps its largest scope, a global head keeps everything. Key j lives in slot j % C.
//   - keys rotated at their own position (RoPE / p-RoPE), or unrotated on LaMPE layers, where
//     a key's rotation depends on the query (its mapped relative position r = q_pos - k_pos of
//     its region); the score is then sum_m (q1 k1 + q2 k2) cos(r w_m) + (q1 k2 - q2 k1) sin(r w_m)
//     over the rotated pairs (m, m + D/2), times YaRN's mscale^2.
// One new row attends to keys [max(0, p - w_h + 1), p] with the layer's logit transform:
// L_j = r_h a_t s_j + b_t - slope_h t (t = p - j; fused.h has the table of r, a, b).
#pragma once
#include <cstdint>
#include <vector>

#include "nn/transformer.h"

namespace hz::nn {

// Memory and shape of one layer's cache.
struct LayerCacheInfo {
  std::vector<int64_t> capacity;  // per key/value head
  bool unrotated_keys = false;    // LaMPE layer
  int64_t bytes = 0;
};

class KVCache {
 public:
  // `context`: tokens this generation may hold in total (prompt + new). `train_T`: the training
  // context (0 = m.cfg.max_seq_len). The model's layer specs (and LaMPE settings) are read
  // now; keep them unchanged while the cache lives. Batch size 1.
  KVCache(const Transformer& m, int64_t context, int64_t train_T = 0);

  // Encodes the prompt (1 <= ids.size() <= context) with the fused kernels and fills the cache;
  // returns the logits (V) of the last prompt position. Starts a new sequence.
  Tensor prefill(const std::vector<int32_t>& ids);
  // Appends one token at position length() and returns its logits (V).
  Tensor step(int32_t id);

  int64_t length() const { return length_; }
  int64_t context() const { return context_; }
  int64_t bytes() const;  // keys + values held by all layers (allocated capacity)
  const std::vector<LayerCacheInfo>& layers() const { return info_; }

 private:
  struct Layer {
    attn::AttnConfig cfg;            // windows, slopes, transform for T = context
    attn::RopeFreqs freqs;
    bool rotary = false, lampe = false;
    attn::LampeConfig lampe_cfg;
    std::vector<double> logn_c;      // per query head (LogN)
    std::vector<double> si_a, si_m;  // scale-invariant a_t, m_t for t = 0..context
    std::vector<int64_t> cap;        // per kv head
    std::vector<Tensor> k, v;        // per kv head: (cap, D)
    std::vector<double> cos, sin;    // LaMPE: cos / sin(r w_m) * mscale^2, r = 0..context, (context + 1, D/2)
  };
  const Transformer& m_;
  int64_t context_, train_T_, length_ = 0;
  std::vector<Layer> layers_;
  std::vector<LayerCacheInfo> info_;
  AttnCall call() const;
  void store(Layer& L, const Tensor& k, const Tensor& v, int64_t first_pos);
  Tensor attend_row(const Layer& L, const Tensor& q, int64_t p) const;  // q (1, H, 1, D)
  Tensor logits_last(const ag::Variable& x) const;                     // x (1, T, C) -> (V)
};

}  // namespace hz::nn
