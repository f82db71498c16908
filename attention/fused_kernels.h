// Horizon: the fused attention kernels per device (internal to attention/). fused.cpp calls them
// after its checks and planning; the semantics are attention/tiling.h's.
//
// Tensors arrive contiguous, on one device, shapes as in fused.h:
//   q (B, H, Tq, D), k/v (B, Hkv, Tk, D), out/gout (B, H, Tq, D), lse (B, H, Tq);
//   gradients dq (B, H, Tq, D), dk/dv (B, Hkv, Tk, D) are written (not accumulated).
// CPU: f32 or f64 (fused.cpp converts bf16 to f32 and back); logn_c a host vector (H).
// CUDA: f32, f64 or bf16 storage with f32 (f64 for f64) accumulation; lse in f32 (f64);
// logn_c (H) on the device in the accumulation dtype, or undefined.
#pragma once
#include <vector>

#include "attention/fused.h"

namespace hz::attn::detail {

// ---- CPU (fused_cpu.cpp) ---------------------------------------------------------------------
void cpu_forward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v,
                 const std::vector<double>& logn_c, Tensor& out, Tensor& lse);
// dlogn_c: when not null, receives dLoss/dc per head (H).
void cpu_backward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& gout, const std::vector<double>& logn_c, Tensor& dq, Tensor& dk,
                  Tensor& dv, std::vector<double>* dlogn_c);
void cpu_add_stats(int64_t fwd, int64_t fwd_boundary, int64_t bwd);
AttnStats cpu_stats();
void cpu_reset_stats();

// ---- CUDA (attention/cuda/*.cu; attention/cuda/stub.cpp without CUDA) ---------------------------
// Whether the tensor-core kernels take this dtype and head dim on this CUDA device.
bool tensor_core_supported(DType dt, int64_t D, int device);
// Their tiles (query rows x keys), forward and backward.
AttnTiles tensor_core_tiles(int64_t D);
// use_tc selects the tensor-core kernels (fused.cpp resolves AttnImpl).
void cuda_forward(const AttnKernelParams& P, bool use_tc, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& logn_c, Tensor& out, Tensor& lse);
// dlogn_c_rows: when not null, receives per-row partials (B, H, Tq) in the accumulation dtype
// (fused.cpp sums them in a fixed order).
void cuda_backward(const AttnKernelParams& P, bool use_tc, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, const Tensor& gout, const Tensor& logn_c, Tensor& dq,
                   Tensor& dk, Tensor& dv, Tensor* dlogn_c_rows);
AttnStats cuda_stats();  // every device used so far (synchronises them)
void cuda_reset_stats();

}  // namespace hz::attn::detail
