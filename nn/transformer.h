// Horizon: the decoder-only Transformer built from a model config whose layers follow a
// repeating pattern of named layer kinds (e.g. SWAN's [global_nope, swa_rope, swa_rope,
// swa_rope]) or explicit per-layer overrides.
//   ids (B, T) -> embedding -> n_layers x pre-norm Block -> final RMSNorm -> logits (B, T, V)
//   Block: h = x + attn(norm1(x)); y = h + mlp(norm2(h))
// Initialisation: normal(0.02) everywhere, residual projections (attn.wo, mlp.w2) scaled by
// 1/sqrt(2 n_layers); norm gains 1. Values depend only on (seed, parameter name).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "nn/attention_layer.h"

namespace hz::nn {

class KVCache;  // nn/kv_cache.h

struct LayerKind {
  std::string name;
  attn::AttentionSpec attn;
};

struct ModelConfig {
  int64_t vocab_size = 259;  // 256 bytes + BOS/EOS/PAD
  int64_t d_model = 128;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;    // 0 = n_heads
  int64_t head_dim = 0;      // 0 = d_model / n_heads
  int64_t mlp_hidden = 0;    // 0 = 4 d_model (relu2/gelu) or 8/3 d_model rounded up to 8 (swiglu)
  MlpKind mlp = MlpKind::SwiGLU;
  bool tie_embeddings = true;
  bool qkv_bias = false;     // biases on the q/k/v projections (Qwen2)
  double norm_eps = 1e-6;
  double init_std = 0.02;
  int64_t train_len = 256;  // the training length T: windows are validated against it, and a call without
                               // AttnCall::train_len uses it as the context s = T / train_len is measured from
  DType dtype = DType::F32;
  std::vector<LayerKind> kinds{{"default", {}}};
  std::vector<std::string> pattern{"default"};  // repeated over the layers
  std::map<int64_t, std::string> overrides;     // layer index -> kind name

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t hdim() const { return head_dim > 0 ? head_dim : d_model / n_heads; }
  int64_t hidden() const;
  const LayerKind& kind(const std::string& name) const;
  std::vector<std::string> layer_kind_names() const;      // one per layer
  std::vector<attn::AttentionSpec> layer_specs() const;  // one per layer
  void validate() const;  // throws ValueError with what to change
};

// The residual stream between blocks, as the two addends of its value (base + delta; delta undefined:
// base alone). The norm that reads it adds them in its own pass (ag::add_rms_norm): every residual
// add of the model is fused with the norm after it, the last block's with the final norm.
struct Residual {
  ag::Variable base, delta;
  ag::Variable value() const;                           // base + delta (an add node), or base
  ag::ResidualNorm normed(const RMSNorm& norm) const;  // {value, norm(value)}
};

class Block : public Module {
 public:
  Block(const ModelConfig& cfg, const attn::AttentionSpec& spec);
  // cache: this layer's keys and values when decoding (nn/kv_cache.h), else null. Returns the stream
  // as {h, mlp(norm2(h))}, h = x + attn(norm1(x)): the next norm adds them.
  // The stream is taken by value and let go of once normed: without gradients its addends are freed
  // there, as the unfused add freed them.
  Residual forward(Residual x, const Tensor& positions, const AttnCall& call, LayerKV* cache = nullptr) const;
  // The block's output as one value (the probe reads every layer's)
  ag::Variable forward(const ag::Variable& x, const Tensor& positions, const AttnCall& call,
                       LayerKV* cache = nullptr) const {
    return forward(Residual{x, {}}, positions, call, cache).value();
  }
  // What this block keeps and makes for a call of shape s (nn/cost.h): its own tensors (the block
  // input, the normed input, the residual, the second normed input, the two norms' statistics)
  // with the attention layer's (its route's included) and the MLP's.
  BlockCost cost(const CallShape& s, const AttnCall& call) const;
  std::shared_ptr<RMSNorm> norm1, norm2;
  std::shared_ptr<AttentionLayer> attn;
  std::shared_ptr<MLP> mlp;
};

class Transformer : public Module {
 public:
  // draw_weights false: the parameters stay as allocated (zeros), for a model whose every weight is
  // loaded next (load_state_dict, strict); drawing them costs ~35% of a small model's `horizon score`
  // and about a second at 124M parameters, for nothing.
  explicit Transformer(const ModelConfig& cfg, uint64_t seed = 0, bool draw_weights = true);
  // ids (B, T) integer; positions (T) or (B, T) i64 (default 0..T-1, or with call.documents their
  // positions: then positions must be left undefined). call.T defaults to T. Inputs on another
  // device than the model are moved to it.
  ag::Variable forward(const Tensor& ids, const Tensor& positions = Tensor(), AttnCall call = {}) const;
  // forward() in two halves: the final-normed hidden states (B, T, C), and the output head on them
  // (scoring long texts projects chunks of rows to bound the (T, V) logits).
  // With a cache (decoding), ids are the new tokens at `positions` after those it holds.
  ag::Variable hidden(const Tensor& ids, const Tensor& positions = Tensor(), AttnCall call = {},
                      KVCache* cache = nullptr) const;
  ag::Variable project(const ag::Variable& h) const;
  // Mean next-token cross-entropy: targets (B, T) integer, weights (B, T) float or undefined.
  // The head and the loss run as one chunked op (ag::lm_head_loss): the (B T, V) logits never
  // exist at once unless loss_chunk is 0.
  // Prefix-LM: the weights of a (B, T) batch's targets with those a bidirectional prefix shows its
  // queries set to 0 (a query whose target, the next token, lies in its document's prefix of P, the
  // largest over the layers, sees it); undefined weights count as 1. Unchanged (weights as given) without a
  // prefix. loss() applies it, and evaluation scores with it.
  Tensor loss_weights(const Tensor& weights, int64_t B, int64_t T, const AttnCall& call) const;
  // positions as forward()'s (training with drawn positions: data/positions.h).
  ag::Variable loss(const Tensor& ids, const Tensor& targets, const Tensor& weights = Tensor(),
                    AttnCall call = {}, const Tensor& positions = Tensor()) const;
  // Evaluation: each token's NLL -ln softmax(h_i W^T)[targets_i] as (B T) f64 on the CPU, 0 where
  // the target is ignore_index (-100); no graph is built. The head runs on `chunk` rows at a time
  // (-1: auto_loss_chunk, 0: all rows, else rounded up to whole ag::kLossSlice slices), so long
  // lengths never hold the (B T, V) logits. The values are those of cross_entropy_rows(forward(ids)) row for row, bitwise where a GEMM row does not
  // depend on the row count (f32 and bf16 on the CPU; see ag::lm_head_loss).
  Tensor token_nll(const Tensor& ids, const Tensor& targets, AttnCall call = {}, int64_t chunk = -1) const;
  // The automatic chunk: rows whose f32 logits take about 64 MiB on the CPU, 1 GiB on a GPU (where
  // each chunk's dW is one GEMM, and fewer, larger ones keep the memory traffic of its partial
  // sums small), at least ag::kLossSlice.
  static int64_t auto_loss_chunk(int64_t vocab_size, bool gpu = false);
  // The final norm and the loss head for a call of shape s with loss chunks of loss_chunk rows
  // (as loss() takes them; 0: every row at once) (nn/cost.h).
  HeadCost head_cost(const CallShape& s, int64_t loss_chunk) const;
  // Model FLOPs of one token at sequence length T, forward + backward (3x forward; recomputation
  // not counted): 6 per GEMM weight (the tied head counts the embedding once; an untied embedding
  // is a gather) plus the attention score and value products over each layer's exact visible pairs
  // and the learned angles' rotations (AttentionLayer::angle_flops_per_token).
  double flops_per_token(int64_t T) const;

  ModelConfig cfg;
  // Mixed precision: the dtype forward() computes in (nn/autocast.h); parameters keep cfg.dtype.
  DType compute_dtype = DType::F32;
  // loss(): rows of logits alive at a time (ag::lm_head_loss; 0 = all rows). On the CPU in f32 and
  // bf16 every value is bitwise the same for every setting; only the memory changes (recipe
  // train.loss_chunk).
  int64_t loss_chunk = 0;
  std::shared_ptr<Embedding> embed;
  std::vector<std::shared_ptr<Block>> layers;
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<Linear> head;  // null when tied
};

}  // namespace hz::nn
