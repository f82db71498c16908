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
    if (ctx > 1) {  // the gathered keys and values (all-gather) or the halos the attention keeps
      const attn::AttnConfig cfg = training_config(r, m, l);
      const attn::ZigzagLayout lay(T, static_cast<int>(ctx), 0);
      const bool gather = attn::context_exchange(cfg, lay) == attn::ContextExchange::AllGather;
      b += 2 * r.data.batch_size * Hkv * D * a * (gather ? T : 2 * attn::context_rows_sent(cfg, lay));
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
  // ---- the peak of backward: block l running backward, blocks above done
  // After the first of several micro-batches (train.grad_accum) every gradient is alive throughout
  // and the next ones add into it; otherwise the head's weight gradient (the embedding's, tied)
  // lives from the head's backward on and each block's from its own.
  const bool accumulating = r.train.grad_accum > 1;
  const int64_t carried = accumulating ? P * p : 0;
  const int64_t head_grads = accumulating ? 0 : V * C * p + m.norm->num_parameters() * p;
  const int64_t transient = 2 * N * C * a + 3 * N * F * a;
  // the head's backward, per chunk: its logits and their gradient, the weight gradient (f32) and one
  // slice's V x C product added into it, dh
  int64_t worst = carried + all_kept + plan.logits + 2 * V * C * 4 + N * C * a;
  int64_t kept_below = all_kept - head_kept, grads_above = carried + head_grads;
  for (int64_t l = L - 1; l >= 0; --l) {
    const int64_t recomputed = r.train.recompute == nn::Recompute::None ? 0 : full_block(l) - kept(l);
    if (!accumulating) grads_above += m.layers[l]->num_parameters() * p;
    worst = std::max(worst, kept_below + recomputed + transient + grads_above);
    kept_below -= kept(l);
  }
  // the end: every gradient, and the embedding's dense gradient before it is added in
  worst = std::max(worst, P * p + N * C * a + V * C * p);
  plan.backward = worst - all_kept;
  plan.peak = plan.parameters + plan.optimizer + plan.weight_copies + plan.buckets + worst;
  return plan;
}

}  // namespace hz::train
