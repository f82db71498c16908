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
  std::vector<std::pair<std::string, int64_t>> rows{{"parameters", parameters},
          {"optimizer state", optimizer},
          {"bf16 weight copies", weight_copies},
          {"gradient buckets", buckets},
          {"activations kept", activations},
          {"backward (peak extra)", backward},
          {"logits chunk", logits},
          {"predicted peak (step)", peak},
          {"evaluation peak", eval}};
  if (outside > 0) {
    rows.insert(rows.end(), {{"process outside tensors", outside},
                             {"allocator reserve", reserve_of(run_peak())},
                             {"predicted process peak", process_peak()}});
  }
  return rows;
}

MemoryPlan plan_memory(const Recipe& r, const nn::Transformer& m, int world, int64_t outside) {
  MemoryPlan plan;
  const nn::ModelConfig& c = m.cfg;
  const int64_t p = static_cast<int64_t>(dtype_size(c.dtype));
  const bool bf16 = r.run.precision == nn::Precision::BF16;
  const int64_t a = bf16 ? 2 : p;  // an activation
  // context parallelism: a rank holds its zigzag share of each sequence (the longest share)
  const auto route = planning_route(r, static_cast<int>(r.parallel.context));
  const int64_t T = r.data.seq_len, T_local = route ? route->rows_held(T) : T;
  const bool split = split_attention(r, m);
  const nn::CallShape shape{r.data.batch_size, T_local, a, split};
  const int64_t N = shape.tokens(), C = c.d_model, L = c.n_layers;
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
  // ---- activations: what each block and the head say they keep (nn/cost.h)
  nn::AttnCall call = training_call(r, m);
  call.route = route;
  std::vector<nn::BlockCost> blocks;
  for (size_t l = 0; l < static_cast<size_t>(L); ++l) blocks.push_back(m.layers[l]->cost(shape, call));
  auto kept = [&](const nn::BlockCost& b) {
    switch (r.train.recompute) {
      case nn::Recompute::Layer: return b.kept_layer;
      case nn::Recompute::Attention: return b.kept_attention;
      default: return b.full;
    }
  };
  const nn::HeadCost head = m.head_cost(shape, r.loss_chunk_rows());
  plan.logits = head.logits;
  int64_t all_kept = head.kept;
  for (const nn::BlockCost& b : blocks) all_kept += kept(b);
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
  const int64_t V = c.vocab_size;
  const int64_t head_grads = accumulating ? 0 : V * C * p + m.norm->num_parameters() * p;
  // the head's backward, per chunk: its logits and their gradient, the weight gradient (f32) and one
  // slice's V x C product added into it, dh
  int64_t worst = carried + all_kept + plan.logits + head.transient;
  int64_t kept_below = all_kept - head.kept, grads_above = carried + head_grads;
  for (int64_t l = L - 1; l >= 0; --l) {
    const nn::Block& blk = *m.layers[l];
    const nn::BlockCost& b = blocks[l];
    const int64_t own = kept(b);
    const int64_t attn_internals = b.full - b.kept_attention;  // what attention recomputation drops
    // block l's tensors besides what it keeps: its recomputed forward (with the recomputed output)
    const int64_t again = r.train.recompute == nn::Recompute::Layer ? b.full - own + b.output : 0;
    const int64_t mlp_grads = accumulating ? 0 : blk.mlp->num_parameters() * p;
    const int64_t out_grad = accumulating ? 0 : blk.mlp->w2->weight.numel() * p;  // the MLP's output projection's
    const int64_t at_mlp = kept_below + again + b.mlp_transient + grads_above + out_grad;
    const int64_t attn_again = r.train.recompute == nn::Recompute::Attention ? attn_internals : again;
    const int64_t at_attn =
        kept_below - b.mlp_kept - b.after_mlp + attn_again + b.attention_transient + grads_above + mlp_grads;
    worst = std::max({worst, at_mlp, at_attn});
    if (!accumulating) grads_above += blk.num_parameters() * p;
    kept_below -= own;
  }
  // the end: every gradient, and the embedding's dense gradient before it is added in
  worst = std::max(worst, P * p + N * C * a + V * C * p);
  plan.backward = worst - all_kept;
  plan.peak = plan.parameters + plan.optimizer + plan.weight_copies + plan.buckets + worst;
  // ---- the evaluation: a no-grad forward of the eval batch at the longest length on rank 0
  if (r.eval.every > 0 || r.eval.final) {
    const auto lengths = r.eval_lengths();
    const int64_t eb = r.eval.opts.batch_size > 0 ? r.eval.opts.batch_size : r.data.batch_size;
    const nn::CallShape es{eb, *std::max_element(lengths.begin(), lengths.end()), a, split};
    nn::AttnCall ec;
    ec.T = es.rows;
    ec.train_len = r.data.seq_len;
    int64_t e = m.head_cost(es, r.loss_chunk_rows()).inference;
    for (const auto& blk : m.layers) e = std::max(e, es.tokens() * C * a + blk->cost(es, ec).inference);
    if (bf16) e += c.vocab_size * C * 2;  // the largest weight's bf16 cast (the head's)
    plan.eval_tokens = es.tokens();
    plan.eval = plan.parameters + plan.optimizer + plan.buckets + e;
  }
  plan.outside = std::max<int64_t>(outside, 0);  // the process (CPU): what it holds besides
  return plan;
}

}  // namespace hz::train
