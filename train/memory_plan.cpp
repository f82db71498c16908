// Horizon: the memory plan (see memory_plan.h for what each term counts).
#include "train/memory_plan.h"

#include <algorithm>

#include <fmt/core.h>

#include "optim/partition.h"
#include "train/context_parallel.h"

namespace hz::train {

std::string format_bytes(int64_t b) {
  const double x = static_cast<double>(b);
  if (x >= 1073741824.0) return fmt::format("{:.2f} GiB", x / 1073741824.0);
  return fmt::format("{:.1f} MiB", x / 1048576.0);
}

std::vector<std::pair<std::string, int64_t>> MemoryPlan::rows() const {
  return {{"parameters", parameters},
          {"optimizer state", optimizer},
          {"bf16 weight copies", weight_copies},
          {"gradient buckets", buckets},
          {"activations kept", activations},
          {"backward (peak extra)", backward},
          {"logits chunk", logits},
          {"predicted peak", peak}};
}

MemoryPlan plan_memory(const Recipe& r, const nn::Transformer& m, int world) {
  MemoryPlan plan;
  const nn::ModelConfig& c = m.cfg;
  const int64_t p = static_cast<int64_t>(dtype_size(c.dtype));
  const bool bf16 = r.run.precision == nn::Precision::BF16;
  const int64_t a = bf16 ? 2 : p;  // an activation
  // context parallelism: a rank holds its zigzag share of each sequence (the longest share)
  const int64_t ctx = r.parallel.context, T = r.data.seq_len;
  const int64_t T_local = ctx > 1 ? attn::ZigzagLayout(T, static_cast<int>(ctx), 0).max_local_len() : T;
  const int64_t N = r.data.batch_size * T_local, C = c.d_model, H = c.n_heads, Hkv = c.kv_heads(),
                D = c.hdim(), F = c.hidden(), V = c.vocab_size, L = c.n_layers;
  const int64_t P = m.num_parameters();
  // ---- static
  plan.parameters = P * p;
  int64_t state = 0;  // elements
  if (r.optim.name == OptimizerKind::Muon) {
    for (const auto& [n, v] : m.named_parameters())  // optim::partition_for_muon's rule
      state += optim::is_hidden_matrix(n, *v) ? v->value().numel() : 2 * v->value().numel();
  } else {
    state = 2 * P;
  }
  if (r.parallel.shard_optimizer) state = (state + world - 1) / world;
  plan.optimizer = state * p;
  // bf16 copies of every matrix the forward multiplies by (the tied head casts the embedding)
  if (bf16) plan.weight_copies = (P - (c.tie_embeddings ? 0 : m.embed->num_parameters())) * 2;
  if (world > 1) plan.buckets = std::min<int64_t>(P * p, r.train.bucket_mb << 20);
  // ---- activations, per block
  const bool swiglu = c.mlp == nn::MlpKind::SwiGLU;
  const int64_t mlp = N * F * a * (swiglu ? 4 : 2);
  auto full_block = [&](size_t l) {
    const attn::AttentionSpec& s = m.layers[l]->attn->spec;
    int64_t b = 5 * N * C * a + N * (2 * H + 2 * Hkv) * D * a + mlp + 2 * N * 4 + N * H * 4;
    if (s.qk_norm != attn::QKNorm::None) b += N * (H + Hkv) * D * a + N * (H + Hkv) * 4;  // pre-norm q, k and rstd
    if (s.gate != attn::OutputGate::None)  // the gate's logits and sigmoid, the gated output
      b += 2 * N * (s.gate == attn::OutputGate::Head ? H : H * D) * a + N * H * D * a;
    if (s.forget) b += N * H * a + 3 * N * H * 4;  // FoX: the gate's logits, log f (f32), its transpose, c
    if (ctx > 1) {  // the gathered keys and values (all-gather), the halos, or the ring's saved state
      const attn::AttnConfig cfg = training_config(r, m, l);
      const attn::ZigzagLayout lay(T, static_cast<int>(ctx), 0);
      const int64_t kv_row = 2 * r.data.batch_size * Hkv * D * a;
      switch (attn::context_exchange(cfg, lay, r.parallel.context_exchange)) {
        case attn::ContextExchange::AllGather: b += kv_row * T; break;
        case attn::ContextExchange::Halo: b += kv_row * 2 * attn::context_traffic(cfg, lay).fwd_rows; break;
        case attn::ContextExchange::Ring:  // its packed own block, out and lse in the accumulation dtype
          b += kv_row * T_local + (bf16 ? N * H * D * 4 : 0) + N * H * 4;
          break;
      }
    }
    return b;
  };
  auto kept = [&](size_t l) {
    switch (r.train.recompute) {
      case nn::Recompute::Layer: return N * C * a;
      case nn::Recompute::Attention: return 3 * N * C * a + mlp + N * 4;
      default: return full_block(l);
    }
  };
  const int64_t head_kept = 2 * N * C * a;
  const int64_t chunk = std::min(N, ag::loss_chunk_step(r.loss_chunk_rows(), N));
  plan.logits = 2 * chunk * V * a;
  int64_t all_kept = head_kept;
  for (size_t l = 0; l < static_cast<size_t>(L); ++l) all_kept += kept(l);
  plan.activations = all_kept;
  // ---- the peak of backward: block l running backward, blocks above done. Two moments per block
  // (measured by tracing the allocator through the engine's nodes): inside the MLP's backward,
  // where the block's activations (recomputed ones too) meet the output gradient, its residual
  // branch's copy and the MLP's input-side gradients (N F a; SwiGLU: the gate's and the up
  // projection's, 2 N F a) and the MLP's output weight gradient; and inside the attention's
  // backward, once the MLP's activations, the residual and the second normed input are freed and
  // the MLP's weight gradients exist: the attention's internals (recomputed under attention and
  // layer recomputation) with dO, dq, dk, dv and the rows' softmax statistics.
  // After the first of several micro-batches (train.grad_accum) every gradient is alive throughout
  // and the next ones add into it; otherwise the head's weight gradient (the embedding's, tied)
  // lives from the head's backward on and each block's from its own.
  const bool accumulating = r.train.grad_accum > 1;
  const int64_t carried = accumulating ? P * p : 0;
  const int64_t head_grads = accumulating ? 0 : V * C * p + m.norm->num_parameters() * p;
  const int64_t mlp_transient = 2 * N * C * a + (swiglu ? 2 : 1) * N * F * a;
  const int64_t attn_transient = 2 * N * C * a + N * (H + 2 * Hkv) * D * a + N * H * 4;
  // the head's backward, per chunk: its logits and their gradient, the weight gradient (f32) and one
  // slice's V x C product added into it, dh
  int64_t worst = carried + all_kept + plan.logits + 2 * V * C * 4 + N * C * a;
  int64_t kept_below = all_kept - head_kept, grads_above = carried + head_grads;
  for (int64_t l = L - 1; l >= 0; --l) {
    const nn::Block& blk = *m.layers[l];
    const int64_t full = full_block(l), own = kept(l);
    const int64_t attn_internals = full - (3 * N * C * a + mlp + N * 4);  // what attention recomputation drops
    // block l's tensors besides what it keeps: its recomputed forward (with the recomputed output)
    const int64_t again = r.train.recompute == nn::Recompute::Layer ? full - own + N * C * a : 0;
    const int64_t mlp_grads = accumulating ? 0 : blk.mlp->num_parameters() * p;
    const int64_t out_grad = accumulating ? 0 : C * F * p;  // the MLP's output projection's weight gradient
    const int64_t at_mlp = kept_below + again + mlp_transient + grads_above + out_grad;
    const int64_t attn_again = r.train.recompute == nn::Recompute::Attention ? attn_internals : again;
    const int64_t at_attn = kept_below - mlp - 2 * N * C * a + attn_again + attn_transient + grads_above + mlp_grads;
    worst = std::max({worst, at_mlp, at_attn});
    if (!accumulating) grads_above += blk.num_parameters() * p;
    kept_below -= own;
  }
  // the end: every gradient, and the embedding's dense gradient before it is added in
  worst = std::max(worst, P * p + N * C * a + V * C * p);
  plan.backward = worst - all_kept;
  plan.peak = plan.parameters + plan.optimizer + plan.weight_copies + plan.buckets + worst;
  return plan;
}

}  // namespace hz::train
