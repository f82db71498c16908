// Horizon: the tensor-core kernels of the fused attention (bf16, D 64 and 128) on the device: the
// execution context of mma_body.h in inline PTX (ldmatrix, mma.sync m16n8k16, cp.async, ex2), the
// kernels, the D_i = dO . O pre-pass and the host launchers (mma_launch.cuh). The kernel lab
// (dev/cuda/attention/) validates and times these against the reference kernels; mma_body.h
// documents the algorithm. This file compiles the plain variant (HZ_TILING_PLAIN: one interval per
// row, index positions); calls with chunked attention, sink tokens, a prefix, token positions or
// GRAPE's additive term go to the general variant in attn_mma_general.cu.
#define HZ_TILING_PLAIN
#include <algorithm>
#include <map>
#include <mutex>

#include "attention/cuda/mma_launch.cuh"
#include "attention/fused_kernels.h"

namespace hz::attn::cuda_impl {

namespace {
// Whether a call needs the general variant (mma_body.h).
bool general(const AttnKernelParams& P) {
  return P.chunk > 0 || P.sink_tokens > 0 || P.prefix > 0 || P.positions != nullptr || P.dist;
}
}  // namespace

// The largest dynamic shared memory a kernel family asks for at head dim D (the split kernels' f32
// tiles are twice as wide: 167-200 KB at D 128, more than an sm_80 GPU gives one block).
template <int D, bool kSplit>
int family_smem() {
  using C = mma::Config<D, kSplit>;
  return std::max({mma::FwdShape<D, C::kFwdMT, kSplit>::kSmem, mma::DqShape<D, kSplit>::kSmem,
                   mma::DkvShape<D, C::kDkvBq, kSplit>::kSmem});
}

bool one_pass_backward() {
  return detail::env_choice("HZ_ATTN_BACKWARD", {"two_pass", "one_pass"}) == "one_pass";
}

bool use_wgmma(const AttnKernelParams& P, DType dt, int device) {
  const std::string m = detail::mma_choice();
  return !m.empty() && m != "mma" && dt == DType::BF16 && (P.D == 64 || P.D == 128) && wgmma_supported(device);
}
#ifndef HZ_WGMMA  // a build without sm_90 among its architectures has no wgmma code (attn_wgmma.cu)
namespace {
[[noreturn]] void no_wgmma() {
  throw DeviceError("attention: this build has no wgmma kernels (CMAKE_CUDA_ARCHITECTURES without 90)");
}
}  // namespace
bool wgmma_supported(int) { return false; }
void wgmma_forward_launch(const AttnKernelParams&, const mma::Args&, cudaStream_t) { no_wgmma(); }
void wgmma_backward_launch(const AttnKernelParams&, const mma::Args&, cudaStream_t) { no_wgmma(); }
void wgmma_backward_one_pass_launch(const AttnKernelParams&, const mma::Args&, const Tensor&, cudaStream_t) {
  no_wgmma();
}
void wgmma_backward_one_pass_launch_general(const AttnKernelParams&, const mma::Args&, const Tensor&, cudaStream_t) {
  no_wgmma();
}
void wgmma_forward_launch_general(const AttnKernelParams&, const mma::Args&, cudaStream_t) { no_wgmma(); }
void wgmma_backward_launch_general(const AttnKernelParams&, const mma::Args&, cudaStream_t) { no_wgmma(); }
#endif

bool mma_supported(DType dt, int64_t D, int device) {
  if ((dt != DType::BF16 && dt != DType::F32) || (D != 64 && D != 128)) return false;
  // the GPU and this binary's code for it must both be sm_80 or newer, and the GPU must give a
  // block the family's shared memory
  struct Gpu {
    bool sm80 = false;
    int smem = 0;
  };
  static std::mutex mu;
  static std::map<int, Gpu> known;
  Gpu d;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(device);
    if (it != known.end()) {
      d = it->second;
    } else {
      hz::cuda::use_device(device);
      int major = 0;
      cudaFuncAttributes fa{};
      d.sm80 = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
               major >= 8 && cudaFuncGetAttributes(&fa, fwd_kernel<64, mma::Config<64>::kFwdMT>) == cudaSuccess &&
               fa.binaryVersion >= 80;
      if (cudaDeviceGetAttribute(&d.smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) d.smem = 0;
      cudaGetLastError();  // a missing kernel image is an answer here, not an error
      known[device] = d;
    }
  }
  const bool split = dt == DType::F32;
  const int need = D == 64 ? (split ? family_smem<64, true>() : family_smem<64, false>())
                           : (split ? family_smem<128, true>() : family_smem<128, false>());
  return d.sm80 && d.smem >= need;
}

template <int D, bool kSplit>
AttnTiles tiles() {
  using C = mma::Config<D, kSplit>;
  return {mma::FwdShape<D, C::kFwdMT, kSplit>::kBq, 64, C::kDkvBq, 64, true};
}
AttnTiles mma_tiles(DType dt, int64_t D, int device) {
  const bool split = dt == DType::F32;
  AttnTiles t = D == 64 ? (split ? tiles<64, true>() : tiles<64, false>())
                        : (split ? tiles<128, true>() : tiles<128, false>());
  // the overlapped wgmma forward's query blocks (mma::Config's kFwdMTOverlap m-tiles per warpgroup,
  // kFwdWGOverlap warpgroups)
  using C64 = mma::Config<64>;
  using C128 = mma::Config<128>;
  const std::string m = detail::mma_choice();
  if (dt == DType::BF16 && (m == "wgmma" || m == "wgmma_overlap") && wgmma_supported(device)) {
    // (the warp-specialised forward's 128-key steps at D 64 count their blocks of 64: mma_body.h)
    t.fwd_q = D == 64 ? mma::FwdShape<64, C64::kFwdMTOverlap, false, true, C64::kFwdWGOverlap>::kBq
                      : mma::FwdShape<128, C128::kFwdMTOverlap, false, true, C128::kFwdWGOverlap>::kBq;
  }
  return t;
}

void mma_forward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& logn_c,
                 const Tensor& fox_c, const Tensor& sink, Tensor& out, Tensor& lse, Counter* counters, cudaStream_t s) {
  if (general(P)) mma_forward_general(P, q, k, v, logn_c, fox_c, sink, out, lse, counters, s);
  else forward_call<false>(P, q, k, v, logn_c, fox_c, sink, out, lse, counters, s);
}

void mma_backward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& gout, const Tensor& logn_c, const Tensor& fox_c, const Tensor& sink,
                  Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dc_rows, Tensor* dfox_q, Tensor* dfox_k, Tensor* dz_rows,
                  Tensor* ddist_q, Tensor* ddist_k, Counter* counters, cudaStream_t s) {
  if (general(P))
    mma_backward_general(P, q, k, v, out, lse, gout, logn_c, fox_c, sink, dq, dk, dv, dc_rows, dfox_q, dfox_k, dz_rows,
                         ddist_q, ddist_k, counters, s);
  else  // no GRAPE rates here (general(P) took them)
    backward_call<false>(P, q, k, v, out, lse, gout, logn_c, fox_c, sink, dq, dk, dv, dc_rows, dfox_q, dfox_k, dz_rows,
                         nullptr, nullptr, counters, s);
}

}  // namespace hz::attn::cuda_impl
