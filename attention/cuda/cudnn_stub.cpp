// Horizon: the cuDNN route's entry points in a build without cudnn-frontend's headers (or without
// CUDA): nothing is routed to cuDNN (attention/fused.cpp asks cudnn_compiled() first), and a call
// that reaches these anyway is a bug.
#include "attention/fused_kernels.h"
#include "core/error.h"

namespace hz::attn::detail {

bool cudnn_compiled() { return false; }
std::string cudnn_version() { return ""; }
void cudnn_forward(const AttnKernelParams&, const CudnnGraphDesc&, const Tensor&, const Tensor&, const Tensor&,
                   const Tensor&, Tensor&, Tensor&) {
  throw Error("internal: cuDNN attention called in a build without cudnn-frontend (HZ_CUDNN)");
}
void cudnn_backward(const AttnKernelParams&, const CudnnGraphDesc&, const Tensor&, const Tensor&, const Tensor&,
                    const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, Tensor*) {
  throw Error("internal: cuDNN attention called in a build without cudnn-frontend (HZ_CUDNN)");
}

}  // namespace hz::attn::detail
