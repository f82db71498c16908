// placeholder (tensor-core kernels follow)
#include "attention/cuda/attn_cuda.h"
#include "core/error.h"
namespace hz::attn::cuda_impl {
bool mma_supported(DType, int64_t) { return false; }
AttnTiles mma_tiles(int64_t) { return {64, 64, 64, 64, true}; }
void mma_forward(const AttnKernelParams&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                 Counter*, cudaStream_t) { throw NotImplementedError("mma"); }
void mma_backward(const AttnKernelParams&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                  const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, Tensor*, Counter*, cudaStream_t) { throw NotImplementedError("mma"); }
}
