// Horizon: the tensor-core kernels of the fused attention (bf16, D 64 and 128) on the device: the
// execution context of mma_body.h in inline PTX (ldmatrix, mma.sync m16n8k16, cp.async, ex2), the
// kernels, the D_i = dO . O pre-pass and the host launchers. The kernel lab (dev/cuda/attention/)
// validates and times these against the reference kernels; mma_body.h documents the algorithm.
// The tensor-core kernels take no chunked attention and no sink tokens (attention/tiling.h, HZ_CHUNKS,
// HZ_SINK_TOKENS): such layers run the reference kernels (use_tensor_core in attention/fused.cpp).
#define HZ_TILING_PLAIN
#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "attention/cuda/attn_cuda.h"
#include "attention/cuda/mma_body.h"
#include "attention/cuda/mma_device.cuh"
#include "core/cuda/common.cuh"

namespace hz::attn::cuda_impl {

namespace {

using mma::Args;
using mma::dkv_kernel;
using mma::dot_kernel;
using mma::dq_kernel;
using mma::fwd_kernel;
using mma::kThreads;

template <class K>
void launch(K kernel, int64_t grid, int smem, cudaStream_t s, const AttnKernelParams& P, const Args& a,
            const char* what) {
  if (grid == 0) return;
  HZ_CHECK(grid < (int64_t{1} << 31), ShapeError, "attention: ", grid, " thread blocks exceed the CUDA grid limit");
  HZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, s>>>(P, a);
  HZ_CUDA_LAUNCHED(what);
}

// cp.async needs 16-byte aligned rows: a view starting elsewhere is copied first.
Tensor aligned(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0 ? t : t.clone();
}
const uint16_t* bits(const Tensor& t) { return static_cast<const uint16_t*>(t.raw_data()); }
uint16_t* bits_mut(Tensor& t) { return static_cast<uint16_t*>(t.raw_data()); }

template <int D>
void forward_d(const AttnKernelParams& P, const Args& a, cudaStream_t s) {
  constexpr int kMT = mma::Config<D>::kFwdMT;
  using S = mma::FwdShape<D, kMT>;
  launch(fwd_kernel<D, kMT>, P.B * P.H * num_blocks(P.Tq, S::kBq), S::kSmem, s, P, a, "attention forward (mma)");
}
template <int D>
void backward_d(const AttnKernelParams& P, const Args& a, cudaStream_t s) {
  launch(dq_kernel<D>, P.B * P.H * num_blocks(P.Tq, mma::DqShape<D>::kBq), mma::DqShape<D>::kSmem, s, P, a,
         "attention backward dQ (mma)");
  constexpr int kBq = mma::Config<D>::kDkvBq;
  using S = mma::DkvShape<D, kBq>;
  launch(a.fc != nullptr ? dkv_kernel<D, kBq, true> : dkv_kernel<D, kBq, false>,
         P.B * P.Hkv * num_blocks(P.Tk, S::kBk), S::kSmem, s, P, a, "attention backward dK/dV (mma)");
}

}  // namespace

bool mma_supported(DType dt, int64_t D, int device) {
  if (dt != DType::BF16 || (D != 64 && D != 128)) return false;
  // the GPU and this binary's code for it must both be sm_80 or newer
  static std::mutex mu;
  static std::map<int, bool> ok;
  std::lock_guard<std::mutex> lock(mu);
  auto it = ok.find(device);
  if (it != ok.end()) return it->second;
  hz::cuda::use_device(device);
  int major = 0;
  cudaFuncAttributes fa{};
  const bool good = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    major >= 8 && cudaFuncGetAttributes(&fa, fwd_kernel<64, mma::Config<64>::kFwdMT>) == cudaSuccess &&
                    fa.binaryVersion >= 80;
  cudaGetLastError();  // a missing kernel image is an answer here, not an error
  ok[device] = good;
  return good;
}

AttnTiles mma_tiles(int64_t D) {
  if (D == 64) return {mma::FwdShape<64, mma::Config<64>::kFwdMT>::kBq, 64, mma::Config<64>::kDkvBq, 64, true};
  return {mma::FwdShape<128, mma::Config<128>::kFwdMT>::kBq, 64, mma::Config<128>::kDkvBq, 64, true};
}

void mma_forward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& logn_c,
                 const Tensor& fox_c, const Tensor& sink, Tensor& out, Tensor& lse, Counter* counters, cudaStream_t s) {
  const Tensor qa = aligned(q), ka = aligned(k), va = aligned(v);
  Args a;
  a.q = bits(qa);
  a.k = bits(ka);
  a.v = bits(va);
  a.c = logn_c.defined() ? logn_c.data<float>() : nullptr;
  a.fc = fox_c.defined() ? fox_c.data<float>() : nullptr;
  a.sink = sink.defined() ? sink.data<float>() : nullptr;
  a.out = bits_mut(out);
  a.lse = lse.data<float>();
  a.counters = counters;
  if (P.D == 64) forward_d<64>(P, a, s);
  else forward_d<128>(P, a, s);
}

void mma_backward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& gout, const Tensor& logn_c, const Tensor& fox_c, const Tensor& sink,
                  Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dc_rows, Tensor* dfox_q, Tensor* dfox_k, Tensor* dz_rows,
                  Counter* counters, cudaStream_t s) {
  const Tensor qa = aligned(q), ka = aligned(k), va = aligned(v), ga = aligned(gout);
  const int64_t rows = P.B * P.H * P.Tq;
  Tensor Dvec = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, q.device());
  dot_kernel<<<static_cast<unsigned>((rows + 7) / 8), 256, 0, s>>>(
      rows, static_cast<int>(P.D), static_cast<const __nv_bfloat16*>(out.raw_data()),
      static_cast<const __nv_bfloat16*>(ga.raw_data()), Dvec.data<float>());
  HZ_CUDA_LAUNCHED("attention backward dO . O");
  if (dc_rows) *dc_rows = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, q.device());
  // FoX: every row of dfox_q is written by its dQ block; a key no query of a head sees keeps 0
  if (dfox_q) *dfox_q = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, q.device());
  if (dfox_k) *dfox_k = Tensor::zeros({P.B, P.H, P.Tk}, DType::F32, q.device());
  if (dz_rows) *dz_rows = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, q.device());
  Args a;
  a.q = bits(qa);
  a.k = bits(ka);
  a.v = bits(va);
  a.c = logn_c.defined() ? logn_c.data<float>() : nullptr;
  a.lse = const_cast<float*>(lse.data<float>());
  a.gout = bits(ga);
  a.Dvec = Dvec.data<float>();
  a.dq = bits_mut(dq);
  a.dk = bits_mut(dk);
  a.dv = bits_mut(dv);
  a.dc_rows = dc_rows ? dc_rows->data<float>() : nullptr;
  a.fc = fox_c.defined() ? fox_c.data<float>() : nullptr;
  a.dfox_q = dfox_q ? dfox_q->data<float>() : nullptr;
  a.dfox_k = dfox_k ? dfox_k->data<float>() : nullptr;
  a.sink = sink.defined() ? sink.data<float>() : nullptr;
  a.dz_rows = dz_rows ? dz_rows->data<float>() : nullptr;
  a.counters = counters;
  if (P.D == 64) backward_d<64>(P, a, s);
  else backward_d<128>(P, a, s);
}

}  // namespace hz::attn::cuda_impl
