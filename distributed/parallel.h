// Horizon: the ranks of a job, laid out once. world = data x context: the `context` consecutive
// ranks of a group share each sequence (context parallelism, distributed/context/), the groups are
// the data-parallel replicas, each reading its own batches. Gradients are averaged over the whole
// world (every rank of a group holds a share of the same sequences' gradients; the loss weighting
// makes their average the right one).
#pragma once
#include <memory>

#include "distributed/communicator.h"

namespace hz::dist {

struct ParallelDims {
  int world = 1, rank = 0, context = 1;

  ParallelDims() = default;
  // checks 0 <= rank < world and that `context` divides `world`, naming mpirun's -np
  ParallelDims(int world, int rank, int context);
  int data() const { return world / context; }        // data-parallel replicas
  int data_rank() const { return rank / context; }    // this rank's replica: its share of the data
  int context_rank() const { return rank % context; } // this rank's place in its group's sequences
};

// This rank's context-parallel group (`dims.context` consecutive ranks of `world`), split from the
// world: collective, every rank calls it. Null when dims.context is 1.
std::unique_ptr<Communicator> context_group(Communicator& world, const ParallelDims& dims);

}  // namespace hz::dist
