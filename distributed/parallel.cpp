// Horizon: the ranks of a job (see parallel.h).
#include "distributed/parallel.h"

#include "core/error.h"

namespace hz::dist {

ParallelDims::ParallelDims(int world_, int rank_, int context_) : world(world_), rank(rank_), context(context_) {
  HZ_CHECK(world >= 1 && rank >= 0 && rank < world, ValueError, "parallel: rank ", rank, " of ", world);
  HZ_CHECK(context >= 1 && world % context == 0, ValueError, "parallel.context=", context,
           " needs a number of ranks divisible by it; got ", world, " (mpirun -np = data-parallel ranks x ", context,
           ")");
}

std::unique_ptr<Communicator> context_group(Communicator& world, const ParallelDims& dims) {
  if (dims.context == 1) return nullptr;
  HZ_CHECK(world.size() == dims.world && world.rank() == dims.rank, ValueError, "parallel: the layout of ", dims.world,
           " ranks does not match the communicator's ", world.size());
  return world.split(dims.data_rank());
}

}  // namespace hz::dist
