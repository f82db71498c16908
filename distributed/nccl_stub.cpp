// Horizon: make_nccl() for builds without CUDA + NCCL.
#include "distributed/communicator.h"

namespace hz::dist {
bool nccl_compiled() { return false; }
std::string nccl_version() { return {}; }
std::unique_ptr<Communicator> make_nccl() {
  throw Error("this Horizon build has no NCCL support; build with -DHZ_CUDA=ON on a machine with NCCL (the CUDA "
              "toolkit's, or -DHZ_NCCL_ROOT=<prefix with include/nccl.h and lib/libnccl.so.2>)");
}
}  // namespace hz::dist
