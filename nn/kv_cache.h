// Horizon: incremental decoding with a per-layer key/value cache, through the model's own layers
// and the fused attention op (no attention code of its own).
//
// One generation holds at most `capacity` tokens (prompt + new tokens). Everything in a layer
// that depends on the sequence length is resolved once for that length, exactly as a full
// forward over `capacity` tokens resolves it: SCOPE scopes follow T = capacity (or stay frozen),
// dynamic NTK and the DroPE temperature use s = capacity / train_len, and LaMPE maps relative
// positions for the input length l = capacity. prefill() and step() run Transformer::hidden with
// the cache, so each Block, its AttentionLayer (projections, QK-norm, RoPE at the tokens'
// positions) and the MLP are the model's; the attention layer hands its new keys and values to
// its LayerKV, which attends with attn::fused_attention over what is kept. So the logits of every
// decoding step equal those of Transformer::forward over the same tokens with AttnCall{T =
// capacity} (tested for every layer kind), on the CPU and on CUDA alike: the buffers live on the
// model's device, in the dtype the layer computes in.
//
// What a layer keeps (legend: H query heads, Hkv key/value heads, G = H / Hkv, D head dim, w_h the
// window of query head h, 0 = unbounded). Key/value head g needs the last
//   cap_g = max over its query heads h of (w_h ? min(w_h, capacity) : capacity)
// keys. Consecutive kv heads of equal cap form a band, stored as one (1, heads, S, D) buffer
// holding the keys of positions [base, base + len) in order, S = cap + slack with
// slack = ceil(cap / 8) when cap < capacity (else S = capacity, nothing ever moves). A sliding-window
// layer therefore holds W keys (+ W/8), a SCOPE kv head its largest scope, a global head the whole
// capacity. With sink tokens beside windows (StreamingLLM) the first sink_tokens keys are pinned
// ahead of the ring (sink_tokens + W keys; chunked or prefix layers with sinks, and FoX with sinks,
// keep every key). When the buffer is full, its last cap - 1 keys move to the front (base advances): one
// copy of cap - 1 rows every slack + 1 tokens. The new queries attend to the buffer with the op's
// alignment: q_offset = their position - base, key_end = len, so the window rule, the distances
// t of scale-invariant / ALiBi and LogN's visible count are those of the full sequence, and
// key_position = base gives the terms that read the absolute position (SWAN's row, LogN by
// position, Llama 4's temperature) the true one. A LaMPE layer keeps every key: its keys stay
// unrotated (their rotation depends on the query's mapped relative position) and it attends
// through attn::lampe_attention.
#pragma once
#include <cstdint>
#include <vector>

#include "nn/transformer.h"

namespace hz::nn {

// One layer's keys and values: the layer's route while decoding (nn/route.h). AttentionLayer::
// forward(x, positions, call, kv) calls attend() with the rotated new keys and values (LaMPE layers:
// append_all() with the unrotated ones).
class LayerKV final : public AttentionRoute {
 public:
  // cfg: the layer's kernel config for T = capacity; keep_all: every key stays (LaMPE); forget: the
  // layer has per-key terms, FoX's gates or GRAPE-A's key rates (attn::sinks_pinnable). A head keeps its reach (attn::head_reach) in a ring.
  // The buffers are allocated now, zeroed, in `dtype` on `dev` (keys of another dtype are cast).
  LayerKV(const attn::AttnConfig& cfg, int64_t n_kv_heads, int64_t head_dim, int64_t capacity, bool keep_all,
          bool forget, DType dtype, Device dev);

