// Horizon CPU kernel: GEMMs through oneDNN (see dnnl_matmul.cpp).
#pragma once
#include <string>

#include "core/tensor.h"

namespace hz::cpu {

bool dnnl_available();  // built with oneDNN (HZ_DNNL)?
std::string dnnl_version_string();  // "2.6.3"
// The instruction set oneDNN's JIT kernels target on this CPU ("avx512_core_amx"), after
// ONEDNN_MAX_CPU_ISA; and whether that includes AMX, the tile units whose bf16 products beat f32.
std::string dnnl_isa();
bool dnnl_has_amx();
// Row-major C (M, N) = alpha op(A) op(B) + beta C through oneDNN's sgemm (JIT-generated for the
// CPU it runs on; single-threaded inside an OpenMP parallel region).
void dnnl_sgemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// bf16 A, B (strided views, batch dims already broadcast to batch_shape) -> bf16 C, f32 accumulation.
Tensor dnnl_matmul_bf16(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha, const Shape& batch_shape);

}  // namespace hz::cpu
