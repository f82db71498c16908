// Horizon: the execution context of the tensor-core attention kernels (mma_body.h) on the device:
// one object per thread, each call one PTX instruction or a few. Shared by attn_mma.cu and the
// kernel lab (dev/cuda/attention/).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "attention/cuda/mma_body.h"

namespace hz::attn::mma {

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
  __device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
  __device__ __forceinline__ void add_counter(Counter* c, Counter v) {
    if (v != 0) atomicAdd(c, v);
  }
  // The one-pass backward's turns (mma_body.h, dq_step): wait until a word holds v (acquire: the
  // adds of the block that set it are seen; the caller's barrier passes that on to the block), set
  // one (release, after the caller's barrier: the block's adds before it), and read an accumulator
  // from L2 (another SM wrote it).
  __device__ __forceinline__ void wait_turn(const unsigned* f, unsigned v) {
    unsigned cur = 0;
    for (;;) {
      HZ_MMA_ASM("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(cur) : "l"(f) : "memory");
      if (cur == v) break;
      HZ_MMA_ASM("nanosleep.u32 64;\n");
    }
  }
  __device__ __forceinline__ void post_turn(unsigned* f, unsigned v) {
    HZ_MMA_ASM("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(f), "r"(v) : "memory");
  }
  __device__ __forceinline__ float load_cg(const float* p) { return __ldcg(p); }
  __device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }  // the lab's atomic dQ
};

// The kernels: one CTA of kThreads per tile, grids and shared memory as in mma_body.h; kGen picks the
// general variant (mma_body.h), instantiated only by attn_mma_general.cu; kSplit the split kernels
// (f32 inputs as bf16 pairs).
template <int D, int kMT, bool kGen = false, bool kSplit = false>
__global__ void __launch_bounds__(kThreads) fwd_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  fwd_cta<D, kMT, kGen, kSplit>(x, P, a, blockIdx.x, smem);
}
template <int D, bool kGen = false, bool kSplit = false>
__global__ void __launch_bounds__(kThreads) dq_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  dq_cta<D, kGen, kSplit>(x, P, a, blockIdx.x, smem);
}
template <int D, int kBq, bool kFox, bool kGen = false, bool kSplit = false>
__global__ void __launch_bounds__(kThreads) dkv_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  dkv_cta<D, kBq, kFox, kGen, kSplit>(x, P, a, blockIdx.x, smem);
}
// The one-pass backward (dK, dV and dQ; mma_body.h, dq_step): a block's tile is the count of blocks
// started before it (a.tile_next, zeroed by the caller), so the blocks a tile waits on have started.
template <int D, int kBq, bool kSplit = false, bool kAtomic = false>
__global__ void __launch_bounds__(kThreads) dkvq_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ unsigned tile;
  DeviceCta x;
  if (threadIdx.x == 0) tile = atomicAdd(a.tile_next, 1u);
  __syncthreads();
  dkv_cta<D, kBq, false, false, kSplit, true, kAtomic>(x, P, a, static_cast<int64_t>(tile), smem);
}

// The sinks' per-row gradient where no dQ pass forms it (the one-pass backward): -exp(z_h - lse_i) D_i.
static __global__ void sink_rows_kernel(int64_t rows, int64_t H, int64_t Tq, const float* __restrict__ z,
                                        const float* __restrict__ lse, const float* __restrict__ Dvec,
                                        float* __restrict__ dz) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  DeviceCta x;
  const float l = lse[r];
  dz[r] = sink_row_grad(x, z[(r / Tq) % H], l == -INFINITY ? INFINITY : l * kLog2e, Dvec[r]);
}

// The split kernels' inputs: each row of D f32 becomes a row of 2D bf16, hi = bf16(x) in columns
// 0..D-1 and lo = bf16(x - hi) in D..2D-1 (mma_body.h, row_width).
static __global__ void split_rows_kernel(int64_t n, int D, const float* __restrict__ x, __nv_bfloat16* __restrict__ y) {
  const int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (e >= n) return;
  const int64_t row = e / D, d = e % D;
  const float v = x[e];
  const __nv_bfloat16 hi = __float2bfloat16_rn(v);
  y[row * 2 * D + d] = hi;
  y[row * 2 * D + D + d] = __float2bfloat16_rn(v - __bfloat162float(hi));
}

// D_i = dO_i . O_i in f32, one warp per row, lanes over D in a fixed order (T: bf16, or f32 for the
// split kernels).
template <class T>
__global__ void dot_kernel(int64_t rows, int D, const T* __restrict__ o, const T* __restrict__ g,
                           float* __restrict__ Dvec) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= rows) return;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) s += static_cast<float>(o[row * D + d]) * static_cast<float>(g[row * D + d]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) Dvec[row] = s;
}

}  // namespace hz::attn::mma
