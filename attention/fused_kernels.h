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
#include <vector>

#include "attention/fused.h"

namespace hz::attn::detail {

// ---- sinks composed around a call (fused.cpp) -----------------------------------------------------
// z (H) in lse's dtype on its device. fold_sink: lse' = log(exp(lse) + exp(z_h)), out' = out
// exp(lse - lse') (out keeps its dtype); a backward that reads (out', lse') is then exact, and
// sink_grad gives dLoss/dz_h = -sum_i exp(z_h - lse'_i) dO_i . O'_i (H), in lse's dtype. Used around
// the CUDA reference kernels and after the context-parallel ring's merge.
void fold_sink(const Tensor& z, Tensor& out, Tensor& lse);
Tensor sink_grad(const Tensor& z, const Tensor& lse, const Tensor& out, const Tensor& gout);

// ---- pieces (fused.cpp) -------------------------------------------------------------------------
// fused_attention without autograd, for a caller that splits each row's keys over several calls
// and merges them itself (context.cpp's ring): no sink (the caller folds it after merging);
// cfg.logn_whole_row keeps LogN's n the whole row's. q/k/v of one device and storage dtype;
// logn_c (H) or undefined; fox_c, FoX's c = cumsum(log f) itself (not log f), (B, H, fox_T) in the
// accumulation dtype with the keys' c at [0, Tk) and the queries' at [q_offset, q_offset + Tq)
// (fox_T >= both ends; what lies between is not read), or undefined.
// piece_forward returns out (B, H, Tq, D) over this call's keys only and sets lse (B, H, Tq), both
// in the accumulation dtype (-inf / 0 for rows that see none of these keys).
Tensor piece_forward(const AttnConfig& cfg, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& logn_c,
                     const Tensor& fox_c, Tensor& lse);
// The gradients of this call's share given the rows' final out and lse (merged over every call,
// the sink folded in): exact, since p_ij = exp(L_ij - lse_i) and D_i = dO_i . O_i read only those.
// dq, dk, dv in the accumulation dtype; dc (H, f64 on the CPU) LogN's c when want_c; dfox
// dLoss/d(fox_c) (B, H, fox_T) in the accumulation dtype with fox_c.
struct PieceGrads {
  Tensor dq, dk, dv, dc, dfox;
};
PieceGrads piece_backward(const AttnConfig& cfg, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& gout, const Tensor& logn_c, const Tensor& fox_c,
                          bool want_c);

// ---- CPU (fused_cpu.cpp) ---------------------------------------------------------------------
struct CpuTerms {
  std::vector<double> logn_c;  // (H) with logit LogN
  std::vector<double> sink;    // (H) when P.sink
  Tensor fox_c;                // (B, H, fox_T) contiguous, q's dtype, when P.fox: c = cumsum(log f)
};
// Gradients the backward fills where asked (a null pointer: not wanted).
struct CpuTermGrads {
  std::vector<double>* logn_c = nullptr;  // (H)
  std::vector<double>* sink = nullptr;    // (H)
  Tensor* fox_c = nullptr;                // (B, H, fox_T) in q's dtype
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
// Their tiles (query rows x keys), forward and backward.
AttnTiles tensor_core_tiles(int64_t D);
// use_tc selects the tensor-core kernels (fused.cpp resolves AttnImpl).
// fox_c: FoX's c (B, H, fox_T) in the accumulation dtype, or undefined (both kernel families).
// sink: the sinks' z (H) in f32, folded into the tensor-core forward's epilogue (use_tc only: for
// the reference kernels fused.cpp folds them around the call), or undefined.
void cuda_forward(const AttnKernelParams& P, bool use_tc, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& logn_c, const Tensor& fox_c, const Tensor& sink, Tensor& out, Tensor& lse);
// dlogn_c_rows: when not null, receives per-row partials (B, H, Tq) in the accumulation dtype
// (fused.cpp sums them in a fixed order); dfox_q / dfox_k: FoX's dLoss/dc as row sums (B, H, Tq)
// and negated key sums (B, H, Tk) (fused.cpp adds the first at the queries' positions); dsink_rows
// (use_tc, with sink): the sinks' per-row -exp(z_h - lse_i) D_i (B, H, Tq).
void cuda_backward(const AttnKernelParams& P, bool use_tc, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, const Tensor& gout, const Tensor& logn_c, const Tensor& fox_c,
                   const Tensor& sink, Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dlogn_c_rows, Tensor* dfox_q,
                   Tensor* dfox_k, Tensor* dsink_rows);
AttnStats cuda_stats();  // every device used so far (synchronises them)
void cuda_reset_stats();

}  // namespace hz::attn::detail
