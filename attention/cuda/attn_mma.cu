// Horizon: the tensor-core kernels of the fused attention (bf16, D 64 and 128) on the device: the
// execution context of mma_body.h in inline PTX (ldmatrix, mma.sync m16n8k16, cp.async, ex2), the
// kernels, the D_i = dO . O pre-pass and the host launchers. The kernel lab (dev/cuda/attention/)
// validates and times these against the reference kernels; mma_body.h documents the algorithm.
#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "attention/cuda/attn_cuda.h"
#include "attention/cuda/mma_body.h"
#include "core/cuda/common.cuh"

namespace hz::attn::cuda_impl {

namespace {

using mma::Args;
using mma::kThreads;

// The execution context on the device: one object per thread, every call maps to one instruction
// (or a few). Built for an architecture below sm_80 (no cp.async, no bf16 mma.sync), the kernels
// compile to a trap and mma_supported() keeps them from being launched.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define HZ_MMA_ASM(...) __trap()
#else
#define HZ_MMA_ASM(...) asm volatile(__VA_ARGS__)
#endif
struct DeviceCta {
  __device__ __forceinline__ int tid() const { return static_cast<int>(threadIdx.x); }
  __device__ __forceinline__ void sync() { __syncthreads(); }
  __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const uint16_t* p) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    HZ_MMA_ASM("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  }
  __device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const uint16_t* p) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    HZ_MMA_ASM("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  }
  __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    HZ_MMA_ASM(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ float shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
  // 16 bytes global -> shared, zero-filled when !full (the source address must stay valid)
  __device__ __forceinline__ void cp_async16(uint16_t* s, const uint16_t* g, bool full) {
    const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(s));
    HZ_MMA_ASM("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(g), "r"(full ? 16 : 0)
                 : "memory");
  }
  __device__ __forceinline__ void cp_commit() { HZ_MMA_ASM("cp.async.commit_group;\n" ::: "memory"); }
  template <int N>
  __device__ __forceinline__ void cp_wait() {
    HZ_MMA_ASM("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
  }
  __device__ __forceinline__ float exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));  // sm_75 has it too
    return y;
  }
  __device__ __forceinline__ float log2(float x) { return log2f(x); }
  __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (low half), .y = hi
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  __device__ __forceinline__ void add_counter(mma::Counter* c, mma::Counter v) {
    if (v != 0) atomicAdd(c, v);
  }
};


template <int D, int kMT>
__global__ void __launch_bounds__(kThreads) fwd_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  mma::fwd_cta<D, kMT>(x, P, a, blockIdx.x, smem);
}
template <int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  mma::dq_cta<D>(x, P, a, blockIdx.x, smem);
}
template <int D, int kBq>
__global__ void __launch_bounds__(kThreads) dkv_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  mma::dkv_cta<D, kBq>(x, P, a, blockIdx.x, smem);
}

// D_i = dO_i . O_i in f32, one warp per row, lanes over D in a fixed order.
__global__ void dot_kernel(int64_t rows, int D, const __nv_bfloat16* __restrict__ o,
                           const __nv_bfloat16* __restrict__ g, float* __restrict__ Dvec) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= rows) return;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) s += __bfloat162float(o[row * D + d]) * __bfloat162float(g[row * D + d]);
  s = hz::cuda::warp_sum(s);
  if (lane == 0) Dvec[row] = s;
}

template <class K>
void launch(K kernel, int64_t grid, int smem, cudaStream_t s, const AttnKernelParams& P, const Args& a,
            const char* what) {
  if (grid == 0) return;
  HZ_CHECK(grid < (int64_t{1} << 31), ShapeError, "attention: ", grid, " thread blocks exceed the CUDA grid limit");
  HZ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, s>>>(P, a);
  HZ_CUDA_LAUNCHED(what);
}

// cp.async needs 16-byte aligned rows: a view starting elsewhere is copied first.
Tensor aligned(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0 ? t : t.clone();
}
const uint16_t* bits(const Tensor& t) { return static_cast<const uint16_t*>(t.raw_data()); }
uint16_t* bits_mut(Tensor& t) { return static_cast<uint16_t*>(t.raw_data()); }

