// Horizon: the fused attention kernels per device (internal to attention/). fused.cpp calls them
// after its checks and planning; the semantics are attention/tiling.h's.
//
// Tensors arrive contiguous, on one device, shapes as in fused.h:
//   q (B, H, Tq, D), k/v (B, Hkv, Tk, D), out/gout (B, H, Tq, D), lse (B, H, Tq);
//   gradients dq (B, H, Tq, D), dk/dv (B, Hkv, Tk, D) are written (not accumulated).
// CPU: f32 or f64 (fused.cpp converts bf16 to f32 and back); the terms in CpuTerms.
// CUDA: f32, f64 or bf16 storage with f32 (f64 for f64) accumulation; lse in f32 (f64);
// logn_c (H) on the device in the accumulation dtype, or undefined.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

#include "attention/backend.h"
#include "attention/fused.h"

namespace hz::attn::detail {

// An environment variable that picks one of `choices` (HZ_ATTN_IMPL, HZ_ATTN_BACKWARD, HZ_ATTN_MMA;
// read at each call): its value, "" when unset, a ValueError naming the choices otherwise.
std::string env_choice(const char* name, std::initializer_list<const char*> choices);
// HZ_ATTN_MMA's value: "" or mma (mma.sync), or Hopper's wgmma with the forward as wgmma,
// wgmma_overlap or wgmma_serial ask (fused.h, wgmma_forward).
std::string mma_choice();

// ---- CPU (fused_cpu.cpp) ---------------------------------------------------------------------
struct CpuTerms {
  std::vector<double> logn_c;  // (H) with logit LogN
  std::vector<double> sink;    // (H) when P.sink
  Tensor fox_c;                // (B, H, fox_T) contiguous f64, when P.fox: c = cumsum(log f)
};
// Gradients the backward fills where asked (a null pointer: not wanted).
struct CpuTermGrads {
  std::vector<double>* logn_c = nullptr;  // (H)
  std::vector<double>* sink = nullptr;    // (H)
  Tensor* fox_c = nullptr;                // (B, H, fox_T) f64
  Tensor* dist_q = nullptr;               // (B, H, Tq) f64: GRAPE's rates (P.dist_q / dist_k), -sum_j dL_ij |t_ij|
  Tensor* dist_k = nullptr;               // (B, H, Tk) f64: -sum_i dL_ij |t_ij|
};
void cpu_forward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const CpuTerms& terms,
                 Tensor& out, Tensor& lse);
void cpu_backward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& gout, const CpuTerms& terms, Tensor& dq, Tensor& dk, Tensor& dv,
                  const CpuTermGrads& grads);
void cpu_add_stats(int64_t fwd, int64_t fwd_boundary, int64_t bwd);
AttnStats cpu_stats();
void cpu_reset_stats();

// ---- CUDA (attention/cuda/*.cu; attention/cuda/stub.cpp without CUDA) ---------------------------
// Whether the tensor-core kernels take this dtype and head dim on this CUDA device.
bool tensor_core_supported(DType dt, int64_t D, int device);
// Their tiles (query rows x keys), forward and backward, on this CUDA device (the overlapped wgmma
// forward's query blocks differ).
AttnTiles tensor_core_tiles(DType dt, int64_t D, int device);
// Whether a tensor-core call's backward runs in one pass (fused.h, one_pass_backward).
bool one_pass_backward();
// Whether a tensor-core call runs on Hopper's wgmma (fused.h, use_wgmma).
bool use_wgmma(const AttnKernelParams& P, DType dt, int device);
// use_tc selects the tensor-core kernels (fused.cpp resolves AttnImpl).
// fox_c: FoX's c (B, H, fox_T) in the accumulation dtype, or undefined (both kernel families).
// sink: the sinks' z (H) in f32, folded into the tensor-core forward's epilogue (use_tc only: for
// the reference kernels fused.cpp folds them around the call), or undefined.
void cuda_forward(const AttnKernelParams& P, bool use_tc, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& logn_c, const Tensor& fox_c, const Tensor& sink, Tensor& out, Tensor& lse);
// dlogn_c_rows: when not null, receives per-row partials (B, H, Tq) in the accumulation dtype
// (fused.cpp sums them in a fixed order); dfox_q / dfox_k: FoX's dLoss/dc as row sums (B, H, Tq)
// and negated key sums (B, H, Tk) (fused.cpp adds the first at the queries' positions); dsink_rows
// (use_tc, with sink): the sinks' per-row -exp(z_h - lse_i) D_i (B, H, Tq); ddist_q / ddist_k: GRAPE's
// rates' gradients (B, H, Tq) and (B, H, Tk) in the accumulation dtype (the tensor-core kernels' general
// variant computes them, attention/cuda/mma_body.h).
void cuda_backward(const AttnKernelParams& P, bool use_tc, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, const Tensor& gout, const Tensor& logn_c, const Tensor& fox_c,
                   const Tensor& sink, Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dlogn_c_rows, Tensor* dfox_q,
                   Tensor* dfox_k, Tensor* dsink_rows, Tensor* ddist_q = nullptr, Tensor* ddist_k = nullptr);
AttnStats cuda_stats();  // every device used so far (synchronises them)
void cuda_reset_stats();

// ---- cuDNN (attention/cuda/attn_cudnn.cpp; attention/cuda/cudnn_stub.cpp without the frontend) ---
// The calls attention/backend.h's cudnn_plan accepts: bf16 q, k, v, out, gout, dq, dk, dv; lse (B, H, Tq)
// f32; sink and dsink (H) f32 on the device (g.sink). Gradients are written, not accumulated.
bool cudnn_compiled();       // built with cudnn-frontend's headers (HZ_CUDNN)?
std::string cudnn_version(); // libcudnn's, once a call has opened it ("9.13.0"); "" before
void cudnn_forward(const AttnKernelParams& P, const CudnnGraphDesc& g, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& sink, Tensor& out, Tensor& lse);
void cudnn_backward(const AttnKernelParams& P, const CudnnGraphDesc& g, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& gout, const Tensor& sink,
                    Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dsink);

}  // namespace hz::attn::detail
