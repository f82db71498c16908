// Horizon: the general variant of the tensor-core attention kernels (mma_body.h): chunked attention,
// sink tokens, a prefix, token positions and GRAPE's additive term, everything tiling.h defines. Compiled without
// HZ_TILING_PLAIN, so its device code sees the whole of tiling.h; attn_mma.cu sends it the calls
// that need it.
#include "attention/cuda/mma_launch.cuh"

namespace hz::attn::cuda_impl {

void mma_forward_general(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& logn_c, const Tensor& fox_c, const Tensor& sink, Tensor& out, Tensor& lse,
                         Counter* counters, cudaStream_t s) {
  forward_call<true>(P, q, k, v, logn_c, fox_c, sink, out, lse, counters, s);
}

void mma_backward_general(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& gout, const Tensor& logn_c,
                          const Tensor& fox_c, const Tensor& sink, Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dc_rows,
                          Tensor* dfox_q, Tensor* dfox_k, Tensor* dz_rows, Tensor* ddist_q, Tensor* ddist_k,
                          Counter* counters, cudaStream_t s) {
  backward_call<true>(P, q, k, v, out, lse, gout, logn_c, fox_c, sink, dq, dk, dv, dc_rows, dfox_q, dfox_k, dz_rows,
                      ddist_q, ddist_k, counters, s);
}

}  // namespace hz::attn::cuda_impl
