// Horizon: the CUDA backend entry points used by core/. Compiled from .cu files when
// HZ_CUDA=ON; otherwise core/cuda/stub.cpp provides versions that throw DeviceError.
// This is the skeleton: allocation, copies, one elementwise kernel family and cuBLAS GEMM.
// Other ops on CUDA tensors throw NotImplementedError naming the op.
#pragma once
#include <cstddef>

#include "core/ops.h"

namespace hz::cuda {

bool compiled();            // HZ_CUDA build?
int device_count();         // 0 when no driver/GPU (never throws)
bool available();           // compiled() && device_count() > 0
void* alloc(size_t bytes, int device);
void free(void* p, int device) noexcept;
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice };
void memcpy(void* dst, const void* src, size_t bytes, CopyKind kind, int device);
// Contiguous, same-shape f32 elementwise binary op (no broadcasting yet).
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
// cuBLAS GEMM for contiguous f32/f64 (batched when batch_shape is non-empty).
Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha,
              const Shape& batch_shape);

}  // namespace hz::cuda
