// Horizon: context parallelism in training (parallel.context: N): the ranks of a job form
// world / N data-parallel groups of N consecutive ranks; the N ranks of a group read the same
// batches and each keeps its zigzag share of every sequence (attention/context.h says how the
// attention then sees the whole sequence). This file holds the pieces the trainer, `horizon info`
// and the tests share: the communicator behind a group, a batch's share, the loss's weighting and
// the per-layer communication plan.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attention/context.h"
#include "data/loader.h"
#include "distributed/communicator.h"
#include "nn/transformer.h"
#include "train/recipe.h"

namespace hz::train {

// A dist::Communicator (the group's, from split) as the attention's exchange primitives. The
// communicator must outlive the group.
std::shared_ptr<attn::ContextGroup> context_group(dist::Communicator& group);

// This rank's share of a batch: tokens, targets, weights (B, T) -> (B, T_local) in local order;
// documents stay global (the attention and the positions read them at global positions).
data::Batch local_batch(const data::Batch& b, const attn::ZigzagLayout& L);

// Tokens that count in the loss (target != -100, times their weight): the loss's denominator.
double loss_weight(const Tensor& targets, const Tensor& weights);

// A layer's kernel config in a training call of recipe r at its data.seq_len (with packed
// documents when data.documents is masked): what decides the layer's exchange (the communication
// plan and the memory plan).
attn::AttnConfig training_config(const Recipe& r, const nn::Transformer& m, size_t layer);

// One row per layer kind of the model at sequence length T on a group of N ranks: the exchange
// each layer takes and the bytes the busiest rank sends per micro-batch (k and v, forward and
// backward; the ring's dK/dV in the accumulation dtype).
struct ContextPlanRow {
  std::string layers;    // "0-3 (rope)"
  std::string exchange;  // halo | all-gather | ring
  int64_t bytes = 0;     // per rank, per micro-batch, per layer
  int64_t count = 0;     // layers of this kind
};
std::vector<ContextPlanRow> context_plan(const Recipe& r, const nn::Transformer& m, int N);

}  // namespace hz::train
