// Horizon: the fused attention's CUDA kernels, as the host launches them (internal to
// attention/cuda/). attn_cuda.cu picks the kernel family and owns the block counters;
// attn_reference.cu holds the reference kernels, attn_mma.cu and attn_mma_general.cu the tensor-core
// ones (mma_launch.cuh their launchers).
//
// Shapes (contiguous): q/out/gout/dq (B, H, Tq, D), k/v/dk/dv (B, Hkv, Tk, D), lse (B, H, Tq) in the
// accumulation dtype A (f32, or f64 for f64 inputs), logn_c (H) in A or undefined, dc_rows
// (B, H, Tq) in A; FoX's fox_c (B, H, Tk) in A or undefined, its gradient's two parts dfox_q
// (B, H, Tq: sum_j dL_ij of row i) and dfox_k (B, H, Tk: -sum_i dL_ij of key j) in A; GRAPE's rates
// (P.dist_q / dist_k) likewise: ddist_q (B, H, Tq: -sum_j dL_ij |t_ij|) and
// ddist_k (B, H, Tk: -sum_i dL_ij |t_ij|). counters: 3 unsigned 64-bit integers on the device (forward blocks, forward
// boundary blocks, backward blocks), added to atomically (integers: the order does not matter).
#pragma once
#include <cuda_runtime.h>

#include "attention/tiling.h"
#include "core/tensor.h"

namespace hz::attn::cuda_impl {

using Counter = unsigned long long;

// ---- reference kernels (attn_reference.cu): any floating dtype, any D <= kRefMaxD -------------
constexpr int kRefMaxD = 256;
void ref_forward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& logn_c,
                 const Tensor& fox_c, Tensor& out, Tensor& lse, Counter* counters, cudaStream_t s);
void ref_backward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& gout, const Tensor& logn_c, const Tensor& fox_c, Tensor& dq,
                  Tensor& dk, Tensor& dv, Tensor* dc_rows, Tensor* dfox_q, Tensor* dfox_k, Tensor* ddist_q,
                  Tensor* ddist_k, Counter* counters, cudaStream_t s);

// ---- tensor-core kernels (attn_mma.cu): bf16 or f32, D 64 or 128 --------------------------------
// Calls with chunked attention, sink tokens, a prefix, token positions or GRAPE's rates run the general variant
// (attn_mma_general.cu, the same entry points with the suffix _general). f32 calls run the split
// kernels (mma_body.h: each input as a pair of bf16, three products per product, f32 outputs).
// Supported: bf16 or f32, D 64/128, an sm_80+ GPU and binary whose blocks get the kernels' shared memory.
bool mma_supported(DType dt, int64_t D, int device);
AttnTiles mma_tiles(DType dt, int64_t D, int device);
// Whether tensor-core calls' backward runs in one pass (dK, dV and dQ from one kernel, FlashAttention-2's
// scheme with dQ added in a fixed order: mma_body.h): asked for by the environment variable
// HZ_ATTN_BACKWARD=one_pass (read at each call; two_pass, the default, keeps the dQ and dK/dV kernels
// until a GPU has timed both); every call takes it (both variants; FoX's and GRAPE's rows' sums are
// added in the same turns as dQ, LogN's dc summed per key).
bool one_pass_backward();
// Whether a tensor-core call runs on Hopper's warpgroup MMA (wgmma; attn_wgmma.cu: the forward and
// both backwards) instead of mma.sync: asked for by HZ_ATTN_MMA=wgmma, its forward with
// FlashAttention-3's intra-warpgroup overlap, or wgmma_serial, without it (read at each call; mma,
// the default, until a GPU has timed them), for bf16 calls (both variants) on a compute-capability
// 9.0 GPU whose binary has the sm_90a code.
bool use_wgmma(const AttnKernelParams& P, DType dt, int device);
// sink: the sinks' z (H, f32) folded into the forward's epilogue, or undefined; dz_rows (with
// sink): the sinks' gradient per row (B, H, Tq, f32).
void mma_forward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& logn_c,
                 const Tensor& fox_c, const Tensor& sink, Tensor& out, Tensor& lse, Counter* counters, cudaStream_t s);
void mma_backward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& gout, const Tensor& logn_c, const Tensor& fox_c, const Tensor& sink,
                  Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dc_rows, Tensor* dfox_q, Tensor* dfox_k, Tensor* dz_rows,
                  Tensor* ddist_q, Tensor* ddist_k, Counter* counters, cudaStream_t s);
void mma_forward_general(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& logn_c, const Tensor& fox_c, const Tensor& sink, Tensor& out, Tensor& lse,
                         Counter* counters, cudaStream_t s);
void mma_backward_general(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& gout, const Tensor& logn_c,
                          const Tensor& fox_c, const Tensor& sink, Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dc_rows,
                          Tensor* dfox_q, Tensor* dfox_k, Tensor* dz_rows, Tensor* ddist_q, Tensor* ddist_k,
                          Counter* counters, cudaStream_t s);

}  // namespace hz::attn::cuda_impl
