// Horizon: the host side of the tensor-core attention kernels, written once for both variants
// (mma_body.h): the launchers and the pointer plumbing. Included by attn_mma.cu (the plain variant,
// compiled with HZ_TILING_PLAIN) and attn_mma_general.cu (the general one), each instantiating
// only its own kernels: a kernel's device code always sees the tiling.h its file compiles.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "attention/cuda/attn_cuda.h"
#include "attention/cuda/mma_body.h"
#include "attention/cuda/mma_device.cuh"
#include "attention/fused.h"
#include "core/cuda/common.cuh"

namespace hz::attn::cuda_impl {

// Hopper's wgmma kernels (attn_wgmma.cu: the plain variant, attn_wgmma_general.cu: the general one,
// both built with the sm_90a code; attn_mma.cu has their stand-ins in a build without it): whether a
// device runs them, and the launches (bf16; the backward in two passes, or in one).
bool wgmma_supported(int device);
void wgmma_forward_launch(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s);
void wgmma_backward_launch(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s);
void wgmma_backward_one_pass_launch(const AttnKernelParams& P, const mma::Args& a, const Tensor& dq, cudaStream_t s);
void wgmma_backward_one_pass_launch_general(const AttnKernelParams& P, const mma::Args& a, const Tensor& dq,
                                            cudaStream_t s);
void wgmma_forward_launch_general(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s);
void wgmma_backward_launch_general(const AttnKernelParams& P, const mma::Args& a, cudaStream_t s);

namespace {

using mma::Args;
using mma::dkv_kernel;
using mma::dkvq_kernel;
using mma::dot_kernel;
using mma::dq_kernel;
using mma::fwd_kernel;
using mma::kThreads;

template <class K>
void launch(K kernel, int64_t grid, int smem, cudaStream_t s, const AttnKernelParams& P, const Args& a,
            const char* what, int threads = kThreads) {
  if (grid == 0) return;
  HZ_CHECK(grid < (int64_t{1} << 31), ShapeError, "attention: ", grid, " thread blocks exceed the CUDA grid limit");
  HZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<static_cast<unsigned>(grid), threads, smem, s>>>(P, a);
  HZ_CUDA_LAUNCHED(what);
}

// cp.async needs 16-byte aligned rows: a view starting elsewhere is copied first.
Tensor aligned(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0 ? t : t.clone();
}
// The split kernels' input: (..., D) f32 -> (..., 2D) bf16 rows [hi | lo] (mma_device.cuh).
Tensor split_rows(const Tensor& t, cudaStream_t s) {
  const Tensor c = t.contiguous();
  std::vector<int64_t> shape = c.shape();
  const int64_t D = shape.back(), n = c.numel();
  shape.back() = 2 * D;
  Tensor y = Tensor::empty(shape, DType::BF16, c.device());
  if (n == 0) return y;
  mma::split_rows_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(
      n, static_cast<int>(D), c.data<float>(), static_cast<__nv_bfloat16*>(y.raw_data()));
  HZ_CUDA_LAUNCHED("attention: f32 inputs split into bf16 pairs");
  return y;
}
// A kernel input in the form the kernels read: bf16 as it is (aligned), f32 split (kSplit).
template <bool kSplit>
Tensor kernel_input(const Tensor& t, cudaStream_t s) {
  if constexpr (kSplit) return split_rows(t, s);
  else return aligned(t);
}
const uint16_t* bits(const Tensor& t) { return static_cast<const uint16_t*>(t.raw_data()); }

template <int D, bool kGen, bool kSplit>
void forward_d(const AttnKernelParams& P, const Args& a, cudaStream_t s) {
  constexpr int kMT = mma::Config<D, kSplit>::kFwdMT;
  using S = mma::FwdShape<D, kMT, kSplit>;
  launch(fwd_kernel<D, kMT, kGen, kSplit>, P.B * P.H * num_blocks(P.Tq, S::kBq), S::kSmem, s, P, a,
         "attention forward (mma)");
}
// The wgmma kernels of a variant (instantiated only by the sm_90a files, attn_wgmma*.cu): the
// forward in one of its forms (mma_body.h, fwd_cta; fused.h, WgmmaForward), the two-pass backward
// with the mma.sync kernels' tiles and grids.
template <int D, bool kGen, WgmmaForward kForm>
void forward_wg_form(const AttnKernelParams& P, Args a, cudaStream_t s) {
  using C = mma::Config<D>;
  constexpr bool kOverlap = kForm != WgmmaForward::Serial, kWs = kForm == WgmmaForward::WarpSpecialized;
  constexpr int kMT = kOverlap ? C::kFwdMTOverlap : C::kFwdMT, kWG = kOverlap ? C::kFwdWGOverlap : 1;
  using S = mma::FwdShape<D, kMT, false, true, kWG, kWs, kWs ? C::kFwdBkWs : 64>;
  if constexpr (kWs) {  // (the inputs are 16-byte aligned: forward_variant)
    encode_tile_map(a.q_map, a.q, D, P.Tq, P.B * P.H, 64);
    encode_tile_map(a.k_map, a.k, D, P.Tk, P.B * P.Hkv, 64);
    encode_tile_map(a.v_map, a.v, D, P.Tk, P.B * P.Hkv, 64);
  }
  const int64_t grid = P.B * P.H * num_blocks(P.Tq, S::kBq);
  if constexpr (kWs) {
    static_assert(kWG == 2 && S::kCta == 3 * kThreads, "fwd_ws_kernel's shape");
    launch(mma::fwd_ws_kernel<D, kGen>, grid, S::kSmem, s, P, a, "attention forward (wgmma, warp-specialised)", S::kCta);
  } else {
    launch(mma::fwd_wg_kernel<D, kMT, kGen, kOverlap, kWG>, grid, S::kSmem, s, P, a,
           kOverlap ? "attention forward (wgmma, overlapped)" : "attention forward (wgmma)", S::kCta);
  }
}
// the form HZ_ATTN_MMA asks for (fused.h, wgmma_forward); the general variant's calls take the
// overlapped form for the warp-specialised one (its consumers need more than the 232 registers
// setmaxnreg leaves them: ptxas spilled 60 B at D 64, 168 B at D 128)
template <int D, bool kGen>
void forward_wg(const AttnKernelParams& P, const Args& a, cudaStream_t s) {
  switch (wgmma_forward()) {
    case WgmmaForward::WarpSpecialized:
      if constexpr (!kGen) return forward_wg_form<D, kGen, WgmmaForward::WarpSpecialized>(P, a, s);
      [[fallthrough]];
    case WgmmaForward::Overlap: return forward_wg_form<D, kGen, WgmmaForward::Overlap>(P, a, s);
    case WgmmaForward::Serial: return forward_wg_form<D, kGen, WgmmaForward::Serial>(P, a, s);
  }
}
template <int D, bool kGen>
void backward_wg(const AttnKernelParams& P, const Args& a, cudaStream_t s) {
  using Q = mma::DqShape<D, false, true>;
  launch(mma::dq_wg_kernel<D, kGen>, P.B * P.H * num_blocks(P.Tq, Q::kBq), Q::kSmem, s, P, a,
         "attention backward dQ (wgmma)");
  using K = mma::DkvShape<D, mma::Config<D>::kDkvBq, false, true>;
  const int64_t grid = P.B * P.Hkv * num_blocks(P.Tk, K::kBk);
  const char* what = "attention backward dK/dV (wgmma)";
  // FoX as backward_d has it: a template argument of the plain kernel, read at run time by the general one
  if constexpr (kGen) launch(mma::dkv_wg_kernel<D, false, true>, grid, K::kSmem, s, P, a, what);
  else launch(a.fc != nullptr ? mma::dkv_wg_kernel<D, true, false> : mma::dkv_wg_kernel<D, false, false>, grid,
              K::kSmem, s, P, a, what);
}

// The one-pass backward (mma_body.h, dq_step): dK, dV and dQ from one kernel, dQ added in each query
// block's turn into an f32 accumulator (the split kernels' f32 dq itself), and FoX's rows' parts into
// dfox_q, both zeroed first (query blocks no key block visits); LogN's dc parts per key (zeroed by the
// caller: keys no query sees); the turns and the started-block count zeroed; the sinks' rows from
// their own kernel. Calls with FoX, LogN's gradient or GRAPE's rates take the kernel with those sums
// (kRows); GRAPE's rows' parts go to ddist_q as FoX's go to dfox_q. kWg: the kernel on Hopper's wgmma
// (instantiated only by attn_wgmma*.cu); kGen: the general variant's, with a map of the key blocks
// that visit each query block first (visit_map).
template <int D, bool kSplit, bool kWg = false, bool kGen = false>
void backward_one_pass(const AttnKernelParams& P, Args a, const Tensor& dq, cudaStream_t s) {
  constexpr int kBq = mma::Config<D, kSplit>::kDkvBq;
  using S = mma::DkvShape<D, kBq, kSplit, kWg>;
  Tensor map;
  if constexpr (kGen) {
    const int64_t nkb = num_blocks(P.Tk, S::kBk), words = P.B * P.H * num_blocks(P.Tq, kBq) * ((nkb + 31) / 32);
    map = Tensor::zeros({words}, DType::I32, dq.device());
    const int64_t n = P.B * P.H * nkb;
    mma::visit_map_kernel<kBq, S::kBk><<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(
        P, static_cast<unsigned*>(map.raw_data()));
    HZ_CUDA_LAUNCHED("attention backward: the one pass's visit map");
    a.dq_visit = static_cast<const unsigned*>(map.raw_data());
  }
  const int64_t nturn = P.B * P.H * num_blocks(P.Tq, kBq);
  Tensor turn = Tensor::empty({nturn + 1}, DType::I32, dq.device());
  HZ_CUDA_CHECK(cudaMemsetAsync(turn.raw_data(), 0, static_cast<size_t>(nturn + 1) * 4, s));
  HZ_CUDA_CHECK(cudaMemsetAsync(dq.raw_data(), 0, static_cast<size_t>(dq.numel()) * dtype_size(dq.dtype()), s));
  Tensor acc;
  if (!kSplit) acc = Tensor::empty({P.B, P.H, P.Tq, P.D}, DType::F32, dq.device());  // every add after a store
  a.dq_acc = kSplit ? static_cast<float*>(dq.raw_data()) : acc.data<float>();
  a.dq_turn = static_cast<unsigned*>(turn.raw_data());
  a.tile_next = a.dq_turn + nturn;
  for (float* rows : {a.dfox_q, a.ddist_q})
    if (rows != nullptr) HZ_CUDA_CHECK(cudaMemsetAsync(rows, 0, static_cast<size_t>(P.B * P.H * P.Tq) * 4, s));
  if (a.dz_rows != nullptr) {
    const int64_t rows = P.B * P.H * P.Tq;
    mma::sink_rows_kernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, s>>>(rows, P.H, P.Tq, a.sink, a.lse,
                                                                                   a.Dvec, a.dz_rows);
    HZ_CUDA_LAUNCHED("attention backward: the sinks' rows");
  }
  const bool rows = a.fc != nullptr || a.dc_rows != nullptr || a.ddist_q != nullptr;
  launch(rows ? dkvq_kernel<D, kBq, kSplit, false, kWg, true, kGen>
              : dkvq_kernel<D, kBq, kSplit, false, kWg, false, kGen>,
         P.B * P.Hkv * num_blocks(P.Tk, S::kBk), S::kSmem, s, P, a,
         kWg ? "attention backward dK/dV/dQ, one pass (wgmma)" : "attention backward dK/dV/dQ, one pass (mma)");
}

template <int D, bool kGen, bool kSplit>
void backward_d(const AttnKernelParams& P, const Args& a, cudaStream_t s) {
  using Q = mma::DqShape<D, kSplit>;
  launch(dq_kernel<D, kGen, kSplit>, P.B * P.H * num_blocks(P.Tq, Q::kBq), Q::kSmem, s, P, a,
         "attention backward dQ (mma)");
  constexpr int kBq = mma::Config<D, kSplit>::kDkvBq;
  using S = mma::DkvShape<D, kBq, kSplit>;
  // the plain variant has FoX as a template argument, the general one reads a.fc at run time (if
  // constexpr: a file instantiates its own variant only)
  const int64_t grid = P.B * P.Hkv * num_blocks(P.Tk, S::kBk);
  const char* what = "attention backward dK/dV (mma)";
  if constexpr (kGen) launch(dkv_kernel<D, kBq, false, true, kSplit>, grid, S::kSmem, s, P, a, what);
  else launch(a.fc != nullptr ? dkv_kernel<D, kBq, true, false, kSplit> : dkv_kernel<D, kBq, false, false, kSplit>,
              grid, S::kSmem, s, P, a, what);
}

template <bool kGen, bool kSplit>
void forward_variant(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& logn_c,
                     const Tensor& fox_c, const Tensor& sink, Tensor& out, Tensor& lse, Counter* counters,
                     cudaStream_t s) {
  const Tensor qa = kernel_input<kSplit>(q, s), ka = kernel_input<kSplit>(k, s), va = kernel_input<kSplit>(v, s);
  Args a;
  a.q = bits(qa);
  a.k = bits(ka);
  a.v = bits(va);
  a.c = logn_c.defined() ? logn_c.data<float>() : nullptr;
  a.fc = fox_c.defined() ? fox_c.data<float>() : nullptr;
  a.sink = sink.defined() ? sink.data<float>() : nullptr;
  a.out = out.raw_data();
  a.lse = lse.data<float>();
  a.counters = counters;
  if constexpr (!kSplit) {  // Hopper's wgmma where it is asked for and runs (attn_cuda.h)
    if (use_wgmma(P, DType::BF16, q.device().index))
      return kGen ? wgmma_forward_launch_general(P, a, s) : wgmma_forward_launch(P, a, s);
  }
  if (P.D == 64) forward_d<64, kGen, kSplit>(P, a, s);
  else forward_d<128, kGen, kSplit>(P, a, s);
}

template <bool kGen, bool kSplit>
void backward_variant(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                      const Tensor& lse, const Tensor& gout, const Tensor& logn_c, const Tensor& fox_c,
                      const Tensor& sink, Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dc_rows, Tensor* dfox_q,
                      Tensor* dfox_k, Tensor* dz_rows, Tensor* ddist_q, Tensor* ddist_k, Counter* counters,
                      cudaStream_t s) {
  const Tensor qa = kernel_input<kSplit>(q, s), ka = kernel_input<kSplit>(k, s), va = kernel_input<kSplit>(v, s),
               ga = kernel_input<kSplit>(gout, s);
  const int64_t rows = P.B * P.H * P.Tq;
  Tensor Dvec = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, q.device());
  // D_i from out and dO as the caller holds them (bf16, or f32 for the split kernels)
  using T = std::conditional_t<kSplit, float, __nv_bfloat16>;
  const Tensor gc = gout.contiguous();
  dot_kernel<T><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, s>>>(
      rows, static_cast<int>(P.D), static_cast<const T*>(out.raw_data()), static_cast<const T*>(gc.raw_data()),
      Dvec.data<float>());
  HZ_CUDA_LAUNCHED("attention backward dO . O");
  // the one-pass backward where it is asked for and applies (attn_cuda.h): LogN's dc parts per key
  const bool one = one_pass_backward();
  if (dc_rows)
    *dc_rows = one ? Tensor::zeros({P.B, P.H, P.Tk}, DType::F32, q.device())
                   : Tensor::empty({P.B, P.H, P.Tq}, DType::F32, q.device());
  // FoX: every row of dfox_q is written by its dQ block (the one pass zeroes it and adds to it); a key
  // no query of a head sees keeps 0
  if (dfox_q) *dfox_q = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, q.device());
  if (dfox_k) *dfox_k = Tensor::zeros({P.B, P.H, P.Tk}, DType::F32, q.device());
  if (dz_rows) *dz_rows = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, q.device());
  // GRAPE (general variant): every row of ddist_q is written by its dQ block, keys no query sees keep 0
  if (ddist_q) *ddist_q = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, q.device());
  if (ddist_k) *ddist_k = Tensor::zeros({P.B, P.H, P.Tk}, DType::F32, q.device());
  Args a;
  a.q = bits(qa);
  a.k = bits(ka);
  a.v = bits(va);
  a.c = logn_c.defined() ? logn_c.data<float>() : nullptr;
  a.lse = const_cast<float*>(lse.data<float>());
  a.gout = bits(ga);
  a.Dvec = Dvec.data<float>();
  a.dq = dq.raw_data();
  a.dk = dk.raw_data();
  a.dv = dv.raw_data();
  a.dc_rows = dc_rows ? dc_rows->data<float>() : nullptr;
  a.fc = fox_c.defined() ? fox_c.data<float>() : nullptr;
  a.dfox_q = dfox_q ? dfox_q->data<float>() : nullptr;
  a.dfox_k = dfox_k ? dfox_k->data<float>() : nullptr;
  a.sink = sink.defined() ? sink.data<float>() : nullptr;
  a.dz_rows = dz_rows ? dz_rows->data<float>() : nullptr;
  a.ddist_q = ddist_q ? ddist_q->data<float>() : nullptr;
  a.ddist_k = ddist_k ? ddist_k->data<float>() : nullptr;
  a.counters = counters;
  // the one-pass backward where it is asked for and applies, on Hopper's wgmma where that is too;
  // else the two-pass backward, on wgmma where it is asked for (attn_cuda.h)
  if (one) {
    if (!kSplit && use_wgmma(P, DType::BF16, q.device().index))
      return kGen ? wgmma_backward_one_pass_launch_general(P, a, dq, s) : wgmma_backward_one_pass_launch(P, a, dq, s);
    if (P.D == 64) backward_one_pass<64, kSplit, false, kGen>(P, a, dq, s);
    else backward_one_pass<128, kSplit, false, kGen>(P, a, dq, s);
    return;
  }
  if constexpr (!kSplit) {
    if (use_wgmma(P, DType::BF16, q.device().index))
      return kGen ? wgmma_backward_launch_general(P, a, s) : wgmma_backward_launch(P, a, s);
  }
  if (P.D == 64) backward_d<64, kGen, kSplit>(P, a, s);
  else backward_d<128, kGen, kSplit>(P, a, s);
}

