// Horizon: make_nccl() for builds without CUDA + NCCL + MPI.
#include "distributed/communicator.h"

namespace hz::dist {
bool nccl_compiled() { return false; }
std::unique_ptr<Communicator> make_nccl() {
  throw Error("this Horizon build has no NCCL support; build with -DHZ_CUDA=ON -DHZ_MPI=ON on a machine with NCCL");
}
}  // namespace hz::dist