  // q (1, H, n, D), k and v (1, Hkv, n, D) of positions length() .. length() + n - 1: stores the
  // keys and values, then returns the attention of the n queries over every key they can see
  // (1, H, n, D) with the op's logit transform and the layer's terms (LogN's c, sinks; FoX's log
  // forget gates and GRAPE-A's key rates (1, H, n) of the new tokens, kept beside their keys; its
  // query rates of the new queries).
  ag::Variable attend(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v, const attn::AttnConfig& cfg,
                      const attn::AttnTerms& terms) override;
  std::string name() const override { return "a KV cache"; }
  // Accumulated RoPE angles: the new rows' prefix sums plus the total of every earlier call, whose
  // new total the cache keeps (x (1, G, n, D/2); no gradient: decoding).
  ag::Variable running_sum(const ag::Variable& x) override;
  // LaMPE layers: stores k and v (unrotated), then returns every key and value of the sequence so
  // far (1, Hkv, length(), D), the new ones last.
  std::pair<Tensor, Tensor> append_all(const Tensor& k, const Tensor& v);

  void reset();  // forgets every key (and the angles' running total): the next token is position 0
  int64_t length() const { return length_; }
  const std::vector<int64_t>& keys_kept() const { return cap_; }  // per kv head
  int64_t bytes() const;  // allocated keys + values

 private:
  struct Band {
    int64_t kv0 = 0, kv1 = 0;  // kv heads [kv0, kv1)
    int64_t cap = 0, rows = 0;  // keys needed (beside the sinks), rows allocated (S)
    int64_t sinks = 0;          // pinned sink tokens: rows [0, sinks) hold positions 0 .. sinks - 1
    int64_t base = 0, len = 0;  // the buffer (after the sinks) holds positions [base, base + len)
    Tensor k, v;                // (1, kv1 - kv0, rows, D)
    Tensor f;                   // per-key terms (1, G (kv1 - kv0), rows, c) of the band's query heads: FoX's log f, GRAPE-A's dist_k
    Tensor pos;                 // pinned sinks: each row's position (1, rows) f64, made for base = pos_base
    int64_t pos_base = -1;
  };
  // k, v (and FoX's f, or undefined) of the band's heads
  void store(Band& b, const Tensor& k, const Tensor& v, const Tensor& f, int64_t first);
  // attend() for a band with pinned sinks (kv_cache.cpp)
  ag::Variable attend_pinned(Band& b, const ag::Variable& qb, const Tensor& kb, const Tensor& vb, attn::AttnConfig c,
                             const attn::AttnTerms& tb, int64_t p0);
  std::vector<Band> bands_;
  std::vector<int64_t> cap_;
  Tensor angle_total_;  // running_sum's total so far (1, G, 1, D/2); undefined: none yet
  int64_t capacity_ = 0, length_ = 0, G_ = 1;
};

// Memory and shape of one layer's cache.
struct LayerCacheInfo {
  std::vector<int64_t> keys_kept;  // per key/value head: the keys it must keep
  bool unrotated_keys = false;    // LaMPE layer
  int64_t bytes = 0;              // allocated (capacity + slack rows, keys and values)
};

class KVCache {
 public:
  // `capacity`: tokens this generation may hold in total (prompt + new). `train_len`: the training
  // length (0 = m.cfg.train_len). The model's layer specs (and LaMPE settings) are read now;
  // keep them unchanged while the cache lives. Batch size 1.
  KVCache(const Transformer& m, int64_t capacity, int64_t train_len = 0);

  // Encodes the prompt (1 <= ids.size() <= capacity) and fills the cache; returns the logits (V) of
  // the last prompt position, on the model's device. Starts a new sequence.
  Tensor prefill(const std::vector<int32_t>& ids);
  // Appends one token at position length() and returns its logits (V).
  Tensor step(int32_t id);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t bytes() const;  // keys + values held by all layers (allocated rows)
  const std::vector<LayerCacheInfo>& layers() const { return info_; }
  LayerKV& layer(size_t l) { return kv_[l]; }

 private:
  Tensor run(const std::vector<int32_t>& ids);  // the new tokens through the model -> last logits
  const Transformer& m_;
  int64_t capacity_, train_len_, length_ = 0;
  std::vector<LayerKV> kv_;
  std::vector<LayerCacheInfo> info_;
};

}  // namespace hz::nn
