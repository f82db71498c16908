// Horizon: the general variant of the tensor-core kernels on Hopper's wgmma (mma_body.h, kWg with
// kGen): chunked attention, sink tokens, a prefix, token positions and GRAPE's additive term, as
// attn_mma_general.cu has them for mma.sync. Compiled for sm_90a alone, without HZ_TILING_PLAIN, so
// its device code sees the whole of tiling.h (attn_wgmma.cu says the rest).
#include "attention/cuda/mma_launch.cuh"

namespace hz::attn::cuda_impl {

void wgmma_forward_launch_general(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s) {
  if (P.D == 64) forward_wg<64, true>(P, a, s);
  else forward_wg<128, true>(P, a, s);
}
void wgmma_backward_launch_general(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s) {
  if (P.D == 64) backward_wg<64, true>(P, a, s);
  else backward_wg<128, true>(P, a, s);
}
void wgmma_backward_one_pass_launch_general(const AttnKernelParams& P, const mma::Args& a, const Tensor& dq,
                                            cudaStream_t s) {
  if (P.D == 64) backward_one_pass<64, false, true, true>(P, a, dq, s);
  else backward_one_pass<128, false, true, true>(P, a, dq, s);
}

}  // namespace hz::attn::cuda_impl
