// Horizon: the CUDA runtime inside core/. Compiled from core/cuda/*.cu when HZ_CUDA=ON;
// core/cuda/stub.cpp answers for a CPU-only build (no CUDA, nothing to run). The functions other
// layers may call are declared in core/device.h; this header adds the backend table.
//
// Memory comes from a stream-ordered pool (cudaMallocAsync) whose release threshold keeps freed
// blocks, so a training step makes no cudaMalloc/cudaFree once the pool has grown to the step's
// peak.
#pragma once
#include "core/backend.h"
#include "core/device.h"

namespace hz::cuda {

const Backend* backend_table();  // nullptr without CUDA

}  // namespace hz::cuda
