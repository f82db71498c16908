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
// wgmma and the async proxy's fence exist on sm_90a only: built for anything else (the host pass, an
// sm_90 or older pass of a file that includes them) they are a trap, never reached (attn_wgmma.cu
// compiles for sm_90a alone and the launcher checks the GPU).
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HZ_WG_ASM(...) __trap()
#else
#define HZ_WG_ASM(...) asm volatile(__VA_ARGS__)
#endif
// mbarriers' transaction counts and the bulk tensor copy exist from sm_90 (no "a" needed: the kernel
// lab's check runs them on a plain sm_90 build); older architectures get a trap.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define HZ_TMA_ASM(...) __trap()
#else
#define HZ_TMA_ASM(...) asm volatile(__VA_ARGS__)
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

  // ---- Hopper's asynchronous pipeline (mma_body.h, the warp-specialised forward; attn_wgmma.cu) ----
  // mbarriers in shared memory, the bulk tensor copy completing on one, named barriers, and the
  // warpgroups' register budgets (setmaxnreg: the producer gives its registers to the consumers).
  __device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
    HZ_TMA_ASM("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
  }
  __device__ __forceinline__ void mbar_fence_init() { HZ_TMA_ASM("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
  __device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    HZ_TMA_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
  }
  __device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, int bytes) {
    HZ_TMA_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
  }
  __device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
    HZ_TMA_ASM(
        "{\n.reg .pred p;\nHZ_MBAR_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra HZ_MBAR_WAIT;\n}\n" ::"r"(
            smem_u32(bar)),
        "r"(parity)
        : "memory");
  }
  // the box (64 columns from col, the map's rows from row, matrix mat) into dst, completing on bar
  template <class M>
  __device__ __forceinline__ void tma_load(uint16_t* dst, const M* map, int col, int row, int mat, uint64_t* bar) {
    HZ_TMA_ASM(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"(smem_u32(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(mat), "r"(smem_u32(bar))
        : "memory");
  }
  __device__ __forceinline__ void bar_sync(int id, int count) {
    HZ_MMA_ASM("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
  }
  __device__ __forceinline__ void bar_arrive(int id, int count) {
    HZ_MMA_ASM("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
  }
  template <int N>
  __device__ __forceinline__ void regs_inc() {
    HZ_WG_ASM("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
  }
  template <int N>
  __device__ __forceinline__ void regs_dec() {
    HZ_WG_ASM("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
  }

  // ---- Hopper's warpgroup MMA (mma_body.h, the kWg kernels; sm_90a only, attn_wgmma.cu) ----
  __device__ __forceinline__ uint32_t smem_u32(const void* p) const {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
  }
  // what a thread wrote to shared memory (its landed cp.async tiles, its store_shared) becomes visible
  // to wgmma (the async proxy)
  __device__ __forceinline__ void fence_proxy_async() { HZ_WG_ASM("fence.proxy.async.shared::cta;\n" ::: "memory"); }
  // a 4-byte store to a tile that wgmma reads (the emulator tracks these for the fence above)
  __device__ __forceinline__ void store_shared(uint32_t* p, uint32_t v) { *p = v; }
  __device__ __forceinline__ void wg_fence() { HZ_WG_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
  __device__ __forceinline__ void wg_commit() { HZ_WG_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
  template <int N>
  __device__ __forceinline__ void wg_wait() {
    HZ_WG_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
  }
  // Keeps the compiler from moving reads or writes of accumulator registers across a wgmma batch's
  // fence or wait (the instruction's asm names them as outputs at issue; the values land at the wait).
  __device__ __forceinline__ void wg_operand_fence(float& v) { asm volatile("" : "+f"(v)::"memory"); }
  template <class T, int N>
  __device__ __forceinline__ void wg_operand_fence(T (&v)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) wg_operand_fence(v[i]);
  }
  // wgmma.mma_async m64nNk16 (mma_body.h, wg_issue_nt / wg_issue_rn / dq_step): A and B by descriptor,
  // both K-major (kTA = kTB = 0) or A M-major and B N-major (imm-trans-a = imm-trans-b = 1: the
  // one-pass backward's dQ part), or A from registers and B N-major (imm-trans-b 1); scale-d 0: D = A B.
  template <int N, int kTA = 0, int kTB = 0>
  __device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t da, uint64_t db, int scale_d) {
    static_assert((N == 64 && kTA == kTB) || (N == 128 && kTA == 0 && kTB == 0),
                  "64-column products: S = Q K^T (K-major), dQ part = dS' K (MN-major); 128: S over 128 keys");
    if constexpr (N == 128) wgmma_ss_128(d, da, db, scale_d);
    else if constexpr (kTA == 0) wgmma_ss_64<0>(d, da, db, scale_d);
    else wgmma_ss_64<1>(d, da, db, scale_d);
  }
  template <int N>
  __device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t db, int scale_d) {
    static_assert(N == 64 || N == 128, "the forward's O += P V: D 64 or 128");
    if constexpr (N == 64) wgmma_rs_64(d, a, db, scale_d);
    else wgmma_rs_128(d, a, db, scale_d);
  }
  // (the accumulators' operand lists: n-tiles of 4 registers, 32 or 64 in all)
#define HZ_WG_NT(d, i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define HZ_WG_D64(d) \
  HZ_WG_NT(d, 0), HZ_WG_NT(d, 1), HZ_WG_NT(d, 2), HZ_WG_NT(d, 3), HZ_WG_NT(d, 4), HZ_WG_NT(d, 5), HZ_WG_NT(d, 6), HZ_WG_NT(d, 7)
#define HZ_WG_D128(d)                                                                                          \
  HZ_WG_D64(d), HZ_WG_NT(d, 8), HZ_WG_NT(d, 9), HZ_WG_NT(d, 10), HZ_WG_NT(d, 11), HZ_WG_NT(d, 12), HZ_WG_NT(d, 13), \
      HZ_WG_NT(d, 14), HZ_WG_NT(d, 15)
#define HZ_WG_R32                                                                                              \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31"
#define HZ_WG_R64                                                                                               \
  HZ_WG_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, " \
            "%51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
  template <int kT>
  __device__ __forceinline__ void wgmma_ss_64(float (&d)[8][4], uint64_t da, uint64_t db, int scale_d) {
    HZ_WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
              "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" HZ_WG_R32 "}, %32, %33, p, 1, 1, %35, %35;\n}\n"
              : HZ_WG_D64(d)
              : "l"(da), "l"(db), "r"(scale_d), "n"(kT)
              : "memory");
  }
  __device__ __forceinline__ void wgmma_ss_128(float (&d)[16][4], uint64_t da, uint64_t db, int scale_d) {
    HZ_WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
              "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" HZ_WG_R64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
              : HZ_WG_D128(d)
              : "l"(da), "l"(db), "r"(scale_d)
              : "memory");
  }
  __device__ __forceinline__ void wgmma_rs_64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db, int scale_d) {
    HZ_WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
              "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" HZ_WG_R32
              "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
              : HZ_WG_D64(d)
              : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d)
              : "memory");
  }
  __device__ __forceinline__ void wgmma_rs_128(float (&d)[16][4], const uint32_t (&a)[4], uint64_t db, int scale_d) {
    HZ_WG_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
              "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" HZ_WG_R64
              "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
              : HZ_WG_D128(d)
              : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d)
              : "memory");
  }