template <int D>
void forward_d(const AttnKernelParams& P, const Args& a, cudaStream_t s) {
  constexpr int kMT = mma::Config<D>::kFwdMT;
  using S = mma::FwdShape<D, kMT>;
  launch(fwd_kernel<D, kMT>, P.B * P.H * num_blocks(P.Tq, S::kBq), S::kSmem, s, P, a, "attention forward (mma)");
}
template <int D>
void backward_d(const AttnKernelParams& P, const Args& a, cudaStream_t s) {
  launch(dq_kernel<D>, P.B * P.H * num_blocks(P.Tq, mma::DqShape<D>::kBq), mma::DqShape<D>::kSmem, s, P, a,
         "attention backward dQ (mma)");
  constexpr int kBq = mma::Config<D>::kDkvBq;
  using S = mma::DkvShape<D, kBq>;
  launch(dkv_kernel<D, kBq>, P.B * P.Hkv * num_blocks(P.Tk, S::kBk), S::kSmem, s, P, a,
         "attention backward dK/dV (mma)");
}

}  // namespace

bool mma_supported(DType dt, int64_t D, int device) {
  if (dt != DType::BF16 || (D != 64 && D != 128)) return false;
  // the GPU and this binary's code for it must both be sm_80 or newer
  static std::mutex mu;
  static std::map<int, bool> ok;
  std::lock_guard<std::mutex> lock(mu);
  auto it = ok.find(device);
  if (it != ok.end()) return it->second;
  hz::cuda::use_device(device);
  int major = 0;
  cudaFuncAttributes fa{};
  const bool good = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    major >= 8 && cudaFuncGetAttributes(&fa, fwd_kernel<64, mma::Config<64>::kFwdMT>) == cudaSuccess &&
                    fa.binaryVersion >= 80;
  cudaGetLastError();  // a missing kernel image is an answer here, not an error
  ok[device] = good;
  return good;
}

AttnTiles mma_tiles(int64_t D) {
  if (D == 64) return {mma::FwdShape<64, mma::Config<64>::kFwdMT>::kBq, 64, mma::Config<64>::kDkvBq, 64, true};
  return {mma::FwdShape<128, mma::Config<128>::kFwdMT>::kBq, 64, mma::Config<128>::kDkvBq, 64, true};
}

void mma_forward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& logn_c,
                 Tensor& out, Tensor& lse, Counter* counters, cudaStream_t s) {
  const Tensor qa = aligned(q), ka = aligned(k), va = aligned(v);
  Args a;
  a.q = bits(qa);
  a.k = bits(ka);
  a.v = bits(va);
  a.c = logn_c.defined() ? logn_c.data<float>() : nullptr;
  a.out = bits_mut(out);
  a.lse = lse.data<float>();
  a.counters = counters;
  if (P.D == 64) forward_d<64>(P, a, s);
  else forward_d<128>(P, a, s);
}

void mma_backward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& gout, const Tensor& logn_c, Tensor& dq, Tensor& dk, Tensor& dv,
                  Tensor* dc_rows, Counter* counters, cudaStream_t s) {
  const Tensor qa = aligned(q), ka = aligned(k), va = aligned(v), ga = aligned(gout);
  const int64_t rows = P.B * P.H * P.Tq;
  Tensor Dvec = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, q.device());
  dot_kernel<<<static_cast<unsigned>((rows + 7) / 8), 256, 0, s>>>(
      rows, static_cast<int>(P.D), static_cast<const __nv_bfloat16*>(out.raw_data()),
      static_cast<const __nv_bfloat16*>(ga.raw_data()), Dvec.data<float>());
  HZ_CUDA_LAUNCHED("attention backward dO . O");
  if (dc_rows) *dc_rows = Tensor::empty({P.B, P.H, P.Tq}, DType::F32, q.device());
  Args a;
  a.q = bits(qa);
  a.k = bits(ka);
  a.v = bits(va);
  a.c = logn_c.defined() ? logn_c.data<float>() : nullptr;
  a.lse = const_cast<float*>(lse.data<float>());
  a.gout = bits(ga);
  a.Dvec = Dvec.data<float>();
  a.dq = bits_mut(dq);
  a.dk = bits_mut(dk);
  a.dv = bits_mut(dv);
  a.dc_rows = dc_rows ? dc_rows->data<float>() : nullptr;
  a.counters = counters;
  if (P.D == 64) backward_d<64>(P, a, s);
  else backward_d<128>(P, a, s);
}

}  // namespace hz::attn::cuda_impl
