// Horizon: the device API, as the layers above core/ may use it.
//
// Everything above core/ (autograd, attention, nn, optim, data, io, distributed, eval, train, cli)
// reaches a device through Tensor (core/tensor.h: placement, copies, memory statistics), the ops
// (core/ops.h) and the few functions below; the backends' own headers (core/cpu/*.h,
// core/cuda/*.h, *.cuh) are internal to core/. The one exception is kernel code that is itself
// backend code of an op defined elsewhere: the fused attention's CPU kernel
// (attention/fused_cpu.cpp) uses the CPU kernel helpers (core/cpu/loops.h, fast_math.h,
// kernels.h), and its CUDA kernels (attention/cuda/, dev/cuda/) use core/cuda/common.cuh.
// tests/layering.sh holds the tree to this rule.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace hz {

namespace cpu {
int num_threads();  // the OpenMP threads the CPU kernels use (1 without OpenMP)
}  // namespace cpu

// The CUDA runtime. In a CPU-only build (HZ_CUDA=OFF) compiled() and available() are false and
// the functions that need a device throw hz::DeviceError saying how to get a CUDA build.
namespace cuda {
bool compiled();             // HZ_CUDA build?
int device_count();          // 0 when no driver/GPU (never throws)
bool available();            // compiled() && device_count() > 0
std::string device_name(int device);  // "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)"
int compute_capability(int device);    // 10 * major + minor: 90 on an H100/H200
int64_t memory_bytes(int device);      // the device's global memory
// What this process can still use there: the driver's free memory (other processes and the CUDA
// context already taken out) plus what Horizon's pool holds (its tensors, live or cached).
int64_t memory_usable(int device);
// Each device has a compute stream (every kernel, cuBLASLt call, copy and allocation of Horizon
// runs on it, in order) and a communication stream (NCCL collectives), both non-blocking with
// respect to the legacy default stream; as cudaStream_t behind void*, so that callers need no
// CUDA header. Created on first use.
void* compute_stream(int device);
void* comm_stream(int device);
// Waits on the host until the device's compute stream has finished its work.
void synchronize(int device);
// TF32 for f32 GEMMs (off by default: f32 parity tests compare to the CPU).
void set_allow_tf32(bool on);
bool allow_tf32();
// A CUDA runtime error (its cudaError_t code) as a DeviceError naming the call, where it was made and
// what to do about it; HZ_CUDA_CHECK throws it, for CUDA code in any layer (its file includes the
// CUDA runtime header itself).
[[noreturn]] void throw_error(int code, const char* call, const char* file, int line);
}  // namespace cuda

#define HZ_CUDA_CHECK(call)                                                                        \
  do {                                                                                             \
    const auto hz_e_ = (call);                                                                     \
    if (static_cast<int>(hz_e_) != 0) ::hz::cuda::throw_error(static_cast<int>(hz_e_), #call, __FILE__, __LINE__); \
  } while (0)

// Waits on the host until device d has finished the work queued on it. A GPU runs on after a call
// returns, so a timer reads this before it stops; on the CPU ops return finished (a no-op).
inline void synchronize(const Device& d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

}  // namespace hz
