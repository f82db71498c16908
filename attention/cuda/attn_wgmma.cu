// Horizon: the tensor-core kernels on Hopper's warpgroup MMA (wgmma.mma_async; mma_body.h, kWg): the
// forward, dQ and dK/dV kernels with their products as warpgroup MMAs read straight from
// 128-byte-swizzled shared-memory tiles, everything between them the mma.sync kernels' code. wgmma
// exists on sm_90a alone, so this file is compiled for sm_90a and nothing else (CMakeLists.txt,
// hz_attention_sm90a) and runs only on a compute-capability 9.0 GPU whose binary has the code
// (wgmma_supported). The plain variant, bf16, D 64 and 128, the two-pass backward; asked for by
// HZ_ATTN_MMA=wgmma until a GPU has timed it (attn_mma.cu, use_wgmma).
#define HZ_TILING_PLAIN
#include <algorithm>
#include <map>
#include <mutex>

#include "attention/cuda/mma_launch.cuh"

namespace hz::attn::mma {

template <int D, int kMT>
__global__ void __launch_bounds__(kThreads) fwd_wg_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  fwd_cta<D, kMT, false, false, true>(x, P, a, blockIdx.x, smem);
}
template <int D>
__global__ void __launch_bounds__(kThreads) dq_wg_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  dq_cta<D, false, false, true>(x, P, a, blockIdx.x, smem);
}
template <int D, bool kFox>
__global__ void __launch_bounds__(kThreads) dkv_wg_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  dkv_cta<D, Config<D>::kDkvBq, kFox, false, false, false, false, true>(x, P, a, blockIdx.x, smem);
}

}  // namespace hz::attn::mma

namespace hz::attn::cuda_impl {

namespace {
template <int D>
void forward_wg(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s) {
  constexpr int kMT = mma::Config<D, false>::kFwdMT;  // the mma.sync forward's query tiles: the same tiles
  using S = mma::FwdShape<D, kMT, false, true>;
  launch(mma::fwd_wg_kernel<D, kMT>, P.B * P.H * num_blocks(P.Tq, S::kBq), S::kSmem, s, P, a,
         "attention forward (wgmma)");
}
// The two-pass backward (mma_launch.cuh, backward_d) with the wgmma kernels.
template <int D>
void backward_wg(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s) {
  using Q = mma::DqShape<D, false, true>;
  launch(mma::dq_wg_kernel<D>, P.B * P.H * num_blocks(P.Tq, Q::kBq), Q::kSmem, s, P, a, "attention backward dQ (wgmma)");
  using K = mma::DkvShape<D, mma::Config<D>::kDkvBq, false, true>;
  launch(a.fc != nullptr ? mma::dkv_wg_kernel<D, true> : mma::dkv_wg_kernel<D, false>,
         P.B * P.Hkv * num_blocks(P.Tk, K::kBk), K::kSmem, s, P, a, "attention backward dK/dV (wgmma)");
}
}  // namespace

bool wgmma_supported(int device) {
  static std::mutex mu;
  static std::map<int, bool> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  hz::cuda::use_device(device);
  int major = 0, minor = 0, smem = 0;
  cudaFuncAttributes fa{};
  const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
                  major == 9 && minor == 0 &&
                  cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
                  smem >= std::max({mma::FwdShape<128, 1, false, true>::kSmem, mma::DqShape<128, false, true>::kSmem,
                                    mma::DkvShape<128, mma::Config<128>::kDkvBq, false, true>::kSmem}) &&
                  cudaFuncGetAttributes(&fa, mma::fwd_wg_kernel<64, mma::Config<64>::kFwdMT>) == cudaSuccess &&
                  fa.binaryVersion == 90;
  cudaGetLastError();  // a missing kernel image is an answer here, not an error
  return known[device] = ok;
}

void wgmma_forward_launch(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s) {
  if (P.D == 64) forward_wg<64>(P, a, s);
  else forward_wg<128>(P, a, s);
}
void wgmma_backward_launch(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s) {
  if (P.D == 64) backward_wg<64>(P, a, s);
  else backward_wg<128>(P, a, s);
}

}  // namespace hz::attn::cuda_impl