#undef HZ_WG_NT
#undef HZ_WG_D64
#undef HZ_WG_D128
#undef HZ_WG_R32
#undef HZ_WG_R64
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
// kWg: on Hopper's wgmma (instantiated only by attn_wgmma*.cu, for sm_90a); kRows: for calls with
// FoX, LogN's gradient or GRAPE's rates (dkv_cta's kDq 2).
// kGen: the general variant (attn_mma_general.cu, attn_wgmma_general.cu; a.dq_visit from visit_map_kernel).
template <int D, int kBq, bool kSplit = false, bool kAtomic = false, bool kWg = false, bool kRows = false,
          bool kGen = false>
__global__ void __launch_bounds__(kThreads) dkvq_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ unsigned tile;
  DeviceCta x;
  if (threadIdx.x == 0) tile = atomicAdd(a.tile_next, 1u);
  __syncthreads();
  dkv_cta<D, kBq, false, kGen, kSplit, kRows ? 2 : 1, kAtomic, kWg>(x, P, a, static_cast<int64_t>(tile), smem);
}
// The general variant's one-pass map (mma_body.h, visit_map): one thread per (b, query head, key block).
template <int kBq, int kBk>
__global__ void visit_map_kernel(const AttnKernelParams P, unsigned* bits) {
  const int64_t nkb = num_blocks(P.Tk, kBk);
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= P.B * P.H * nkb) return;
  visit_map<kBq, kBk>(P, t / nkb / P.H, t / nkb % P.H, t % nkb, [&](int64_t w, unsigned bit) { atomicOr(bits + w, bit); });
}

// The kernels on Hopper's wgmma (mma_body.h, kWg; bf16; the one-pass backward: dkvq_kernel): attn_wgmma.cu
// instantiates the plain variant, attn_wgmma_general.cu the general one, both built for sm_90a only.
// kOverlap: the forward with FlashAttention-3's intra-warpgroup overlap (fwd_cta); kWG warpgroups
// per CTA (kThreads each).
template <int D, int kMT, bool kGen, bool kOverlap, int kWG = 1>
__global__ void __launch_bounds__(kThreads * kWG) fwd_wg_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  fwd_cta<D, kMT, kGen, false, true, kOverlap, kWG>(x, P, a, blockIdx.x, smem);
}
// The warp-specialised forward (fwd_cta's kWs: two consumer warpgroups and a producer one; the tile
// maps in the parameters, __grid_constant__; one block per SM, the register cap at entry that
// setmaxnreg needs).
template <int D, bool kGen>
__global__ void __launch_bounds__(3 * kThreads, 1) fwd_ws_kernel(const AttnKernelParams P, const __grid_constant__ Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  fwd_cta<D, Config<D>::kFwdMTOverlap, kGen, false, true, true, Config<D>::kFwdWGOverlap, true, Config<D>::kFwdBkWs>(
      x, P, a, blockIdx.x, smem);
}
template <int D, bool kGen>
__global__ void __launch_bounds__(kThreads) dq_wg_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  dq_cta<D, kGen, false, true>(x, P, a, blockIdx.x, smem);
}
template <int D, bool kFox, bool kGen>
__global__ void __launch_bounds__(kThreads) dkv_wg_kernel(const AttnKernelParams P, const Args a) {
  extern __shared__ __align__(16) unsigned char smem[];
  DeviceCta x;
  dkv_cta<D, Config<D>::kDkvBq, kFox, kGen, false, false, false, true>(x, P, a, blockIdx.x, smem);
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

namespace hz::attn::cuda_impl {
// A tile map of the bulk tensor copy (mma::TileMap, mma_body.h) over a contiguous bf16 tensor of
// `mats` matrices of rows x cols, in boxes of 64 columns x box_rows rows, 128-byte swizzle, rows
// outside the tensor zero: the driver's cuTensorMapEncodeTiled, found through the runtime
// (attn_wgmma.cu; the warp-specialised forward and the kernel lab's check).
void encode_tile_map(mma::TileMap& m, const uint16_t* base, int64_t cols, int64_t rows, int64_t mats, int box_rows);
}  // namespace hz::attn::cuda_impl
