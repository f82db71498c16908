// Horizon CPU kernel: bf16 GEMM through oneDNN (see dnnl_matmul.cpp).
#pragma once
#include "core/tensor.h"

namespace hz::cpu {

bool dnnl_available();  // built with oneDNN (HZ_DNNL)?
// bf16 A, B (strided views, batch dims already broadcast to batch_shape) -> bf16 C, f32 accumulation.
Tensor dnnl_matmul_bf16(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha, const Shape& batch_shape);

}  // namespace hz::cpu