// The entry points of one variant: bf16 calls run the bf16 kernels, f32 calls the split ones.
template <bool kGen>
void forward_call(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& logn_c,
                  const Tensor& fox_c, const Tensor& sink, Tensor& out, Tensor& lse, Counter* counters,
                  cudaStream_t s) {
  if (q.dtype() == DType::F32) forward_variant<kGen, true>(P, q, k, v, logn_c, fox_c, sink, out, lse, counters, s);
  else forward_variant<kGen, false>(P, q, k, v, logn_c, fox_c, sink, out, lse, counters, s);
}
template <bool kGen>
void backward_call(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, const Tensor& gout, const Tensor& logn_c, const Tensor& fox_c, const Tensor& sink,
                   Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dc_rows, Tensor* dfox_q, Tensor* dfox_k,
                   Tensor* dz_rows, Tensor* ddist_q, Tensor* ddist_k, Counter* counters, cudaStream_t s) {
  if (q.dtype() == DType::F32)
    backward_variant<kGen, true>(P, q, k, v, out, lse, gout, logn_c, fox_c, sink, dq, dk, dv, dc_rows, dfox_q, dfox_k,
                                 dz_rows, ddist_q, ddist_k, counters, s);
  else
    backward_variant<kGen, false>(P, q, k, v, out, lse, gout, logn_c, fox_c, sink, dq, dk, dv, dc_rows, dfox_q, dfox_k,
                                  dz_rows, ddist_q, ddist_k, counters, s);
}

}  // namespace

}  // namespace hz::attn::cuda_impl
