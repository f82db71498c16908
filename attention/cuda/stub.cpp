// Horizon: the fused attention's CUDA entry points in a build without CUDA (HZ_CUDA=OFF). A CUDA
// tensor cannot exist in such a build, so these are reached only by mistake.
#include "attention/fused_kernels.h"

namespace hz::attn::detail {
namespace {
[[noreturn]] void no_cuda() {
  throw DeviceError("this Horizon build has no CUDA support; reconfigure with -DHZ_CUDA=ON on a machine with the "
                    "CUDA toolkit");
}
}  // namespace
bool tensor_core_supported(DType, int64_t, int) { return false; }
AttnTiles tensor_core_tiles(DType, int64_t, int) { no_cuda(); }
bool one_pass_backward() { return false; }
bool use_wgmma(const AttnKernelParams&, DType, int) { return false; }
void cuda_forward(const AttnKernelParams&, bool, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                  const Tensor&, const Tensor&, Tensor&, Tensor&) {
  no_cuda();
}
void cuda_backward(const AttnKernelParams&, bool, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                   const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&,
                   Tensor*, Tensor*, Tensor*, Tensor*, Tensor*, Tensor*) {
  no_cuda();
}
AttnStats cuda_stats() { return {}; }
void cuda_reset_stats() {}
}  // namespace hz::attn::detail
