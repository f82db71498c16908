// Horizon: context parallelism's share of a batch, for training and evaluation alike: the N ranks
// of a group read the same batch and each keeps its zigzag share of every sequence
// (distributed/context/layout.h); per-token results come back to their global positions.
#pragma once
#include <vector>

#include "data/loader.h"
#include "distributed/communicator.h"
#include "distributed/context/layout.h"

namespace hz::dist {

// This rank's share of a batch: tokens, targets, weights (B, T) -> (B, T_local) in local order;
// documents stay global (the attention and the positions read them at global positions).
data::Batch shard_batch(const data::Batch& whole, const ZigzagLayout& L);

// Per-token values of every rank's share (this rank's: `mine`, B x T_local values in local order)
// put back at their global positions, (B, T) row-major, on every rank of the group.
std::vector<double> gather_shares(const Tensor& mine, Communicator& group, const ZigzagLayout& L);

}  // namespace hz::dist
