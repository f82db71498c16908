// Horizon: the CUDA runtime as the rest of Horizon sees it. Compiled from core/cuda/*.cu when
// HZ_CUDA=ON; core/cuda/stub.cpp answers for a CPU-only build (no CUDA, nothing to run).
//
// Each device has a compute stream (every kernel, cuBLASLt call, copy and allocation of Horizon
// runs on it, in order) and a communication stream (NCCL collectives), both non-blocking with
// respect to the legacy default stream. Memory comes from a stream-ordered pool
// (cudaMallocAsync) whose release threshold keeps freed blocks, so a training step makes no
// cudaMalloc/cudaFree once the pool has grown to the step's peak.
#pragma once
#include <string>

#include "core/backend.h"

namespace hz::cuda {

bool compiled();             // HZ_CUDA build?
int device_count();          // 0 when no driver/GPU (never throws)
bool available();            // compiled() && device_count() > 0
const Backend* backend_table();  // nullptr without CUDA
std::string device_name(int device);  // "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)"
int compute_capability(int device);    // 10 * major + minor: 90 on an H100/H200
// cudaStream_t of the device's compute / communication stream (as void*, so that callers need
// no CUDA header); created on first use.
void* compute_stream(int device);
void* comm_stream(int device);
// Waits on the host until the device's compute stream has finished its work.
void synchronize(int device);
// TF32 for f32 GEMMs (off by default: f32 parity tests compare to the CPU).
void set_allow_tf32(bool on);
bool allow_tf32();

}  // namespace hz::cuda
