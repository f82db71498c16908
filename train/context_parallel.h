// Horizon: context parallelism in training (parallel.context: N): the ranks of a job form
// world / N data-parallel groups of N consecutive ranks (distributed/parallel.h); the N ranks of a
// group read the same batches and each keeps its zigzag share of every sequence
// (distributed/context/: the layout, the exchanges, the route every layer attends through). This
// file holds what the trainer, `horizon info` and the tests take from a recipe: the loss's
// weighting, a layer's kernel config in a training call, and the per-layer communication plan.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/context/route.h"
#include "nn/transformer.h"
#include "train/recipe.h"

namespace hz::train {

// Tokens that count in the loss (target != -100, times their weight): the loss's denominator.
double loss_weight(const Tensor& targets, const Tensor& weights);

// A training call of recipe r at its data.seq_len (with packed documents when data.documents is
// masked), and a layer's kernel config in it: what decides the layer's exchange (the communication
// plan and the memory plan).
nn::AttnCall training_call(const Recipe& r, const nn::Transformer& m);
attn::AttnConfig training_config(const Recipe& r, const nn::Transformer& m, size_t layer);
// Bytes of an activation in a training step of recipe r (2 under bf16, else the model's dtype).
int64_t activation_bytes(const Recipe& r, const nn::Transformer& m);
// Whether the run's f32 attention on a GPU may take the split tensor-core kernels (nn::CallShape).
bool split_attention(const Recipe& r, const nn::Transformer& m);
// A context-parallel route over N ranks for recipe r that plans and attends nothing
// (distributed/context/route.h), for the memory and communication plans; null when N is 1.
std::shared_ptr<dist::ContextRoute> planning_route(const Recipe& r, int N);

// One row per layer kind of the model at sequence length T on a group of N ranks: the exchange
// each layer takes and the bytes the busiest rank sends per micro-batch (k and v, forward and
// backward; the ring's dK/dV in the accumulation dtype).
struct ContextPlanRow {
  std::string layers;    // the layers' indices: "0-3", or "4" alone
  std::string exchange;  // halo | all-gather | ring
  int64_t bytes = 0;     // per rank, per micro-batch, per layer
  int64_t count = 0;     // layers of this kind
};
std::vector<ContextPlanRow> context_plan(const Recipe& r, const nn::Transformer& m, int N);

}  // namespace hz::train
