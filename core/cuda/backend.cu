// Horizon CUDA skeleton: allocation, copies, an elementwise kernel family, cuBLAS GEMM.
// Compiled only with HZ_CUDA=ON. Every CUDA/cuBLAS error becomes a DeviceError naming the call.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "core/cuda/backend.h"

namespace hz::cuda {

#define HZ_CUDA_CHECK(call)                                                                  \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    HZ_CHECK(e_ == cudaSuccess, DeviceError, #call, " failed: ", cudaGetErrorString(e_));   \
  } while (0)
#define HZ_CUBLAS_CHECK(call)                                                                \
  do {                                                                                       \
    cublasStatus_t s_ = (call);                                                              \
    HZ_CHECK(s_ == CUBLAS_STATUS_SUCCESS, DeviceError, #call, " failed with status ",        \
             static_cast<int>(s_));                                                          \
  } while (0)

bool compiled() { return true; }
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}
bool available() { return device_count() > 0; }

static void set_device(int device) {
  HZ_CHECK(device < device_count(), DeviceError, "CUDA device ", device,
           " requested but only ", device_count(), " visible (no GPU or driver on this machine?)");
  HZ_CUDA_CHECK(cudaSetDevice(device));
}

void* alloc(size_t bytes, int device) {
  set_device(device);
  void* p = nullptr;
  HZ_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}
void free(void* p, int device) noexcept {
  if (!p) return;
  cudaSetDevice(device);
  cudaFree(p);
}
void memcpy(void* dst, const void* src, size_t bytes, CopyKind kind, int device) {
  set_device(device);
  const cudaMemcpyKind k = kind == CopyKind::HostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::DeviceToHost ? cudaMemcpyDeviceToHost
                                                            : cudaMemcpyDeviceToDevice;
  HZ_CUDA_CHECK(cudaMemcpy(dst, src, bytes, k));
}

// ---- elementwise --------------------------------------------------------------------------
// out[i] = a[i] OP b[i], n elements, f32; grid-stride loop.
template <int OP>
__global__ void binary_f32(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = a[i], y = b[i];
    float r;
    if (OP == 0) r = x + y;
    else if (OP == 1) r = x - y;
    else if (OP == 2) r = x * y;
    else if (OP == 3) r = x / y;
    else if (OP == 4) r = fmaxf(x, y);
    else r = fminf(x, y);
    out[i] = r;
  }
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  HZ_CHECK(a.dtype() == DType::F32, NotImplementedError, "CUDA elementwise ops support f32 only");
  set_device(a.device().index);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.numel();
  if (n == 0) return out;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* op_ = out.data<float>();
  switch (op) {
    case BinaryOp::Add: binary_f32<0><<<blocks, threads>>>(ap, bp, op_, n); break;
    case BinaryOp::Sub: binary_f32<1><<<blocks, threads>>>(ap, bp, op_, n); break;
    case BinaryOp::Mul: binary_f32<2><<<blocks, threads>>>(ap, bp, op_, n); break;
    case BinaryOp::Div: binary_f32<3><<<blocks, threads>>>(ap, bp, op_, n); break;
    case BinaryOp::Maximum: binary_f32<4><<<blocks, threads>>>(ap, bp, op_, n); break;
    case BinaryOp::Minimum: binary_f32<5><<<blocks, threads>>>(ap, bp, op_, n); break;
    default: throw NotImplementedError("CUDA binary op");
  }
  HZ_CUDA_CHECK(cudaGetLastError());
  return out;
}

// ---- GEMM ---------------------------------------------------------------------------------
static cublasHandle_t handle(int device) {
  static std::mutex mu;
  static std::vector<cublasHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(handles.size()) <= device) handles.resize(device + 1, nullptr);
  if (!handles[device]) HZ_CUBLAS_CHECK(cublasCreate(&handles[device]));
  return handles[device];
}

// Row-major C (M, N) = op(A) op(B) computed as column-major C^T = op(B)^T op(A)^T.
Tensor matmul(const Tensor& a_in, const Tensor& b_in, bool ta, bool tb, double alpha,
              const Shape& batch_shape) {
  const Tensor a = a_in.contiguous(), b = b_in.contiguous();
  set_device(a.device().index);
  const int64_t M = ta ? a.size(-1) : a.size(-2), K = ta ? a.size(-2) : a.size(-1);
  const int64_t N = tb ? b.size(-2) : b.size(-1);
  Shape os = batch_shape;
  os.push_back(M);
  os.push_back(N);
  Tensor out = Tensor::empty(os, a.dtype(), a.device());
  const int64_t batch = shape_numel(batch_shape);
  if (M == 0 || N == 0 || batch == 0) return out;
  cublasHandle_t h = handle(a.device().index);
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = static_cast<int>(a.size(-1)), ldb = static_cast<int>(b.size(-1));
  const long long sa = a.size(-2) * a.size(-1), sb = b.size(-2) * b.size(-1), sc = M * N;
  if (a.dtype() == DType::F32) {
    const float al = static_cast<float>(alpha), be = 0.f;
    HZ_CUBLAS_CHECK(cublasSgemmStridedBatched(h, opb, opa, N, M, K, &al, b.data<float>(), ldb, sb,
                                              a.data<float>(), lda, sa, &be, out.data<float>(), N,
                                              sc, batch));
  } else if (a.dtype() == DType::F64) {
    const double al = alpha, be = 0.0;
    HZ_CUBLAS_CHECK(cublasDgemmStridedBatched(h, opb, opa, N, M, K, &al, b.data<double>(), ldb, sb,
                                              a.data<double>(), lda, sa, &be, out.data<double>(),
                                              N, sc, batch));
  } else {
    throw NotImplementedError("CUDA matmul supports f32 and f64 only in the skeleton");
  }
  return out;
}

}  // namespace hz::cuda
