// Horizon CUDA backend: helpers shared by the kernel files (internal to core/cuda/).
//
// Legend: n elements, N rows, V vocabulary, C channels; a "row" is the innermost dimension.
// Every kernel runs on the device's compute stream (stream(dev)); every reduction combines its
// partial results in a fixed order (no float atomics), so results repeat bit for bit.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "core/backend.h"
#include "core/device.h"
#include "core/kernel_util.h"
#include "core/cuda/runtime.h"
#include "core/math.h"

namespace hz::cuda {

// ---- errors ---------------------------------------------------------------------------------
// What to do about a CUDA error, by kind.
const char* error_hint(cudaError_t e);
const char* cublas_hint(cublasStatus_t s);
[[noreturn]] void throw_cuda(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* call, const char* file, int line);

#define HZ_CUBLAS_CHECK(call)                                               \
  do {                                                                      \
    cublasStatus_t hz_s_ = (call);                                          \
    if (hz_s_ != CUBLAS_STATUS_SUCCESS) ::hz::cuda::throw_cublas(hz_s_, #call, __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: launch-configuration errors surface here, naming the kernel (faults
// surface at the next sync). Any runtime call can leave its error as the "last error"
// (cudaEventQuery's cudaErrorNotReady too), so calls whose error is expected clear it.
#define HZ_CUDA_LAUNCHED(name)                                                      \
  do {                                                                              \
    cudaError_t hz_e_ = cudaPeekAtLastError();                                      \
    if (hz_e_ != cudaSuccess) ::hz::cuda::throw_cuda(hz_e_, name, __FILE__, __LINE__); \
  } while (0)

// ---- cuBLASLt, opened on first use ------------------------------------------------------------
// Not linked: loading libcublasLt costs every process about 150 MB of resident memory and 0.2 s
// (its initialisers), GPU or not, and every fork of such a process (the isolated parsers) copies
// that. The first CUDA device's setup opens it (the build's copy, then the soname on the loader's
// path) and takes the functions below; a missing library is a DeviceError naming it.
struct CublasLt {
  decltype(&::cublasLtCreate) Create;
  decltype(&::cublasLtMatmul) Matmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&::cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&::cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute;
};
const CublasLt& cublaslt();

// ---- devices and streams ----------------------------------------------------------------------
void use_device(int device);        // cudaSetDevice when the calling thread is on another one
cudaStream_t stream(int device);    // the compute stream
cublasLtHandle_t lt_handle(int device);
// A workspace for cuBLASLt on the compute stream (grown on demand, kept).
void* lt_workspace(int device, size_t bytes);

// ---- launch geometry ------------------------------------------------------------------------
constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 32 ? 65535 * 32 : b));
}

// ---- strided element addressing -------------------------------------------------------------
// Up to kMaxDims dims (after merging dims that are contiguous for every operand); element i of
// the row-major iteration space lies at sum_d idx_d * stride[k][d] in operand k.
constexpr int kMaxDims = 8;
template <int N>
struct Indexer {
  int nd = 0;
  bool contiguous = false;  // every operand contiguous: offset == i
  int64_t size[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};
  __device__ __forceinline__ void offsets(int64_t i, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = contiguous ? i : 0;
    if (contiguous) return;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t id = i % size[d];
      i /= size[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += id * stride[k][d];
    }
  }
};
// Builds the indexer for iterating `shape` with the operands' element strides (merges dims;
// throws for more than kMaxDims dims after merging).
template <int N>
Indexer<N> make_indexer(const Shape& shape, const Shape* const (&strides)[N]);

template <class T> inline T* ptr(const Tensor& t) { return static_cast<T*>(t.raw_data()); }

// ---- block reductions (fixed tree: deterministic) --------------------------------------------
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class T>
__device__ __forceinline__ T warp_max(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}
// Sum (or max) over the block; every thread gets the result. `scratch` holds 32 values.
template <class T, bool kMax = false>
__device__ __forceinline__ T block_reduce(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {  // only warp 0 reads the partials, so thread 0's write cannot race another warp's read
    T r = lane < nw ? scratch[lane] : (kMax ? scratch[0] : T(0));
    r = kMax ? warp_max(r) : warp_sum(r);  // the shuffles order warp 0's reads before the write
    if (lane == 0) scratch[0] = r;
  }
  __syncthreads();
  return scratch[0];
}

}  // namespace hz::cuda
