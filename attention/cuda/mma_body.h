// Horizon: the fused attention's tensor-core kernels (bf16 inputs, or f32 inputs as bf16 pairs in the
// split kernels below; fp32 accumulation, mma.sync m16n8k16, or on sm_90a Hopper's wgmma.mma_async:
// kWg below), written once over an execution context X so the same code runs as CUDA kernels
// (attn_mma.cu, X = DeviceCta: inline PTX) and on the host through a warp emulator
// (tests/attention/mma_emulator.h, X = EmuThread: ucontext fibers with collective ldmatrix, mma,
// shuffles and delayed cp.async), which is how these kernels are tested on machines without a GPU.
//
// Legend as in tiling.h. A CTA has kWarps = 4 warps; fragment layouts are PTX's for
// mma.m16n8k16.row.col.f32.bf16.bf16.f32 with lane = 4 g + tig (g = lane / 4 the fragment row,
// tig = lane % 4 the column pair):
//   A (16 x 16, row-major)  a0 = A[g][2tig..+1], a1 = A[g+8][2tig..], a2 = A[g][2tig+8..], a3 = A[g+8][2tig+8..]
//   B (16 x 8, k x n)       b0 = B[2tig..+1][g], b1 = B[2tig+8..+9][g]
//   C (16 x 8, f32)         c0,c1 = C[g][2tig..+1], c2,c3 = C[g+8][2tig..+1]
// and ldmatrix.x4 (lanes 8m..8m+7 give the row addresses of 8x8 matrix m; without .trans lane t
// receives row t/4, columns 2(t%4)..+1 of each matrix, with .trans column t/4, rows 2(t%4)..+1).
// A C fragment of S (16 x 16 across two n-tiles) is an A fragment of the next product (P V) after
// packing to bf16: a0 = S[nt][c0,c1], a1 = S[nt][c2,c3], a2 = S[nt+1][c0,c1], a3 = S[nt+1][c2,c3].
//
// Shared-memory tiles are row-major with a pitch of D + 8 bf16 (16 bytes of padding: the 8 rows an
// ldmatrix reads fall in distinct bank groups). Global -> shared copies are cp.async of 16 bytes
// (zero-filled outside the tensor), double-buffered along the loop.
//
// Kernels (one CTA per tile, every index from tiling.h):
//   forward   CTA (b, h, query block of kBq = 16 kMT kWarps rows); loops over key_blocks() in
//             kBk = 64 key tiles: S = Q K^T, logits (tiling.h coefficients, scale-invariant a_t /
//             m_t from a per-block table of the t-range, FoX's c_i - c_j with the block's c_j in
//             shared memory; general variant: GRAPE's -|t| (dist_q_i + dist_k_j), the rows' and the
//             block's rates in shared memory), mask on Boundary or ragged blocks only, online softmax
//             in the log2 domain, O += P V. Writes out (bf16) and lse (f32); a sink z_h joins each row's
//             denominator in the epilogue (a row without keys: out 0, lse z_h). On wgmma also in
//             FlashAttention-3's forms (fwd_cta: kOverlap, two warpgroups of one m-tile, the softmax
//             beside P V; kWs, a producer warpgroup with bulk tensor copies into mbarrier stages).
//   dQ        CTA as the forward (kMT = 1): S and dP = dO V^T recomputed, P = exp(L - lse),
//             dS = P (dP - D_i), dQ += (dS * dL/d(q.k)) K; LogN's per-row dc; FoX's row sums
//             sum_j dS_ij (dLoss/dc_i's query part); the sinks' per-row -exp(z_h - lse_i) D_i;
//             GRAPE's per-row -sum_j dS_ij |t_ij| (dLoss/ddist_q_i).
//   dK/dV     CTA (b, kv head, key block of 64 keys), one warp per 16 keys; loops over the G
//             query heads of the group in order and their query_blocks() (kBqB rows): S^T = K Q^T,
//             dP^T = V dO^T, dV += P^T dO, dK += dS^T Q; FoX's key sums -sum_i dS_ij and GRAPE's
//             -sum_i dS_ij |t_ij| per query head, written when the loop leaves the head. Counts the
//             backward blocks.
//   one pass  (FlashAttention-2's backward; plain variant, calls that need no per-row sums of the dQ
//             pass) dK/dV with dQ in the same loop: dS'^T goes through shared memory and each step
//             adds dQ_part = dS' K (kBq rows x D) to the query block's f32 accumulator, so S and dP
//             are formed once (5 products per pair instead of 7, one exponential instead of two).
//             The adds to a query block come in a fixed order, from its last key block back
//             (ordered accumulation, below), so the result is the same bits on every run.
// No float atomics: every output element is owned by one thread (or, one pass, one block at a time),
// accumulated in a fixed order.
#pragma once
#include <math.h>

#include <cstdint>

#include "attention/tiling.h"

#if defined(__CUDACC__)
#define HZ_KBODY __device__ __forceinline__
#define HZ_UNROLL _Pragma("unroll")  // fragment arrays must stay in registers: constant indices only
#else
#define HZ_KBODY inline
#define HZ_UNROLL
#endif

namespace hz::attn::mma {

using Counter = unsigned long long;
constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// A tile map of the bulk tensor copy (TMA, cp.async.bulk.tensor, sm_90): a 3-D bf16 tensor
// (columns, rows, matrices; contiguous) read in boxes of 64 columns x R rows of one matrix, which
// the copy engine writes to shared memory in the 128-byte swizzle (sw_offset's layout, the box at
// a 1024-byte boundary), rows outside the tensor zero. On a GPU the driver's CUtensorMap, encoded on
// the host (mma_launch.cuh); in the emulator its own description (tests/attention/mma_emulator.h).
// It travels in the kernel's parameters (__grid_constant__), 128 bytes at a 128-byte boundary.
struct alignas(128) TileMap {
  uint64_t w[16];
};
// Pointers of one call (bf16 tensors as their 16-bit patterns; contiguous, shapes as in fused.h).
// Inputs q, k, v, gout: bf16 rows of D, or with the split kernels the split rows of 2D; outputs out,
// dq, dk, dv: bf16, or f32 with the split kernels.
struct Args {
  const uint16_t* q = nullptr;     // (B, H, Tq, D)
  const uint16_t* k = nullptr;     // (B, Hkv, Tk, D)
  const uint16_t* v = nullptr;     // (B, Hkv, Tk, D)
  const float* c = nullptr;        // LogN's c (H) or null
  void* out = nullptr;             // (B, H, Tq, D)
  float* lse = nullptr;            // (B, H, Tq), natural log
  const uint16_t* gout = nullptr;  // dO (B, H, Tq, D)
  const float* Dvec = nullptr;     // D_i = dO_i . O_i (B, H, Tq)
  void* dq = nullptr;              // (B, H, Tq, D)
  void* dk = nullptr;              // (B, Hkv, Tk, D)
  void* dv = nullptr;              // (B, Hkv, Tk, D)
  float* dc_rows = nullptr;        // LogN's dLoss/dc per row (B, H, Tq) or null
  const float* fc = nullptr;       // FoX's c = cumsum(log f) (B, H, Tk) or null: L_ij += c[q_offset + i] - c[j]
  float* dfox_q = nullptr;         // FoX: sum_j dL_ij per row (B, H, Tq), with fc
  float* dfox_k = nullptr;         // FoX: -sum_i dL_ij per key and query head (B, H, Tk), zeroed by the caller
  const float* sink = nullptr;     // attention sinks z_h (H), folded into the forward's epilogue, or null
  float* dz_rows = nullptr;        // sinks: dLoss/dz_h per row, -exp(z_h - lse_i) D_i (B, H, Tq), or null
  // GRAPE's additive term (general variant; its rates are P.dist_q / dist_k, f64 on the device):
  float* ddist_q = nullptr;        // -sum_j dL_ij |t_ij| per row (B, H, Tq), or null
  float* ddist_k = nullptr;        // -sum_i dL_ij |t_ij| per key and query head (B, H, Tk), zeroed by the caller
  Counter* counters = nullptr;     // forward blocks, forward boundary blocks, backward blocks
  // the one-pass backward: dQ's f32 accumulator (B, H, Tq, D; the f32 dq itself in the split kernels)
  // and one turn word per (b, h, query block of kDkvBq rows), zeroed by the caller; dq zeroed too
  // (query blocks no key block visits keep 0)
  float* dq_acc = nullptr;
  unsigned* dq_turn = nullptr;
  unsigned* tile_next = nullptr;   // the one-pass grid's count of started blocks (mma_device.cuh), zeroed
  // the general variant's one pass: per (b, h, query block) a bitmap of the key blocks that visit it
  // (visit_map, words of 32 key blocks), filled before the kernel
  const unsigned* dq_visit = nullptr;
  // the warp-specialised wgmma forward (fwd_cta's kWs): q, k and v as tile maps of boxes of 64 rows
  // (columns D, rows Tq or Tk, matrices B H or B Hkv)
  TileMap q_map{}, k_map{}, v_map{};
};

// The tile configuration per head dim (the kernel lab's choice; dev/cuda/attention/NOTES.md):
//   kFwdMT  m-tiles of 16 query rows per warp in the forward (query block = 64 kFwdMT rows);
//   kFwdMTOverlap, kFwdWGOverlap  m-tiles per warpgroup and warpgroups per CTA of the wgmma forward
//           with the intra-warpgroup overlap (fwd_cta's kOverlap), which holds the next block's
//           scores beside the accumulator and the P in flight: one m-tile per thread (two at D 64
//           spill 204 bytes), and two warpgroups sharing the K and V tiles of 128-row query blocks;
//   kFwdBkWs  keys per step of the warp-specialised forward (fwd_cta's kWs): 128 at D 64 (S as
//           m64n128k16 products, half the steps; no spills at 232 registers), 64 at D 128 (128
//           would spill 136 bytes: O's 64 registers beside S's 64 and P's 32);
//   kDkvBq  query rows per step of the dK/dV kernel.
// Key tiles are 64 everywhere else; the dQ kernel has one m-tile per warp (64-row query blocks).
// The split kernels hold twice the operand fragments: one m-tile per warp in the forward, and at
// D 128 32-row query steps in dK/dV (the accumulators of dK and dV alone are 128 registers).
template <int D, bool kSplit = false>
struct Config;
template <>
struct Config<64, false> {
  static constexpr int kFwdMT = 2, kFwdMTOverlap = 1, kFwdWGOverlap = 2, kFwdBkWs = 128, kDkvBq = 64;
};
template <>
struct Config<128, false> {
  static constexpr int kFwdMT = 1, kFwdMTOverlap = 1, kFwdWGOverlap = 2, kFwdBkWs = 64, kDkvBq = 64;
};
template <>
struct Config<64, true> {
  static constexpr int kFwdMT = 1, kDkvBq = 64;
};
template <>
struct Config<128, true> {
  static constexpr int kFwdMT = 1, kDkvBq = 32;
};

// Split kernels (kSplit: f32 inputs on the bf16 tensor cores): every input x is handed over as two
// bf16 numbers, hi = bf16(x) and lo = bf16(x - hi), stored side by side in a row of 2D (hi in
// columns 0..D-1, lo in D..2D-1; split_rows() in mma_device.cuh writes them), and every product
// a b is formed as hi_a hi_b + hi_a lo_b + lo_a hi_b (three mma.sync, f32 accumulation). hi + lo
// holds x to 2^-17 relative and the dropped lo_a lo_b is below 2^-16 of |a b|, so a product is exact
// to about 2^-16 instead of bf16's 2^-8. Operands formed in registers (P, dS) are split the same
// way before their product; outputs are written in f32. The row width in shared and global memory:
template <int D, bool kSplit>
constexpr int row_width() {
  return kSplit ? 2 * D : D;
}

// A shared-memory tile of rows of W bf16.
template <int W>
struct Tile {
  static constexpr int kPitch = W + 8;               // bf16 per shared-memory row
  static constexpr int kRowBytes = kPitch * 2;
  static constexpr int kChunks = W / 8;              // 16-byte chunks per row
};

HZ_KBODY int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
HZ_KBODY int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
HZ_KBODY float fmaxf_(float a, float b) { return a > b ? a : b; }
HZ_KBODY float ninf() { return -INFINITY; }

// Copies rows [r0, r0 + nrows) of a (rows, W) bf16 matrix into a shared tile (pitch W + 8); rows
// outside [0, rows) are zero-filled. Every thread of the CTA takes part.
template <int W, class X>
HZ_KBODY void load_tile(X& x, uint16_t* s, const uint16_t* g, int64_t r0, int nrows, int64_t rows) {
  using T = Tile<W>;
  for (int c = x.tid(); c < nrows * T::kChunks; c += kThreads) {
    const int r = c / T::kChunks, col = (c % T::kChunks) * 8;
    const int64_t gr = r0 + r;
    const bool ok = gr >= 0 && gr < rows;
    x.cp_async16(s + r * T::kPitch + col, g + (ok ? gr : 0) * W + col, ok);
  }
}

// ldmatrix.x4 addresses (bf16 offsets into a tile of rows of W) for the operand layouts above.
// A operand, 16 rows from row0, 16 columns from col0 (also B operands loaded with .trans whose
// rows are the k index: the matrices come out as (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15),
// (k 8-15, n 8-15) = b0, b1 of n-tile 0 and b0, b1 of n-tile 1).
template <int W>
HZ_KBODY int frag_a_offset(int lane, int row0, int col0) {
  return (row0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * Tile<W>::kPitch + col0 + 8 * (lane >> 4);
}
// B operand stored n-major (B[k][n] = tile[n][k], e.g. K for Q K^T): rows n0..n0+15, k from k0;
// the matrices come out as b0, b1 of n-tile 0 and b0, b1 of n-tile 1.
template <int W>
HZ_KBODY int frag_bn_offset(int lane, int n0, int k0) {
  return (n0 + (lane & 7) + 8 * (lane >> 4)) * Tile<W>::kPitch + k0 + 8 * ((lane >> 3) & 1);
}

template <class X>
HZ_KBODY void pack_a(X& x, uint32_t (&a)[4], const float (&s0)[4], const float (&s1)[4]) {
  a[0] = x.pack_bf16(s0[0], s0[1]);
  a[1] = x.pack_bf16(s0[2], s0[3]);
  a[2] = x.pack_bf16(s1[0], s1[1]);
  a[3] = x.pack_bf16(s1[2], s1[3]);
}
// The split kernels' second half of a register operand: lo = bf16(s - bf16(s)).
template <class X>
HZ_KBODY void pack_a_lo(X& x, uint32_t (&a)[4], const float (&s0)[4], const float (&s1)[4]) {
  auto r = [&](float v) { return v - x.round_bf16(v); };
  a[0] = x.pack_bf16(r(s0[0]), r(s0[1]));
  a[1] = x.pack_bf16(r(s0[2]), r(s0[3]));
  a[2] = x.pack_bf16(r(s1[0]), r(s1[1]));
  a[3] = x.pack_bf16(r(s1[2]), r(s1[3]));
}
// The two n-tiles of an x4 B fragment: c0 += a (b0, b1), c1 += a (b2, b3), or with split operands
// (kSplit: hi in a/b, lo in al/bl, read only then) the three products hi hi + hi lo + lo hi each.
template <bool kSplit, class X>
HZ_KBODY void mma_n2(X& x, float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4], const uint32_t (&al)[4],
                     const uint32_t (&b)[4], const uint32_t (&bl)[4]) {
  x.mma(c0, a, b[0], b[1]);
  x.mma(c1, a, b[2], b[3]);
  if constexpr (kSplit) {
    x.mma(c0, a, bl[0], bl[1]);
    x.mma(c1, a, bl[2], bl[3]);
    x.mma(c0, al, b[0], b[1]);
    x.mma(c1, al, b[2], b[3]);
  }
}

// C (16 x N) += A (16 x D, rows a_row0.. of sA) * B^T (N x D, rows b_row0.. of sB): both tiles hold
// rows of length D (Q K^T, dO V^T, K Q^T, V dO^T), split rows of 2D with kSplit.
template <int D, int N, bool kSplit, class X>
HZ_KBODY void gemm_nt(X& x, float (&c)[N / 8][4], const uint16_t* sA, int a_row0, const uint16_t* sB, int b_row0) {
  constexpr int W = row_width<D, kSplit>();
  const int lane = x.tid() & 31;
  HZ_UNROLL
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t a[4], al[4];
    x.ldsm_x4(a, sA + frag_a_offset<W>(lane, a_row0, ks * 16));
    if constexpr (kSplit) x.ldsm_x4(al, sA + frag_a_offset<W>(lane, a_row0, D + ks * 16));
    HZ_UNROLL
    for (int np = 0; np < N / 16; ++np) {
      uint32_t b[4], bl[4];
      x.ldsm_x4(b, sB + frag_bn_offset<W>(lane, b_row0 + np * 16, ks * 16));
      if constexpr (kSplit) x.ldsm_x4(bl, sB + frag_bn_offset<W>(lane, b_row0 + np * 16, D + ks * 16));
      mma_n2<kSplit>(x, c[2 * np], c[2 * np + 1], a, al, b, bl);
    }
  }
}
// C (16 x D) += A (16 x K, from C-fragment registers s, packed to bf16, split with kSplit) * B
// (K x D, rows b_row0.. of sB holding rows of length D, split rows of 2D with kSplit): P V, dS K,
// P^T dO, dS^T Q.
template <int D, int K, bool kSplit, class X>
HZ_KBODY void gemm_rn(X& x, float (&c)[D / 8][4], const float (&s)[K / 8][4], const uint16_t* sB, int b_row0) {
  constexpr int W = row_width<D, kSplit>();
  const int lane = x.tid() & 31;
  HZ_UNROLL
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t a[4], al[4];
    pack_a(x, a, s[2 * kk], s[2 * kk + 1]);
    if constexpr (kSplit) pack_a_lo(x, al, s[2 * kk], s[2 * kk + 1]);
    HZ_UNROLL
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4], bl[4];
      x.ldsm_x4_t(b, sB + frag_a_offset<W>(lane, b_row0 + kk * 16, dp * 16));
      if constexpr (kSplit) x.ldsm_x4_t(bl, sB + frag_a_offset<W>(lane, b_row0 + kk * 16, D + dp * 16));
      mma_n2<kSplit>(x, c[2 * dp], c[2 * dp + 1], a, al, b, bl);
    }
  }
}

// The two products of a backward step for one warp's 16 rows (from row0 of sA1 and sA2): s = A1 B1^T
// (scores) and dp = A2 B2^T (dO . v), both started from zero.
template <int D, int N, bool kSplit, class X>
HZ_KBODY void scores_and_dp(X& x, float (&s)[N / 8][4], float (&dp)[N / 8][4], const uint16_t* sA1, const uint16_t* sB1,
                            const uint16_t* sA2, const uint16_t* sB2, int row0) {
  HZ_UNROLL
  for (int nt = 0; nt < N / 8; ++nt)
    HZ_UNROLL
    for (int e = 0; e < 4; ++e) s[nt][e] = dp[nt][e] = 0.0f;
  gemm_nt<D, N, kSplit>(x, s, sA1, row0, sB1, 0);
  gemm_nt<D, N, kSplit>(x, dp, sA2, row0, sB2, 0);
}

// An output row's pair of columns (col, col + 1) from a C fragment: bf16 (packed) or, split, f32.
template <bool kSplit, class X>
HZ_KBODY void store_pair(X& x, void* base, int64_t row_off, int col, float v0, float v1) {
  if constexpr (kSplit) {
    float* p = static_cast<float*>(base) + row_off + col;
    p[0] = v0;
    p[1] = v1;
  } else {
    reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(base) + row_off)[col / 2] = x.pack_bf16(v0, v1);
  }
}
template <bool kSplit>
HZ_KBODY void store_zero(void* base, int64_t e) {
  if constexpr (kSplit) static_cast<float*>(base)[e] = 0.0f;
  else static_cast<uint16_t*>(base)[e] = 0;
}

// Scale-invariant coefficients for index distances t0 .. t0 + n - 1, read both ways (|t|: a prefix's
// later keys; elsewhere negative distances are masked anyway), scaled for the log2 domain:
// tab[2e] = a_t * scale * log2 e, tab[2e+1] = m_t log2 e.
// kCta: the CTA's threads, all of which take part (here and in the helpers below that take it);
// first >= 0: threads first.. of kCta taking part instead (the warp-specialised forward's fillers).
template <int kCta = kThreads, class X>
HZ_KBODY void fill_si_table(X& x, float* tab, const AttnKernelParams& P, int64_t t0, int n, int first = -1) {
  for (int e = first >= 0 ? first : x.tid(); e < n; e += kCta) {
    const int64_t t = t0 + e;
    float a, m;
    scale_invariant_coef<float>(static_cast<float>(t < 0 ? -t : t), static_cast<float>(P.tau), a, m);
    tab[2 * e] = a * static_cast<float>(P.scale) * kLog2e;
    tab[2 * e + 1] = m * kLog2e;
  }
}

// The head of one step of a double-buffered loop: once every warp is done with the other stage
// (barrier), the next tile's copies go there (`prefetch`, when there is a next tile), the step's
// scale-invariant table is filled (distances t0 .. t0 + ntab - 1) and so is whatever `fill` writes
// for this step, and after this stage's copies have landed a second barrier makes them, the table
// and the fill visible to every warp.
// kWg: the tiles are read by wgmma (the async proxy): each thread fences its landed copies into it
// before the barrier.
template <bool kWg = false, int kCta = kThreads, class X, class F, class G>
HZ_KBODY void pipeline_step(X& x, bool has_next, F&& prefetch, const AttnKernelParams& P, float* tab, int64_t t0,
                            int ntab, G&& fill) {
  x.sync();
  if (has_next) prefetch();
  x.cp_commit();
  if (P.logit == LogitKind::ScaleInvariant) fill_si_table<kCta>(x, tab, P, t0, ntab);
  fill();
  x.template cp_wait<1>();
  if constexpr (kWg) x.fence_proxy_async();
  x.sync();
}

// ---- Hopper's warpgroup MMA (wgmma, sm_90a) ---------------------------------------------------------
// The kWg kernels (attn_wgmma.cu: forward, dQ, dK/dV) form their products with
// wgmma.mma_async.m64nNk16 in place of mma.sync: the CTA's 4 warps are one warpgroup, the tensor
// cores read the tile operands from shared memory themselves (no ldmatrix, no fragment registers),
// and each warp receives the C fragment layout of mma.sync (its 16 rows of each 64-row m-tile,
// c[nt][0..3] per 8 columns), so everything between the products (logits, masks, the online
// softmax, the gradient terms) is the same code. A register operand (P, dS) goes in as an A
// fragment, packed as pack_a packs it.
// Tiles read by wgmma use PTX's canonical 128-byte swizzle: a tile of R rows of W bf16 is W / 64
// column blocks of R x 64 (128 bytes per row, blocks R * 128 bytes apart), and the 16-byte chunk c
// of row r sits at chunk c ^ (r % 8) of that row; the tile starts on a 1024-byte boundary (the
// hardware swizzles by shared-memory address bits 4-6 ^ 7-9). The same tile serves both ways: as a
// K-major operand (Q and K in S = Q K^T: the reduction runs along the row), which advances along K
// by moving its descriptor's start within the 128-byte row, and as an N-major B (V in O += P V: the
// reduction runs down the rows; imm-trans-b = 1).
HZ_KBODY int sw_offset(int r, int col, int R) {  // bf16 offset of (r, col) in a swizzled tile of R rows
  return (col >> 6) * R * 64 + r * 64 + ((((col & 63) >> 3) ^ (r & 7)) << 3) + (col & 7);
}
// load_tile for a swizzled tile of R rows.
template <int W, int kCta = kThreads, class X>
HZ_KBODY void load_tile_sw(X& x, uint16_t* s, const uint16_t* g, int64_t r0, int R, int64_t rows) {
  constexpr int kChunks = W / 8;
  for (int c = x.tid(); c < R * kChunks; c += kCta) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int64_t gr = r0 + r;
    const bool ok = gr >= 0 && gr < rows;
    x.cp_async16(s + sw_offset(r, col, R), g + (ok ? gr : 0) * W + col, ok);
  }
}
// A matrix descriptor (PTX's wgmma descriptor: start, leading and stride byte offsets in 16-byte
// units, base offset 0, layout 1 = 128-byte swizzle).
HZ_KBODY uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (uint64_t{1} << 62);
}
// K-major: rows row0.. of a swizzled tile of R rows at shared address `tile`, columns 16 ks .. +15
// (8-row groups 1024 bytes apart; the leading offset is unused and set to 1, as PTX assumes).
HZ_KBODY uint64_t desc_k(uint32_t tile, int R, int row0, int ks) {
  const int col = ks * 16;
  return wg_desc(tile + static_cast<uint32_t>((col >> 6) * R * 128 + (row0 >> 3) * 1024 + (col & 63) * 2), 16, 1024);
}
// N-major (B = the tile itself, K down its rows): rows 16 kk .. +15, every column (column blocks of
// 64 are R * 128 bytes apart: the leading offset; 8-row groups 1024: the stride offset).
HZ_KBODY uint64_t desc_mn(uint32_t tile, int R, int kk) {
  return wg_desc(tile + static_cast<uint32_t>(kk * 16 * 128), static_cast<uint32_t>(R * 128), 1024);
}
// Issue (no fence, commit or wait: the caller batches) C (64 x N) = A B^T + (acc ? C : 0): A rows
// a_row0 .. +63 of a K-major tile of RA rows, B^T the first N rows of one of RB rows, both D wide.
template <int D, int N, class X>
HZ_KBODY void wg_issue_nt(X& x, float (&c)[N / 8][4], uint32_t sA, int RA, int a_row0, uint32_t sB, int RB, bool acc) {
  HZ_UNROLL
  for (int ks = 0; ks < D / 16; ++ks)
    x.template wgmma_ss<N>(c, desc_k(sA, RA, a_row0, ks), desc_k(sB, RB, 0, ks), acc || ks > 0 ? 1 : 0);
}
// Issue C (64 x D) += P (64 x K, this warp's rows from C-fragment registers s, packed into a) B
// (K x D: the first K rows of an N-major tile of RB rows). a must stay untouched until the wait.
template <int D, int K, class X>
HZ_KBODY void wg_issue_rn(X& x, float (&c)[D / 8][4], uint32_t (&a)[K / 16][4], uint32_t sB, int RB) {
  HZ_UNROLL
  for (int kk = 0; kk < K / 16; ++kk) x.template wgmma_rs<D>(c, a[kk], desc_mn(sB, RB, kk), 1);
}
// The first 1024-byte boundary of the window at or after smem (swizzled tiles start there).
template <class X>
HZ_KBODY unsigned char* align_1k(X& x, unsigned char* smem) {
  return smem + ((1024u - x.smem_u32(smem) % 1024u) % 1024u);
}
// The backward's two score products on wgmma, one batch: s = A1 B1^T and dp = A2 B2^T (A: 64-row
// tiles of RA rows; B^T: the first N rows of tiles of RB rows), both from zero.
template <int D, int N, class X>
HZ_KBODY void wg_scores_and_dp(X& x, float (&s)[N / 8][4], float (&dp)[N / 8][4], const uint16_t* sA1,
                               const uint16_t* sB1, const uint16_t* sA2, const uint16_t* sB2, int RA, int RB) {
  x.wg_operand_fence(s);
  x.wg_operand_fence(dp);
  x.wg_fence();
  wg_issue_nt<D, N>(x, s, x.smem_u32(sA1), RA, 0, x.smem_u32(sB1), RB, false);
  wg_issue_nt<D, N>(x, dp, x.smem_u32(sA2), RA, 0, x.smem_u32(sB2), RB, false);
  x.wg_commit();
  x.template wg_wait<0>();
  x.wg_operand_fence(s);
  x.wg_operand_fence(dp);
}
// The backward's register-operand products on wgmma, one batch: c1 += s1 B1, and with kTwo also
// c2 += s2 B2 (s: C-fragment registers, packed to bf16; B: the first K rows of N-major tiles of RB
// rows, D wide).
template <int D, int K, bool kTwo, class X>
HZ_KBODY void wg_gemm_rn(X& x, float (&c1)[D / 8][4], const float (&s1)[K / 8][4], const uint16_t* sB1,
                         float (&c2)[D / 8][4], const float (&s2)[K / 8][4], const uint16_t* sB2, int RB) {
  uint32_t a1[K / 16][4], a2[K / 16][4];  // held until the wait
  HZ_UNROLL
  for (int kk = 0; kk < K / 16; ++kk) {
    pack_a(x, a1[kk], s1[2 * kk], s1[2 * kk + 1]);
    if constexpr (kTwo) pack_a(x, a2[kk], s2[2 * kk], s2[2 * kk + 1]);
  }
  x.wg_operand_fence(c1);
  if constexpr (kTwo) x.wg_operand_fence(c2);
  x.wg_fence();
  wg_issue_rn<D, K>(x, c1, a1, x.smem_u32(sB1), RB);
  if constexpr (kTwo) wg_issue_rn<D, K>(x, c2, a2, x.smem_u32(sB2), RB);
  x.wg_commit();
  x.template wg_wait<0>();
  x.wg_operand_fence(c1);
  if constexpr (kTwo) x.wg_operand_fence(c2);
}
// One such product: c += s B.
template <int D, int K, class X>
HZ_KBODY void wg_gemm_rn(X& x, float (&c)[D / 8][4], const float (&s)[K / 8][4], const uint16_t* sB, int RB) {
  wg_gemm_rn<D, K, false>(x, c, s, sB, c, s, sB, RB);
}

// ---- the two kernel variants ---------------------------------------------------------------------------
// Every kernel comes in two variants (template argument kGen): the plain one, for one visible
// interval per row and index positions (attn_mma.cu, compiled with HZ_TILING_PLAIN so tiling.h leaves
// the rest out), and the general one (attn_mma_general.cu) for everything tiling.h defines besides:
// chunked attention, sink tokens (a second interval per row: the blocks of both, tiling.h's
// BlockSpans, are visited in order, each once), a prefix (distances read both ways) and token
// positions (the distances of ALiBi and scale-invariant attention are pi(p_i) - pi(j), from the
// positions of the block's keys in shared memory and each row's in registers, relative to a base
// position of the tile so that float keeps them exact), and GRAPE's additive term -|t| (dist_q_i +
// dist_k_j) (the rates of a tile's rows and of a block's keys in shared memory, read as the logits
// are formed). The general variant's extra registers stay out of the plain kernels, which sit at
// the register limit (tests/kernel_registers.sh).
//
// The blocks a tile visits along the other axis, in order: those of one interval (plain) or of both.
template <bool kGen>
struct Visit;
template <>
struct Visit<false> {
  BlockSpan s;
  HZ_KBODY int64_t first() const { return s.first; }
  HZ_KBODY int64_t last() const { return s.last; }
  HZ_KBODY int64_t next(int64_t k) const { return k + 1; }
  HZ_KBODY int64_t count() const { return span_blocks(s); }
  HZ_KBODY int64_t full() const { return span_full_blocks(s); }
  HZ_KBODY bool boundary(int64_t k) const { return block_class(s, k) == BlockClass::Boundary; }
};
template <>
struct Visit<true> {
  BlockSpans s;
  HZ_KBODY int64_t first() const { return spans_next(s, -1); }
  HZ_KBODY int64_t last() const { return spans_last(s); }
  HZ_KBODY int64_t next(int64_t k) const { return spans_next(s, k); }
  HZ_KBODY int64_t count() const { return spans_blocks(s); }
  HZ_KBODY int64_t full() const { return spans_full_blocks(s); }
  HZ_KBODY bool boundary(int64_t k) const { return spans_class(s, k) == BlockClass::Boundary; }
};
// Key blocks met by query rows [i0, i1] (forward, dQ); query blocks met by keys [j0, j1] (dK/dV).
template <bool kGen>
HZ_KBODY Visit<kGen> visit_keys(const AttnKernelParams& P, int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t n) {
  if constexpr (kGen) return {key_block_spans(P, b, h, i0, i1, n)};
  else return {key_blocks(P, b, h, i0, i1, n)};
}
template <bool kGen>
HZ_KBODY Visit<kGen> visit_queries(const AttnKernelParams& P, int64_t b, int64_t h, int64_t j0, int64_t j1,
                                   int64_t n) {
  if constexpr (kGen) return {query_block_spans(P, b, h, j0, j1, n)};
  else return {query_blocks(P, b, h, j0, j1, n)};
}

// A row's (or, key-major, a key's) second interval: the sink tokens it sees (the rows that see it
// as a sink token), in block coordinates from c0 clamped to [-1, n], as lo_c/hi_c of the first one;
// {0, -1} in the plain variant.
struct ColRange {
  int lo, hi;
};
HZ_KBODY ColRange cols_in_block(IndexRange r, int64_t c0, int n) {
  return {static_cast<int>(imax(-1, imin(n, r.lo - c0))), static_cast<int>(imax(-1, imin(n, r.hi - c0)))};
}
HZ_KBODY bool in_cols(ColRange r, int c) { return c >= r.lo && c <= r.hi; }
// A row's sink-token keys held in 32 bits (registers are the general variant's limit; keys < 2^31).
struct Range32 {
  int32_t lo, hi;
};
HZ_KBODY Range32 range32(IndexRange r) { return {static_cast<int32_t>(r.lo), static_cast<int32_t>(r.hi)}; }
// A row's keys likewise (the forward's registers), the ends clamped to [-1, 2^31 - 1]: the same keys
// (every key index is in [0, Tk), Tk < 2^31) whatever the window's distances make of the ends.
HZ_KBODY int32_t clamp32(int64_t v) { return static_cast<int32_t>(v < -1 ? -1 : v > 2147483647 ? 2147483647 : v); }
HZ_KBODY Range32 key_range32(IndexRange r) { return {clamp32(r.lo), clamp32(r.hi)}; }
HZ_KBODY ColRange cols_in_block(Range32 r, int64_t c0, int n) { return cols_in_block(IndexRange{r.lo, r.hi}, c0, n); }

// Token positions (general variant): the position of token j relative to a tile's base, in float.
HZ_KBODY float rel_position(const AttnKernelParams& P, int64_t b, int64_t j, double base) {
  return static_cast<float>(token_position(P, b, j) - base);
}

// An entry's logit in the log2 domain, L2 = mul * (q . k) + add - slope2 * t (ALiBi's term left to the
// caller, as the plain forward orders it; FoX's c_i - c_j after), for a row
// with factor r() (rs() = r * scale * log2 e; read only where needed, from registers or shared
// memory), at index distance ti (p_i - j) whose scale-invariant table entry is te; the general
// variant reads |ti|, or with token positions |tp()| (tp = pi(p_i) - pi(j)), computing the
// scale-invariant coefficients in place.
struct Coef2 {
  float mul, add, t;
};
template <bool kGen, class R, class RS, class TP>
HZ_KBODY Coef2 coef2(const AttnKernelParams& P, bool si, bool tok, R&& r, RS&& rs, const float* sT, int te, float ti,
                     TP&& tp) {
  Coef2 c{0.0f, 0.0f, ti};
  float& t = c.t;
  if constexpr (kGen) t = fabsf(tok ? tp() : ti);
  if (si) {
    if (kGen && tok) {
      float a, m;
      scale_invariant_coef<float>(t, static_cast<float>(P.tau), a, m);
      c.mul = rs() * a;
      c.add = m * kLog2e;
    } else {
      c.mul = r() * sT[2 * te];
      c.add = sT[2 * te + 1];
    }
  } else {
    c.mul = rs();
  }
  return c;
}

// A key block's tables from its first key j0 (threads first, first + kStride, ...): with FoX its
// c_j log2 e into sF, with token positions (general variant) its keys' positions from `base` into
// sPos, with GRAPE's term (general variant, dist) its keys' rates dist_k log2 e from dkg into sDk
// (kBk floats each; 0 beyond Tk or without dkg).
template <bool kGen, int kBk, int kStride>
HZ_KBODY void fill_key_tables(int first, const AttnKernelParams& P, int64_t b, int64_t j0, const float* fcg, float* sF,
                              double base, float* sPos, bool dist, const double* dkg, float* sDk) {
  if (fcg != nullptr)
    for (int c = first; c < kBk; c += kStride) sF[c] = j0 + c < P.Tk ? fcg[j0 + c] * kLog2e : 0.0f;
  if (kGen && P.positions != nullptr)
    for (int c = first; c < kBk; c += kStride) sPos[c] = j0 + c < P.Tk ? rel_position(P, b, j0 + c, base) : 0.0f;
  if (kGen && dist)
    for (int c = first; c < kBk; c += kStride)
      sDk[c] = dkg != nullptr && j0 + c < P.Tk ? static_cast<float>(dkg[j0 + c]) * kLog2e : 0.0f;
}

// Key block kb (the loop's step n; next: the block after it, has_next: whether there is one) of a
// query-major loop (forward, dQ): pipeline_step with the next block's K and V as the prefetch and,
// with FoX, this block's c_j log2 e into sF, with token positions (general variant) its keys'
// positions from `base` into sPos, with GRAPE's term (general variant, dist) its keys' rates
// dist_k log2 e from dkg into sDk (kBk floats each; 0 beyond Tk or without dkg); returns this block's K and V
// tiles, its first key and whether it needs masking (Boundary, or ragged at the end of the keys:
// the zero-filled rows beyond Tk must not count).
// kOverlap (the forward on wgmma with the next block's S issued before this block's softmax,
// fwd_cta): K runs one block ahead of V. The prefetch is the next block's K (into the stage whose K
// the previous step's S has read) and this block's V (into the stage whose V the step before that
// has multiplied); the wait lands this block's K and the previous block's V, which the step returns
// as v (the product P V of the previous block, issued beside this block's S).
struct KvStep {
  const uint16_t *k, *v;
  int64_t j0;
  bool masked;
};
// Whether key block kb (first key j0) of a query-major loop needs masking: Boundary, or ragged at
// the end of the keys.
template <bool kGen>
HZ_KBODY bool key_block_masked(const Visit<kGen>& blocks, int64_t kb, int64_t j0, int kBk, int64_t Tk) {
  return blocks.boundary(kb) || j0 + kBk > Tk;
}
template <int D, int kBq, int kBk, bool kSplit, bool kGen, bool kWg = false, bool kOverlap = false,
          int kCta = kThreads, class X>
HZ_KBODY KvStep kv_step(X& x, const AttnKernelParams& P, const Visit<kGen>& blocks, int64_t kb, int64_t n,
                        int64_t b, int64_t i0, uint16_t* sK, uint16_t* sV, const uint16_t* kg, const uint16_t* vg,
                        float* sT, const float* fcg, float* sF, double base, float* sPos, bool dist,
                        const double* dkg, float* sDk) {
  constexpr int W = row_width<D, kSplit>(), kStage = kBk * (kWg ? W : Tile<W>::kPitch);
  const int st = static_cast<int>(n & 1);
  const int64_t j0 = kb * kBk, next = blocks.next(kb);
  static_assert(kCta == kThreads || kWg, "more than one warpgroup per CTA: the wgmma forward");
  pipeline_step<kWg, kCta>(
      x, kOverlap || next <= blocks.last(),
      [&] {
        if constexpr (kOverlap) {
          static_assert(kWg, "the overlapped loop runs on wgmma");
          if (next <= blocks.last()) load_tile_sw<W, kCta>(x, sK + (st ^ 1) * kStage, kg, next * kBk, kBk, P.Tk);
          load_tile_sw<W, kCta>(x, sV + st * kStage, vg, j0, kBk, P.Tk);
        } else if constexpr (kWg) {
          load_tile_sw<W, kCta>(x, sK + (st ^ 1) * kStage, kg, next * kBk, kBk, P.Tk);
          load_tile_sw<W, kCta>(x, sV + (st ^ 1) * kStage, vg, next * kBk, kBk, P.Tk);
        } else {
          load_tile<W>(x, sK + (st ^ 1) * kStage, kg, next * kBk, kBk, P.Tk);
          load_tile<W>(x, sV + (st ^ 1) * kStage, vg, next * kBk, kBk, P.Tk);
        }
      },
      P, sT, P.q_offset + i0 - (j0 + kBk - 1), kBq + kBk - 1,
      [&] { fill_key_tables<kGen, kBk, kCta>(x.tid(), P, b, j0, fcg, sF, base, sPos, dist, dkg, sDk); });
  return {sK + st * kStage, sV + (kOverlap ? st ^ 1 : st) * kStage, j0, key_block_masked(blocks, kb, j0, kBk, P.Tk)};
}

// GRAPE's rates of rows [i0, i0 + n) of (b, h) times log2 e into sDq (0 beyond Tq or without
// dist_q); the general variant with the term only. Every thread of the CTA takes part; the next
// barrier makes them visible.
template <int kCta = kThreads, class X>
HZ_KBODY void fill_row_rates(X& x, const AttnKernelParams& P, int64_t b, int64_t h, int64_t i0, int n, float* sDq,
                             int first = -1) {
  const double* dq = P.dist_q != nullptr ? P.dist_q + (b * P.H + h) * P.Tq : nullptr;
  for (int r = first >= 0 ? first : x.tid(); r < n; r += kCta)
    sDq[r] = dq != nullptr && i0 + r < P.Tq ? static_cast<float>(dq[i0 + r]) * kLog2e : 0.0f;
}
// The keys' rates of (b, h) (dist_k), or null.
HZ_KBODY const double* key_rates(const AttnKernelParams& P, int64_t b, int64_t h) {
  return P.dist_k != nullptr ? P.dist_k + (b * P.H + h) * P.Tk : nullptr;
}

// Row scale r_i (row factor times LogN's c_h) for row i (0 outside [0, Tq)).
HZ_KBODY float row_r(const AttnKernelParams& P, const float* c, int64_t b, int64_t h, int64_t i) {
  if (i < 0 || i >= P.Tq) return 0.0f;
  const float f = row_factor<float>(P, b, h, i);
  return P.logit == LogitKind::LogN ? f * c[h] : f;
}

// ---- forward ----------------------------------------------------------------------------------------
// kWg: the wgmma kernels (above; bf16 only): swizzled tiles without padding, on a 1024-byte boundary
// (up to 1 KB of the block's shared memory goes to the alignment). kWG: warpgroups per CTA (wgmma
// only), each with kMT 64-row m-tiles of the query block, sharing its K and V tiles. kWs: warp
// specialisation (fwd_cta): one more warpgroup, the producer, and per stage its own key tables and
// the pipeline's mbarriers.
template <int D, int kMT, bool kSplit = false, bool kWg = false, int kWG = 1, bool kWs = false, int kKeys = 64>
struct FwdShape {
  static_assert(!(kWg && kSplit), "the wgmma kernels take bf16 inputs");
  static_assert(kWG == 1 || kWg, "more than one warpgroup per CTA: the wgmma forward");
  static constexpr int kCta = kThreads * (kWG + (kWs ? 1 : 0));  // threads
  static constexpr int kBq = 16 * kMT * kWarps * kWG, kBk = kKeys;
  static_assert(kBk == 64 || (kWs && kBk == 128), "key blocks of 64 (128: the warp-specialised forward)");
  static constexpr int kTab = kBq + kBk - 1;  // distances a (query block, key block) pair spans
  // a stage's tables (floats): the scale-invariant pairs, FoX's c_j, the keys' positions and rates
  static constexpr int kTabStage = 2 * kTab + 3 * kBk;
  static constexpr int kRowBytes = kWg ? 2 * D : Tile<row_width<D, kSplit>()>::kRowBytes;
  // where kWs's 9 mbarriers start: after the tiles, the tables (per stage with kWs) and GRAPE's rates
  // of the rows
  static constexpr int kBarsAt = (kBq + 4 * kBk) * kRowBytes + ((kWs ? 2 : 1) * kTabStage + kBq) * 4;
  static constexpr int kSmem = (kWg ? 1024 : 0) + kBarsAt + (kWs ? 8 + 9 * 8 : 0);
  // kWs: the warpgroups' registers per thread (setmaxnreg; 65536 in all). ptxas keeps both roles
  // within them without spills at D 64 and 128; the producer's fillers (the scale-invariant table's
  // logarithms) spilled 28 B at 32 (with 240 for the consumers).
  static constexpr int kRegsConsumer = 232, kRegsProducer = 48;
  static_assert(!kWs || 2 * kThreads * kRegsConsumer + kThreads * kRegsProducer <= 65536, "the register file");
};
// The first of a thread's rows in m-tile mt, relative to the query block: mma.sync gives a warp kMT
// consecutive m-tiles, wgmma gives each of its warpgroup's kMT 64-row m-tiles 16 rows per warp
// (warpgroup w: m-tiles w kMT .. w kMT + kMT - 1 of the block).
template <int kMT, bool kWg, int kWG = 1>
HZ_KBODY int fwd_row0(int warp, int mt) {
  if constexpr (kWG > 1) return ((warp / kWarps) * kMT + mt) * 64 + (warp % kWarps) * 16;
  return kWg ? mt * 64 + warp * 16 : warp * 16 * kMT + mt * 16;
}

// kOverlap (wgmma only): FlashAttention-3's intra-warpgroup overlap. Step n issues S of key block
// n and P V of block n - 1 as two wgmma batches, waits for the first, and runs block n's logits and
// softmax while the tensor cores form P V; only then does it wait for P V, scale the accumulator by
// block n's correction and pack block n's P (the A registers of the product in flight stay
// untouched until its wait). The accumulator sees the same operations in the same order as without
// the overlap (P V of block n - 1, the scaling of block n, P V of block n), so the output is the
// same bits. K runs a block ahead of V in the two-stage pipeline (kv_step), and P V of the last block
// follows the loop.
// kWG (wgmma only): warpgroups per CTA (FwdShape).
// kWs (with kOverlap and two warpgroups): FlashAttention-3's warp specialisation. A third
// warpgroup, the producer, gives up its registers (setmaxnreg) to the two consumer warpgroups: its
// first thread loads Q once and each block's K and V by the bulk tensor copy (Args' tile maps), the
// 96 threads of its warps 1-3 fill each block's tables (the scale-invariant coefficients, FoX's c_j,
// positions, GRAPE's rates; GRAPE's row rates once, with Q), into two stages. mbarriers carry the
// stages: "full" ones for Q, K and the tables, and V (the copies' bytes and the fillers' arrivals),
// "empty" ones that the consumers' 256 threads pass when they are done with a stage's K and tables
// (after the block's softmax) and with its V (after P V's wait). The consumers take turns issuing
// their products (named barriers 1 and 2, FlashAttention-3's ping-pong): one warpgroup's softmax runs
// while the other's products do. No block barrier after the roles part.
template <int D, int kMT, bool kGen, bool kSplit, bool kWg = false, bool kOverlap = false, int kWG = 1,
          bool kWs = false, int kKeys = 64, class X>
HZ_KBODY void fwd_cta(X& x, const AttnKernelParams& P, const Args& a, int64_t cta, unsigned char* smem) {
  static_assert(!kWs || (kOverlap && kWG == 2), "warp specialisation: the overlapped forward, two consumer warpgroups");
  using S = FwdShape<D, kMT, kSplit, kWg, kWG, kWs, kKeys>;
  constexpr int kCta = S::kCta;
  constexpr int W = row_width<D, kSplit>();
  constexpr int kBq = S::kBq, kBk = S::kBk, kNT = kBk / 8, kDT = D / 8, kPitch = kWg ? W : Tile<W>::kPitch;
  const int tid = x.tid(), lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
  if constexpr (kWg) smem = align_1k(x, smem);
  const QueryTile tile = query_tile(P, cta, kBq);
  const int64_t b = tile.b, h = tile.h, hk = tile.hk, i0 = tile.i0, i1 = tile.i1;
  const uint16_t* qg = a.q + (b * P.H + h) * P.Tq * W;
  const uint16_t* kg = a.k + (b * P.Hkv + hk) * P.Tk * W;
  const uint16_t* vg = a.v + (b * P.Hkv + hk) * P.Tk * W;
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sK = sQ + kBq * kPitch;   // 2 stages
  uint16_t* sV = sK + 2 * kBk * kPitch;  // 2 stages
  float* const sT0 = reinterpret_cast<float*>(sV + 2 * kBk * kPitch);  // the tables (kWs: stage 0's)
  float* sT = sT0;
  float* sF = sT + 2 * S::kTab;  // FoX: the block's c_j log2 e
  float* sPos = sF + kBk;        // token positions: the block's keys' (general variant)
  float* sDk = sPos + kBk;       // GRAPE: the block's keys' rates dist_k log2 e (general variant)
  float* const sDq = sT0 + (kWs ? 2 : 1) * S::kTabStage;  // GRAPE: the rows' rates dist_q log2 e (general variant)
  // kWs: full Q; full K and tables, full V, empty K and tables, empty V (two stages each)
  [[maybe_unused]] uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + ((S::kBarsAt + 7) & ~7));
  const float* fcg = a.fc != nullptr ? a.fc + (b * P.H + h) * P.fox_T : nullptr;
  const bool tok = kGen && P.positions != nullptr;
  const double base = tok ? token_position(P, b, P.q_offset + i0) : 0.0;
  const bool dist = kGen && HZ_DIST(P);
  const double* dkg = dist ? key_rates(P, b, h) : nullptr;

  const Visit<kGen> blocks = visit_keys<kGen>(P, b, h, i0, i1, kBk);
  if (tid == 0) {  // counted in blocks of 64 keys whatever the step (kWs at D 64: 128)
    const Visit<kGen> counted = kBk == 64 ? blocks : visit_keys<kGen>(P, b, h, i0, i1, 64);
    x.add_counter(&a.counters[0], static_cast<Counter>(counted.count()));
    x.add_counter(&a.counters[1], static_cast<Counter>(counted.count() - counted.full()));
  }
  if (blocks.count() == 0) {  // no row of this block sees a key (with a sink: lse = z_h)
    for (int64_t e = tid; e < (i1 - i0 + 1) * D; e += kCta) store_zero<kSplit>(a.out, ((b * P.H + h) * P.Tq + i0) * D + e);
    for (int64_t i = i0 + tid; i <= i1; i += kCta) a.lse[(b * P.H + h) * P.Tq + i] = a.sink ? a.sink[h] : ninf();
    return;
  }
  constexpr int kConsumers = kThreads * kWG, kFill = kThreads - 32;
  // the rest, a consumer's part (kWs) or every thread's: this thread's rows, the loop, the epilogue
  auto consume = [&]() {
    // this thread's rows: r = fwd_row0(warp, mt) + g + 8 hh
    float m[kMT][2], l[kMT][2], rr[kMT][2], rs[kMT][2], cq[kMT][2], pq[kMT][2];
    Range32 kr32[kMT][2], sr[kMT][2];  // the row's keys, its sink tokens (general variant)
    HZ_UNROLL
    for (int mt = 0; mt < kMT; ++mt)
      HZ_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        const int64_t i = i0 + fwd_row0<kMT, kWg, kWG>(warp, mt) + g + 8 * hh;
        const IndexRange kr = i < P.Tq ? key_range(P, b, h, i) : IndexRange{1, 0};
        kr32[mt][hh] = key_range32(kr);
        sr[mt][hh] = range32(kGen && i < P.Tq ? sink_range(P, b, h, i) : IndexRange{1, 0});
        pq[mt][hh] = tok && i < P.Tq ? rel_position(P, b, P.q_offset + i, base) : 0.0f;
        rr[mt][hh] = row_r(P, a.c, b, h, i);
        rs[mt][hh] = rr[mt][hh] * static_cast<float>(P.scale) * kLog2e;
        cq[mt][hh] = fcg != nullptr && i < P.Tq ? fcg[P.q_offset + i] * kLog2e : 0.0f;  // FoX: c_i log2 e
        m[mt][hh] = ninf();
        l[mt][hh] = 0.0f;
      }
    float o[kMT][kDT][4];
    HZ_UNROLL
    for (int mt = 0; mt < kMT; ++mt)
      HZ_UNROLL
      for (int dt = 0; dt < kDT; ++dt)
        HZ_UNROLL
        for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.0f;
    const bool si = P.logit == LogitKind::ScaleInvariant;
    const float slope2 = P.alibi ? static_cast<float>(P.slope[h]) * kLog2e : 0.0f;

    // One key block's logits and online softmax over this thread's rows of s (key block from key j0;
    // masked: mask it): s becomes P (relative to the rows' new maxima), l takes the block's sums, and
    // rescale(mt, hh, corr) receives each row's correction of what o holds.
    auto softmax = [&](float (&s)[kMT][kNT][4], int64_t j0, bool masked, auto&& rescale) {
      HZ_UNROLL
      for (int mt = 0; mt < kMT; ++mt)
        HZ_UNROLL
        for (int hh = 0; hh < 2; ++hh) {
          // 32-bit coordinates inside the block: column c is key j0 + c; distance t = tb - c; the
          // table entry of (row, c) is te0 - c (t0 is the smallest distance of the block pair)
          const int rloc = fwd_row0<kMT, kWg, kWG>(warp, mt) + g + 8 * hh;
          const float tb = static_cast<float>(P.q_offset + i0 + rloc - j0);
          const int te0 = rloc + kBk - 1;
          const ColRange kc = cols_in_block(kr32[mt][hh], j0, kBk);
          const ColRange sc = cols_in_block(sr[mt][hh], j0, kBk);
          [[maybe_unused]] const float rq = dist ? sDq[rloc] : 0.0f;  // GRAPE: the row's rate, read once per block
          float mx = m[mt][hh];
          HZ_UNROLL
          for (int nt = 0; nt < kNT; ++nt)
            HZ_UNROLL
            for (int e = 0; e < 2; ++e) {
              const int col = nt * 8 + 2 * tig + e;
              float& val = s[mt][nt][2 * hh + e];
              float L;
              if constexpr (kGen) {
                const Coef2 c = coef2<kGen>(
                    P, si, tok, [&] { return rr[mt][hh]; }, [&] { return rs[mt][hh]; }, sT, te0 - col,
                    tb - static_cast<float>(col), [&] { return pq[mt][hh] - sPos[col]; });
                L = c.mul * val + c.add;
                if (P.alibi) L -= slope2 * c.t;
                if (dist) L -= (rq + sDk[col]) * c.t;  // GRAPE: -|t| (dist_q_i + dist_k_j), log2 e
              } else {  // coef2's arithmetic in the order that keeps the D 64 kernel within 255 registers
                L = si ? rr[mt][hh] * sT[2 * (te0 - col)] * val + sT[2 * (te0 - col) + 1] : rs[mt][hh] * val;
                if (P.alibi) L -= slope2 * (tb - static_cast<float>(col));
              }
              if (fcg != nullptr) L += cq[mt][hh] - sF[col];
              if (masked && !in_cols(kc, col) && !(kGen && in_cols(sc, col))) L = ninf();
              val = L;
              mx = fmaxf_(mx, L);
            }
          mx = fmaxf_(mx, x.shfl_xor(mx, 1));
          mx = fmaxf_(mx, x.shfl_xor(mx, 2));
          const float base = mx == ninf() ? 0.0f : mx;  // a row masked so far keeps p = 0
          const float corr = x.exp2(m[mt][hh] - base);
          m[mt][hh] = mx;
          float sum = 0.0f;
          HZ_UNROLL
          for (int nt = 0; nt < kNT; ++nt)
            HZ_UNROLL
            for (int e = 0; e < 2; ++e) {
              float& val = s[mt][nt][2 * hh + e];
              val = x.exp2(val - base);
              sum += val;
            }
          l[mt][hh] = l[mt][hh] * corr + sum;
          rescale(mt, hh, corr);
        }
    };
    // wgmma: S = Q K^T (this thread's warpgroup's m-tiles, K from sKs), every chain in one batch,
    // issued and committed (the caller waits)
    [[maybe_unused]] auto issue_scores = [&](float(&s)[kMT][kNT][4], const uint16_t* sKs) {
      x.wg_operand_fence(s);
      x.wg_fence();
      HZ_UNROLL
      for (int mt = 0; mt < kMT; ++mt)
        wg_issue_nt<D, kBk>(x, s[mt], x.smem_u32(sQ), kBq, fwd_row0<kMT, kWg, kWG>(warp, mt) & ~63, x.smem_u32(sKs), kBk,
                            false);
      x.wg_commit();
    };
    // o's rows of (mt, hh) times corr
    auto scale_o = [&](int mt, int hh, float corr) {
      HZ_UNROLL
      for (int dt = 0; dt < kDT; ++dt) {
        o[mt][dt][2 * hh] *= corr;
        o[mt][dt][2 * hh + 1] *= corr;
      }
    };

    if constexpr (kOverlap) {
      static_assert(kWg, "the overlapped loop runs on wgmma");
      uint32_t pa[kMT][kBk / 16][4];  // the previous block's P as A fragments, held until P V's wait
      float s[kMT][kNT][4], cr[kMT][2];
      auto step_at = [&](int64_t kb, int64_t n) {
        if constexpr (kWs) {  // K and the tables of block n, V of block n - 1, from the producer
          const int st = static_cast<int>(n & 1);
          x.mbar_wait(bars + 1 + st, static_cast<int>((n >> 1) & 1));
          if (n > 0) x.mbar_wait(bars + 3 + (st ^ 1), static_cast<int>(((n - 1) >> 1) & 1));
          sT = sT0 + st * S::kTabStage;
          sF = sT + 2 * S::kTab;
          sPos = sF + kBk;
          sDk = sPos + kBk;
          const int64_t j0 = kb * kBk;
          return KvStep{sK + st * kBk * W, sV + (st ^ 1) * kBk * W, j0, key_block_masked(blocks, kb, j0, kBk, P.Tk)};
        } else {
          return kv_step<D, kBq, kBk, kSplit, kGen, kWg, true, kCta>(x, P, blocks, kb, n, b, i0, sK, sV, kg, vg, sT, fcg,
                                                                     sF, base, sPos, dist, dkg, sDk);
        }
      };
      // kWs: the consumers' turns to issue (ping-pong: warpgroup w waits on barrier 1 + w, then passes
      // the turn to the other; the last turn of warpgroup 1 passes nothing), and the stages they free
      [[maybe_unused]] const int wg = warp / kWarps;
      auto turn = [&] {
        if constexpr (kWs) x.bar_sync(1 + wg, 2 * kThreads);
      };
      auto pass_turn = [&](bool last) {
        if constexpr (kWs)
          if (wg == 0 || !last) x.bar_arrive(2 - wg, 2 * kThreads);
      };
      auto free_k = [&](int64_t n) {  // K and the tables of step n
        if constexpr (kWs) x.mbar_arrive(bars + 5 + (n & 1));
      };
      auto free_v = [&](int64_t n) {  // V of step n
        if constexpr (kWs) x.mbar_arrive(bars + 7 + (n & 1));
      };
      if constexpr (kWs) {
        if (wg == 1) x.bar_arrive(1, 2 * kThreads);  // warpgroup 0 issues first
        x.mbar_wait(bars, 0);  // Q (and GRAPE's row rates)
      }
      auto issue_s = [&](const uint16_t* sKs) { issue_scores(s, sKs); };
      auto issue_pv = [&](const uint16_t* sVs) {
        x.wg_operand_fence(o);
        x.wg_fence();
        HZ_UNROLL
        for (int mt = 0; mt < kMT; ++mt) wg_issue_rn<D, kBk>(x, o[mt], pa[mt], x.smem_u32(sVs), kBk);
        x.wg_commit();
      };
      auto softmax_s = [&](const KvStep& step) {
        x.wg_operand_fence(s);
        softmax(s, step.j0, step.masked, [&](int mt, int hh, float corr) { cr[mt][hh] = corr; });
      };
      auto rescale_and_pack = [&] {  // after P V's wait: o as of this block's maxima, its P packed
        HZ_UNROLL
        for (int mt = 0; mt < kMT; ++mt) {
          scale_o(mt, 0, cr[mt][0]);
          scale_o(mt, 1, cr[mt][1]);
          HZ_UNROLL
          for (int kk = 0; kk < kBk / 16; ++kk) pack_a(x, pa[mt][kk], s[mt][2 * kk], s[mt][2 * kk + 1]);
        }
      };
      // the first block alone (no P V in flight: the same instructions on every path through the
      // loop below, which ptxas needs to keep the products asynchronous), then the rest
      const KvStep first = step_at(blocks.first(), 0);
      turn();
      issue_s(first.k);
      pass_turn(false);
      x.template wg_wait<0>();
      softmax_s(first);
      free_k(0);
      rescale_and_pack();
      int64_t step_n = 1;  // the step of the block whose S this step forms
      for (int64_t kb = blocks.next(blocks.first()); kb <= blocks.last(); kb = blocks.next(kb), ++step_n) {
        const KvStep step = step_at(kb, step_n);
        turn();
        issue_s(step.k);
        issue_pv(step.v);  // P V of the previous block, behind S in the tensor cores' queue
        pass_turn(false);
        x.template wg_wait<1>();
        softmax_s(step);
        free_k(step_n);
        x.template wg_wait<0>();
        x.wg_operand_fence(o);
        free_v(step_n - 1);
        rescale_and_pack();
      }
      // P V of the last block, once its V has landed (kWs: its copy; else every thread's copies)
      if constexpr (kWs) {
        x.mbar_wait(bars + 3 + ((step_n - 1) & 1), static_cast<int>(((step_n - 1) >> 1) & 1));
      } else {
        x.template cp_wait<0>();
        x.fence_proxy_async();
        x.sync();
      }
      turn();
      issue_pv(sV + ((step_n - 1) & 1) * kBk * W);
      pass_turn(true);
      x.template wg_wait<0>();
      x.wg_operand_fence(o);
    } else {
      for (int64_t kb = blocks.first(), n = 0; kb <= blocks.last(); kb = blocks.next(kb), ++n) {
        const int64_t step_n = kGen ? n : kb - blocks.first();  // the plain variant keeps no counter
        const KvStep step = kv_step<D, kBq, kBk, kSplit, kGen, kWg, false, kCta>(x, P, blocks, kb, step_n, b, i0, sK, sV, kg, vg, sT,
                                                                   fcg, sF, base, sPos, dist, dkg, sDk);
        const uint16_t* sKs = step.k;
        const uint16_t* sVs = step.v;

        float s[kMT][kNT][4];
        if constexpr (kWg) {
          issue_scores(s, sKs);
          x.template wg_wait<0>();
          x.wg_operand_fence(s);
        } else {
          HZ_UNROLL
          for (int mt = 0; mt < kMT; ++mt) {
            HZ_UNROLL
            for (int nt = 0; nt < kNT; ++nt)
              HZ_UNROLL
              for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
            gemm_nt<D, kBk, kSplit>(x, s[mt], sQ, fwd_row0<kMT, kWg, kWG>(warp, mt), sKs, 0);
          }
        }
        softmax(s, step.j0, step.masked, scale_o);
        if constexpr (kWg) {
          uint32_t pa[kMT][kBk / 16][4];  // P as A fragments, held until the wait
          HZ_UNROLL
          for (int mt = 0; mt < kMT; ++mt)
            HZ_UNROLL
            for (int kk = 0; kk < kBk / 16; ++kk) pack_a(x, pa[mt][kk], s[mt][2 * kk], s[mt][2 * kk + 1]);
          x.wg_operand_fence(o);
          x.wg_fence();
          HZ_UNROLL
          for (int mt = 0; mt < kMT; ++mt) wg_issue_rn<D, kBk>(x, o[mt], pa[mt], x.smem_u32(sVs), kBk);
          x.wg_commit();
          x.template wg_wait<0>();
          x.wg_operand_fence(o);
        } else {
          HZ_UNROLL
          for (int mt = 0; mt < kMT; ++mt) gemm_rn<D, kBk, kSplit>(x, o[mt], s[mt], sVs, 0);
        }
      }
    }

    HZ_UNROLL
    for (int mt = 0; mt < kMT; ++mt)
      HZ_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        float sum = l[mt][hh];
        sum += x.shfl_xor(sum, 1);
        sum += x.shfl_xor(sum, 2);
        const int64_t i = i0 + fwd_row0<kMT, kWg, kWG>(warp, mt) + g + 8 * hh;
        if (i >= P.Tq) continue;
        const int64_t row = (b * P.H + h) * P.Tq + i;
        float mx = m[mt][hh], oscale = 1.0f;  // the sink: sum' = sum 2^(m - M) + 2^(z - M), M = max(m, z)
        if (a.sink != nullptr) {
          const float z2 = a.sink[h] * kLog2e;
          if (sum > 0.0f) {
            const float M = fmaxf_(mx, z2);
            oscale = x.exp2(mx - M);
            sum = sum * oscale + x.exp2(z2 - M);
            mx = M;
          } else {  // no key: the sink alone, out 0
            sum = 1.0f;
            mx = z2;
            oscale = 0.0f;
          }
        }
        const float inv = sum > 0.0f ? oscale / sum : 0.0f;
        HZ_UNROLL
        for (int dt = 0; dt < kDT; ++dt)
          store_pair<kSplit>(x, a.out, row * D, dt * 8 + 2 * tig, o[mt][dt][2 * hh] * inv, o[mt][dt][2 * hh + 1] * inv);
        if (tig == 0) a.lse[row] = sum > 0.0f ? (mx + x.log2(sum)) * kLn2 : ninf();
      }
  };
  if constexpr (kWs) {
    if (tid == 0) {
      x.mbar_init(bars, 1 + kFill);
      for (int st = 0; st < 2; ++st) {
        x.mbar_init(bars + 1 + st, 1 + kFill);
        x.mbar_init(bars + 3 + st, 1);
        x.mbar_init(bars + 5 + st, kConsumers);
        x.mbar_init(bars + 7 + st, kConsumers);
      }
      x.mbar_fence_init();
    }
    x.sync();
    if (tid >= kConsumers) {  // the producer warpgroup
      x.template regs_dec<S::kRegsProducer>();
      const int pt = tid - kConsumers;
      const int bh = static_cast<int>(b * P.H + h), bhk = static_cast<int>(b * P.Hkv + hk);
      if (pt == 0) {  // the copies
        // rows row0 .. row0 + R - 1 of matrix mat into a swizzled tile of R rows (sw_offset's layout:
        // column blocks of R x 64, boxes of 64 rows), completing on bar with all of its bytes
        auto copy_tile = [&](uint16_t* dst, const TileMap* map, int R, int row0, int mat, uint64_t* bar) {
          x.mbar_arrive_expect_tx(bar, R * W * 2);
          for (int cb = 0; cb < W / 64; ++cb)
            for (int rb = 0; rb < R / 64; ++rb)
              x.tma_load(dst + cb * R * 64 + rb * 64 * 64, map, 64 * cb, row0 + 64 * rb, mat, bar);
        };
        copy_tile(sQ, &a.q_map, kBq, static_cast<int>(i0), bh, bars);
        int64_t n = 0;
        for (int64_t kb = blocks.first(); kb <= blocks.last(); kb = blocks.next(kb), ++n) {
          const int st = static_cast<int>(n & 1), ph = static_cast<int>((n >> 1) & 1) ^ 1;
          const int row = static_cast<int>(kb * kBk);
          x.mbar_wait(bars + 5 + st, ph);
          copy_tile(sK + st * kBk * W, &a.k_map, kBk, row, bhk, bars + 1 + st);
          x.mbar_wait(bars + 7 + st, ph);
          copy_tile(sV + st * kBk * W, &a.v_map, kBk, row, bhk, bars + 3 + st);
        }
      } else if (pt >= 32) {  // the tables
        const int f = pt - 32;
        if (dist) fill_row_rates<kFill>(x, P, b, h, i0, kBq, sDq, f);
        x.mbar_arrive(bars);
        int64_t n = 0;
        for (int64_t kb = blocks.first(); kb <= blocks.last(); kb = blocks.next(kb), ++n) {
          const int st = static_cast<int>(n & 1);
          x.mbar_wait(bars + 5 + st, static_cast<int>((n >> 1) & 1) ^ 1);
          float* tT = sT0 + st * S::kTabStage;
          const int64_t j0 = kb * kBk;
          if (P.logit == LogitKind::ScaleInvariant)
            fill_si_table<kFill>(x, tT, P, P.q_offset + i0 - (j0 + kBk - 1), kBq + kBk - 1, f);
          fill_key_tables<kGen, kBk, kFill>(f, P, b, j0, fcg, tT + 2 * S::kTab, base, tT + 2 * S::kTab + kBk, dist, dkg,
                                            tT + 2 * S::kTab + 2 * kBk);
          x.mbar_arrive(bars + 1 + st);
        }
      }
    } else {
      x.template regs_inc<S::kRegsConsumer>();
      consume();
    }
  } else {
    if constexpr (kWg) {
      load_tile_sw<W, kCta>(x, sQ, qg, i0, kBq, P.Tq);
      load_tile_sw<W, kCta>(x, sK, kg, blocks.first() * kBk, kBk, P.Tk);
      if (!kOverlap) load_tile_sw<W, kCta>(x, sV, vg, blocks.first() * kBk, kBk, P.Tk);  // else with the first step's head
    } else {
      load_tile<W>(x, sQ, qg, i0, kBq, P.Tq);
      load_tile<W>(x, sK, kg, blocks.first() * kBk, kBk, P.Tk);
      load_tile<W>(x, sV, vg, blocks.first() * kBk, kBk, P.Tk);
    }
    x.cp_commit();
    if (dist) fill_row_rates<kCta>(x, P, b, h, i0, kBq, sDq);  // seen after the loop's first barrier
    consume();
  }
}

// ---- backward: dQ ------------------------------------------------------------------------------------
// The sinks' per-row gradient dLoss/dz_h = -exp(z_h - lse_i) D_i (lse2 = lse_i log2 e, +inf for a row
// without keys and without a sink).
template <class X>
HZ_KBODY float sink_row_grad(X& x, float z, float lse2, float Di) {
  return -x.exp2(z * kLog2e - lse2) * Di;
}

template <int D, bool kSplit = false, bool kWg = false>
struct DqShape {
  static_assert(!(kWg && kSplit), "the wgmma kernels take bf16 inputs");
  static constexpr int kBq = 16 * kWarps, kBk = 64;
  static constexpr int kTab = kBq + kBk - 1;
  static constexpr int kRowBytes = kWg ? 2 * D : Tile<row_width<D, kSplit>()>::kRowBytes;
  // + FoX's c_j, the keys' token positions and GRAPE's rates of the keys and the rows
  static constexpr int kSmem = (kWg ? 1024 : 0) + (2 * kBq + 4 * kBk) * kRowBytes + 2 * kTab * 4 + (3 * kBk + kBq) * 4;
};

// kWg: the products on Hopper's wgmma from swizzled tiles (as the forward's kWg; plain variant, bf16).
template <int D, bool kGen, bool kSplit, bool kWg = false, class X>
HZ_KBODY void dq_cta(X& x, const AttnKernelParams& P, const Args& a, int64_t cta, unsigned char* smem) {
  using S = DqShape<D, kSplit, kWg>;
  constexpr int W = row_width<D, kSplit>();
  constexpr int kBq = S::kBq, kBk = S::kBk, kNT = kBk / 8, kDT = D / 8, kPitch = kWg ? W : Tile<W>::kPitch;
  const int tid = x.tid(), lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
  if constexpr (kWg) smem = align_1k(x, smem);
  const QueryTile tile = query_tile(P, cta, kBq);
  const int64_t b = tile.b, h = tile.h, hk = tile.hk, i0 = tile.i0, i1 = tile.i1;
  const int64_t hrow = (b * P.H + h) * P.Tq;
  const uint16_t* kg = a.k + (b * P.Hkv + hk) * P.Tk * W;
  const uint16_t* vg = a.v + (b * P.Hkv + hk) * P.Tk * W;
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sG = sQ + kBq * kPitch;      // dO
  uint16_t* sK = sG + kBq * kPitch;      // 2 stages
  uint16_t* sV = sK + 2 * kBk * kPitch;  // 2 stages
  float* sT = reinterpret_cast<float*>(sV + 2 * kBk * kPitch);
  float* sF = sT + 2 * S::kTab;  // FoX: the block's c_j log2 e
  float* sPos = sF + kBk;        // token positions: the block's keys' (general variant)
  float* sDk = sPos + kBk;       // GRAPE: the block's keys' rates dist_k log2 e (general variant)
  float* sDq = sDk + kBk;        // GRAPE: the rows' rates dist_q log2 e (general variant)
  const float* fcg = a.fc != nullptr ? a.fc + (b * P.H + h) * P.fox_T : nullptr;
  const bool tok = kGen && P.positions != nullptr;
  const double base = tok ? token_position(P, b, P.q_offset + i0) : 0.0;
  const bool dist = kGen && HZ_DIST(P);
  const double* dkg = dist ? key_rates(P, b, h) : nullptr;

  const Visit<kGen> blocks = visit_keys<kGen>(P, b, h, i0, i1, kBk);
  if (dist) fill_row_rates(x, P, b, h, i0, kBq, sDq);  // seen after the loop's first barrier
  auto load = [&](uint16_t* t, const uint16_t* src, int64_t r0, int R, int64_t rows) {
    if constexpr (kWg) load_tile_sw<W>(x, t, src, r0, R, rows);
    else load_tile<W>(x, t, src, r0, R, rows);
  };
  load(sQ, a.q + hrow * W, i0, kBq, P.Tq);
  load(sG, a.gout + hrow * W, i0, kBq, P.Tq);
  if (blocks.count() > 0) {
    load(sK, kg, blocks.first() * kBk, kBk, P.Tk);
    load(sV, vg, blocks.first() * kBk, kBk, P.Tk);
  }
  x.cp_commit();

  float rr[2], rs[2], lse2[2], Di[2], f[2], dcp[2], cq[2], dfq[2], pq[2], ddq[2];
  int64_t lo[2], hi[2];
  Range32 sr[2];  // the sink tokens (general variant)
  HZ_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    const int64_t i = i0 + warp * 16 + g + 8 * hh;
    const bool in = i < P.Tq;
    const IndexRange kr = in ? key_range(P, b, h, i) : IndexRange{1, 0};
    lo[hh] = kr.lo;
    hi[hh] = kr.hi;
    sr[hh] = range32(kGen && in ? sink_range(P, b, h, i) : IndexRange{1, 0});
    pq[hh] = tok && in ? rel_position(P, b, P.q_offset + i, base) : 0.0f;
    rr[hh] = row_r(P, a.c, b, h, i);
    rs[hh] = rr[hh] * static_cast<float>(P.scale) * kLog2e;
    f[hh] = in ? row_factor<float>(P, b, h, i) : 0.0f;
    const float ls = in ? a.lse[hrow + i] : ninf();
    lse2[hh] = ls == ninf() ? INFINITY : ls * kLog2e;  // rows without keys: every p = 0
    Di[hh] = in ? a.Dvec[hrow + i] : 0.0f;
    dcp[hh] = 0.0f;
    cq[hh] = fcg != nullptr && in ? fcg[P.q_offset + i] * kLog2e : 0.0f;
    dfq[hh] = 0.0f;
    ddq[hh] = 0.0f;
  }
  float acc[kDT][4];
  HZ_UNROLL
  for (int dt = 0; dt < kDT; ++dt)
    HZ_UNROLL
    for (int e = 0; e < 4; ++e) acc[dt][e] = 0.0f;
  const bool si = P.logit == LogitKind::ScaleInvariant, logn = P.logit == LogitKind::LogN;
  const float slope2 = P.alibi ? static_cast<float>(P.slope[h]) * kLog2e : 0.0f;
  const float scale = static_cast<float>(P.scale);

  for (int64_t kb = blocks.first(), n = 0; kb <= blocks.last(); kb = blocks.next(kb), ++n) {
    const int64_t step_n = kGen ? n : kb - blocks.first();  // the plain variant keeps no counter
    const KvStep step = kv_step<D, kBq, kBk, kSplit, kGen, kWg>(x, P, blocks, kb, step_n, b, i0, sK, sV, kg, vg, sT,
                                                               fcg, sF, base, sPos, dist, dkg, sDk);
    const uint16_t* sKs = step.k;
    const uint16_t* sVs = step.v;
    const int64_t j0 = step.j0;
    const bool masked = step.masked;

    float s[kNT][4], dp[kNT][4];
    if constexpr (kWg) wg_scores_and_dp<D, kBk>(x, s, dp, sQ, sKs, sG, sVs, kBq, kBk);
    else scores_and_dp<D, kBk, kSplit>(x, s, dp, sQ, sKs, sG, sVs, warp * 16);  // q . k and dO . v
    HZ_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      const int rloc = warp * 16 + g + 8 * hh;  // block coordinates as in the forward
      const float tb = static_cast<float>(P.q_offset + i0 + rloc - j0);
      const int te0 = rloc + kBk - 1;
      const ColRange kc = cols_in_block(IndexRange{lo[hh], hi[hh]}, j0, kBk);
      const ColRange sc = cols_in_block(sr[hh], j0, kBk);
      HZ_UNROLL
      for (int nt = 0; nt < kNT; ++nt)
        HZ_UNROLL
        for (int e = 0; e < 2; ++e) {
          const int col = nt * 8 + 2 * tig + e;
          float& val = s[nt][2 * hh + e];
          const Coef2 c = coef2<kGen>(
              P, si, tok, [&] { return rr[hh]; }, [&] { return rs[hh]; }, sT, te0 - col, tb - static_cast<float>(col),
              [&] { return pq[hh] - sPos[col]; });
          const float mul2 = c.mul;
          float add2 = c.add;
          if (P.alibi) add2 -= slope2 * c.t;
          if (dist) add2 -= (sDq[rloc] + sDk[col]) * c.t;  // GRAPE (read in place: a register here spills)
          if (fcg != nullptr) add2 += cq[hh] - sF[col];
          const bool vis = !masked || in_cols(kc, col) || (kGen && in_cols(sc, col));
          const float p = vis ? x.exp2(mul2 * val + add2 - lse2[hh]) : 0.0f;
          const float ds = p * (dp[nt][2 * hh + e] - Di[hh]);  // dLoss/dL
          if (logn) dcp[hh] += ds * f[hh] * scale * val;         // L = c ln(n) scale q.k
          dfq[hh] += ds;                                          // FoX: dL_ij/dc_i = 1
          if (dist) ddq[hh] -= ds * c.t;                          // GRAPE: dL_ij/ddist_q_i = -|t_ij|
          val = ds * mul2 * kLn2;                                // dLoss/d(q . k)
        }
    }
    if constexpr (kWg) wg_gemm_rn<D, kBk>(x, acc, s, sKs, kBk);  // dQ += dS' K
    else gemm_rn<D, kBk, kSplit>(x, acc, s, sKs, 0);             // dQ += dS' K
  }
  x.template cp_wait<0>();  // nothing may stay in flight (a CTA whose rows see no key loaded Q, dO only)

  HZ_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    float dc = dcp[hh], df = dfq[hh], dd = ddq[hh];
    dc += x.shfl_xor(dc, 1);
    dc += x.shfl_xor(dc, 2);
    df += x.shfl_xor(df, 1);
    df += x.shfl_xor(df, 2);
    if (dist) {
      dd += x.shfl_xor(dd, 1);
      dd += x.shfl_xor(dd, 2);
    }
    const int64_t i = i0 + warp * 16 + g + 8 * hh;
    if (i >= P.Tq) continue;
    if (a.dfox_q != nullptr && tig == 0) a.dfox_q[hrow + i] = df;
    if (dist && a.ddist_q != nullptr && tig == 0) a.ddist_q[hrow + i] = dd;
    if (a.dz_rows != nullptr && tig == 0)  // -exp(z_h - lse_i) D_i; lse2 holds lse_i log2 e
      a.dz_rows[hrow + i] = sink_row_grad(x, a.sink[h], lse2[hh], Di[hh]);
    HZ_UNROLL
    for (int dt = 0; dt < kDT; ++dt)
      store_pair<kSplit>(x, a.dq, (hrow + i) * D, dt * 8 + 2 * tig, acc[dt][2 * hh], acc[dt][2 * hh + 1]);
    if (a.dc_rows != nullptr && tig == 0) a.dc_rows[hrow + i] = dc;
  }
}

// ---- backward: dK, dV ------------------------------------------------------------------------------
// The one-pass backward's dQ step (kDq): dS'^T of the step (kBk keys x kBq queries, bf16, [hi | lo]
// with kSplit) in shared memory, over the step's dO tile (read by then: dV += P^T dO comes first); the
// warps split dQ_part = dS' K (kBq x D) into kBq / 16 m-tiles of rows and, where there are fewer
// m-tiles than warps, D into kWpm column ranges of kDC.
template <int D, int kBq, bool kSplit>
struct DqPart {
  static constexpr int kWds = kSplit ? 2 * kBq : kBq;
  static constexpr int kMtiles = kBq / 16, kWpm = kWarps / kMtiles, kDC = D / kWpm;
  static_assert(kWarps % kMtiles == 0 && kDC % 16 == 0, "dQ part: warps over m-tiles and column ranges");
  static constexpr int kSmem = 16 * kWarps * Tile<kWds>::kRowBytes;
};

template <int D, int kBqB, bool kSplit = false, bool kWg = false>
struct DkvShape {
  static_assert(!(kWg && kSplit), "the wgmma kernels take bf16 inputs");
  static constexpr int kBk = 16 * kWarps, kBq = kBqB;
  static constexpr int kTab = kBq + kBk - 1;
  // K, V (once), Q and dO (2 stages each), per-row lse2 (with FoX: lse2 - c_i log2 e) / D / r /
  // r*scale*log2e, FoX's key c_j log2 e for the pair's head, the rows' token positions and GRAPE's
  // rates of the rows and of the keys for the pair's head, times log2 e (2 stages), table
  // and the one-pass backward's f_i scale per row for LogN's dc
  static constexpr int kRowData = 7 * kBq + 2 * kBk;
  static constexpr int kRowPos = 4 * kBq + kBk, kRowRq = 5 * kBq + kBk, kRowRk = 6 * kBq + kBk;  // offsets
  static constexpr int kRowF = 6 * kBq + 2 * kBk;
  static constexpr int kRowBytes = kWg ? 2 * D : Tile<row_width<D, kSplit>()>::kRowBytes;
  static constexpr int kSmem = (kWg ? 1024 : 0) + (2 * kBk + 4 * kBq) * kRowBytes + 2 * kRowData * 4 + 2 * kTab * 4;
};

// Adds a warp's part of dQ (rows qb kBq + 16 mt + g (+ 8), columns cc + 8 dt + 2 tig (+ 1): C
// fragments c) to the rows' accumulator as dq_step orders it, or writes dq where this is the last add.
template <int D, int kBq, int kN, bool kSplit, bool kAtomic, class X>
HZ_KBODY void dq_add(X& x, const AttnKernelParams& P, const Args& a, const float (&c)[kN][4], int64_t hrow, int64_t qb,
                     int mt, int cc, bool after, bool last) {
  const int lane = x.tid() & 31, g = lane >> 2, tig = lane & 3;
  HZ_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    const int64_t i = qb * kBq + mt * 16 + g + 8 * hh;
    if (i >= P.Tq) continue;
    float* acc = a.dq_acc + (hrow + i) * D;
    HZ_UNROLL
    for (int dt = 0; dt < kN; ++dt) {
      const int col = cc + dt * 8 + 2 * tig;
      float v0 = c[dt][2 * hh], v1 = c[dt][2 * hh + 1];
      if constexpr (kAtomic) {
        x.atomic_add(acc + col, v0);
        x.atomic_add(acc + col + 1, v1);
      } else {
        if (after) {  // dQ_part + the sum of the blocks after this one
          v0 += x.load_cg(acc + col);
          v1 += x.load_cg(acc + col + 1);
        }
        if (last) {
          store_pair<kSplit>(x, a.dq, (hrow + i) * D, col, v0, v1);
        } else {
          acc[col] = v0;
          acc[col + 1] = v1;
        }
      }
    }
  }
}

// The one-pass backward's dQ step (dkv_cta with kDq) for the pair (head h, query block qb) of key
// block kb: dp holds this warp's dS'^T (16 keys x kBq queries; dS' = dLoss/d(q . k)); it goes to
// shared memory, dQ_part = dS' K is formed from there (A fragments by ldmatrix.trans) and added to
// the query block's accumulator in its turn. kWg: dS'^T goes to a swizzled tile instead, written with
// st.shared and fenced into the async proxy, which wgmma reads as an M-major A operand (imm-trans-a:
// the queries, wgmma's 64 rows of M, run along the tile's 128-byte rows) against K read N-major, one
// product of 64 columns at a time (32 accumulator registers beside dK's and dV's).
// Ordered accumulation: the key blocks that visit a query block add to it from the last one back,
// each once, so every row's dQ is the same sum in the same order on every run. A block waits until
// the turn word holds (its successor + 1), 0 for the first to add, adds (the first stores) and passes
// the turn on (its own kb + 1); the last to add writes dq itself (bf16, or f32 in the split kernels)
// and passes nothing on. In the plain variant the key blocks that visit a query block are
// consecutive (rows see intervals whose ends only grow, and so do the query blocks a key block
// visits), so a block's successor is kb + 1 when kb + 1 visits the block, else there is none. In the
// general variant they are not (sink tokens' blocks, then a band; a chunk's; a prefix's): the
// successor is the next set bit of the query block's map (visit_map, filled from the dK/dV loop's own
// visits, so the two can never disagree).
// Deadlock freedom: a block waits only on blocks of the same (b, kv head) with a larger kb, and
// those start first: the grid takes a head's key blocks from the last one back, and the kernel
// takes its tile from a counter when it starts (mma_device.cuh), not from blockIdx, so "started
// earlier" holds whatever order the GPU starts blocks in. A started block runs to its end, and the
// block with the largest kb among those started waits on none.
// kAtomic (the kernel lab's variant 5 only, to size what the order costs): FlashAttention-2's own
// scheme instead, every part added with a float atomic into a zeroed accumulator that the caller
// converts to dq afterwards; no turns, and not deterministic (the order of the adds varies).
// FoX's part of row i in the one-pass backward, sum_j dL_ij, over a pair step's keys (dkv_cta's loop,
// added in dq_step's turn): this thread's query columns nt 8 + 2 tig + e, over its two keys. (The
// closed form D_i (1 - sum_j p_ij) would not do: D_i is formed from the rounded output, and FoX's
// gradient, a suffix sum over positions of the rows' parts less the keys', needs the rows' parts
// summed from the same dL_ij as the keys'.)
// GRAPE's rows' parts, -sum_j dL_ij |t_ij| (general variant), likewise: sum 1.
template <int kBq>
struct RowSums {
  bool on[2];                // FoX's (dfox_q), GRAPE's (ddist_q)
  float v[2][kBq / 8][2];
};

// The general variant's map for the one-pass backward: the query blocks key block kb of head h
// visits (the dK/dV loop's own visit_queries) get bit kb in their row of words (W per query block);
// `mark(word, bit)` sets it (an atomic or on the device, a plain or on the host).
template <int kBq, int kBk, class Mark>
HZ_KBODY void visit_map(const AttnKernelParams& P, int64_t b, int64_t h, int64_t kb, Mark mark) {
  const int64_t nkb = num_blocks(P.Tk, kBk), W = (nkb + 31) / 32;
  const Visit<true> v = visit_queries<true>(P, b, h, kb * kBk, imin((kb + 1) * kBk, P.Tk) - 1, kBq);
  for (int64_t qb = v.first(); qb <= v.last(); qb = v.next(qb))
    mark(((b * P.H + h) * num_blocks(P.Tq, kBq) + qb) * W + kb / 32, 1u << (kb % 32));
}
HZ_KBODY int lowest_bit(unsigned m) {
#if defined(__CUDA_ARCH__)
  return __ffs(static_cast<int>(m)) - 1;
#else
  return __builtin_ctz(m);
#endif
}

template <int D, int kBq, bool kSplit, bool kAtomic, bool kWg, bool kRows, bool kGen, class X>
HZ_KBODY void dq_step(X& x, const AttnKernelParams& P, const Args& a, uint16_t* sDS, const uint16_t* sK,
                      const float (&dp)[kBq / 8][4], const RowSums<kRows ? kBq : 8>& rs, float* sRS, int64_t b,
                      int64_t h, int64_t kb, int64_t qb) {
  using Q = DqPart<D, kBq, kSplit>;
  constexpr int W = row_width<D, kSplit>(), kBk = 16 * kWarps, kPds = Tile<Q::kWds>::kPitch;
  // dS'^T fits in a stage's dO tile (so both backwards take the same shared memory)
  static_assert(kWg || Q::kSmem <= kBq * Tile<W>::kRowBytes, "dS'^T over dO");
  static_assert(!kWg || (kBq == 64 && kBk == 64 && !kSplit), "the wgmma dQ part: 64 x 64 dS', bf16, over dO (64 x D)");
  const int tid = x.tid(), lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
  HZ_UNROLL
  for (int hh = 0; hh < 2; ++hh) {  // this warp's keys: rows warp * 16 + g + 8 hh of dS'^T
    const int kr = warp * 16 + g + 8 * hh;
    uint32_t* row = reinterpret_cast<uint32_t*>(sDS + kr * kPds);
    HZ_UNROLL
    for (int nt = 0; nt < kBq / 8; ++nt) {
      const float v0 = dp[nt][2 * hh], v1 = dp[nt][2 * hh + 1];
      const int r = nt * 8 + 2 * tig;
      if constexpr (kWg) {
        x.store_shared(reinterpret_cast<uint32_t*>(sDS + sw_offset(kr, r, kBk)), x.pack_bf16(v0, v1));
      } else {
        row[r / 2] = x.pack_bf16(v0, v1);
        if constexpr (kSplit) row[(kBq + r) / 2] = x.pack_bf16(v0 - x.round_bf16(v0), v1 - x.round_bf16(v1));
      }
    }
  }
  if constexpr (kWg) x.fence_proxy_async();  // the stores above are wgmma's operand (the barrier below)
  constexpr int kSums = kGen ? 2 : 1;  // GRAPE's in the general variant only
  if constexpr (kRows) {  // the rows' sums over the warp's 16 keys (lanes of one tig), into sRS[sum][warp]
    HZ_UNROLL
    for (int k = 0; k < kSums; ++k) {
      if (!rs.on[k]) continue;
      HZ_UNROLL
      for (int nt = 0; nt < kBq / 8; ++nt)
        HZ_UNROLL
        for (int e = 0; e < 2; ++e) {
          float f = rs.v[k][nt][e];
          HZ_UNROLL
          for (int m = 4; m <= 16; m <<= 1) f += x.shfl_xor(f, m);
          if (g == 0) sRS[(k * kWarps + warp) * kBq + nt * 8 + 2 * tig + e] = f;
        }
    }
  }
  // the key blocks that add to qb before this one (its successor: the next larger one that visits
  // qb) and after it
  const int64_t nkb = num_blocks(P.Tk, kBk);
  int64_t succ = -1;
  bool pred = false;
  if constexpr (kGen) {  // not consecutive here (a sink block, then the band): the map (visit_map)
    const int64_t W = (nkb + 31) / 32;
    const unsigned* row = a.dq_visit + ((b * P.H + h) * num_blocks(P.Tq, kBq) + qb) * W;
    const int64_t kw = kb / 32;
    const unsigned kbit = 1u << (kb % 32);
    for (int64_t w = 0; w < W && (succ < 0 || !pred); ++w) {
      const unsigned m = row[w];
      const unsigned below = w < kw ? m : w == kw ? m & (kbit - 1u) : 0u;
      const unsigned above = w > kw ? m : w == kw ? m & ~(kbit | (kbit - 1u)) : 0u;
      pred = pred || below != 0u;
      if (succ < 0 && above != 0u) succ = w * 32 + lowest_bit(above);
    }
  } else {  // consecutive: kb + 1 and kb - 1
    auto visits = [&](int64_t k) {  // whether key block k visits qb
      if (k < 0 || k >= nkb) return false;
      const BlockSpan sp = query_blocks(P, b, h, k * kBk, imin((k + 1) * kBk, P.Tk) - 1, kBq);
      return qb >= sp.first && qb <= sp.last;
    };
    succ = visits(kb + 1) ? kb + 1 : -1;
    pred = visits(kb - 1);
  }
  const bool after = succ >= 0, last = !pred;
  unsigned* turn = a.dq_turn + (b * P.H + h) * num_blocks(P.Tq, kBq) + qb;
  if constexpr (!kAtomic)
    if (tid == 0) x.wait_turn(turn, after ? static_cast<unsigned>(succ + 1) : 0u);
  x.sync();  // dS'^T (and the rows' sums) complete, and the query block's turn is this block's
  const int64_t hrow = (b * P.H + h) * P.Tq;
  if constexpr (kRows) {  // the warps' parts in order, added in the turn to the outputs themselves (zeroed first)
    for (int k = 0; k < kSums; ++k)
      for (int r = tid; rs.on[k] && r < kBq; r += kThreads) {
        const int64_t i = qb * kBq + r;
        if (i >= P.Tq) continue;
        const float* w = sRS + k * kWarps * kBq + r;
        float v = ((w[0] + w[kBq]) + w[2 * kBq]) + w[3 * kBq];
        float* out = (k == 0 ? a.dfox_q : a.ddist_q) + hrow + i;
        if constexpr (kAtomic) {
          x.atomic_add(out, v);
        } else {
          if (after) v += x.load_cg(out);
          *out = v;
        }
      }
  }
  if constexpr (kWg) {
    // the warpgroup's 64 query rows (warp w: rows 16 w ..) x 64 columns per product
    const uint32_t sa = x.smem_u32(sDS), sb = x.smem_u32(sK);
#if defined(__CUDACC__)
#pragma unroll 1
#endif
    for (int cc = 0; cc < D; cc += 64) {
      float c[8][4];
      x.wg_operand_fence(c);
      x.wg_fence();
      HZ_UNROLL
      for (int kk = 0; kk < kBk / 16; ++kk)
        x.template wgmma_ss<64, 1, 1>(c, desc_mn(sa, kBk, kk), desc_mn(sb + (cc >> 6) * kBk * 128, kBk, kk),
                                      kk > 0 ? 1 : 0);
      x.wg_commit();
      x.template wg_wait<0>();
      x.wg_operand_fence(c);
      dq_add<D, kBq, 8, kSplit, kAtomic>(x, P, a, c, hrow, qb, warp, cc, after, last);
    }
  } else {
    // this warp's 16 rows (m-tile mt) and kDC columns from c0, in chunks of kCC columns, one at a time
    // (at D 128 dK and dV hold 128 accumulator registers: 32-column chunks spill 160 bytes, 64-column
    // ones 200, the whole row 344; sm_90, tests/kernel_registers.sh)
    constexpr int kCC = Q::kDC <= 64 ? Q::kDC : 32;
    const int mt = warp % Q::kMtiles, c0 = (warp / Q::kMtiles) * Q::kDC;
#if defined(__CUDACC__)
#pragma unroll 1
#endif
    for (int cc = c0; cc < c0 + Q::kDC; cc += kCC) {
      float c[kCC / 8][4];
      HZ_UNROLL
      for (int dt = 0; dt < kCC / 8; ++dt)
        HZ_UNROLL
        for (int e = 0; e < 4; ++e) c[dt][e] = 0.0f;
      HZ_UNROLL
      for (int kk = 0; kk < kBk / 16; ++kk) {
        uint32_t af[4], al[4];
        x.ldsm_x4_t(af, sDS + frag_bn_offset<Q::kWds>(lane, kk * 16, mt * 16));
        if constexpr (kSplit) x.ldsm_x4_t(al, sDS + frag_bn_offset<Q::kWds>(lane, kk * 16, kBq + mt * 16));
        HZ_UNROLL
        for (int np = 0; np < kCC / 16; ++np) {
          uint32_t bf[4], bl[4];
          x.ldsm_x4_t(bf, sK + frag_a_offset<W>(lane, kk * 16, cc + np * 16));
          if constexpr (kSplit) x.ldsm_x4_t(bl, sK + frag_a_offset<W>(lane, kk * 16, D + cc + np * 16));
          mma_n2<kSplit>(x, c[2 * np], c[2 * np + 1], af, al, bf, bl);
        }
      }
      dq_add<D, kBq, kCC / 8, kSplit, kAtomic>(x, P, a, c, hrow, qb, mt, cc, after, last);
    }
  }
  x.sync();  // every add done, and sDS read, before the turn passes on
  if constexpr (!kAtomic)
    if (tid == 0 && !last) x.post_turn(turn, static_cast<unsigned>(kb + 1));
}

// kFox: the FoX terms (a.fc set), a template argument because the D 128 kernel is at the 255-register
// limit and the key sums' registers alone would make it spill when FoX is off; the general variant
// (kGen) reads a.fc at run time instead. kDq: the one-pass backward (dq_step; both variants), whose
// grid takes a head's key blocks from the last one back: 1 for calls without FoX, LogN's gradient
// or GRAPE's rates, 2 for those with them (FoX read at run time; its rows' parts, sum_j dL_ij, and
// GRAPE's as RowSums added in dQ's turns: 16 registers each, which would spill at D 128 in every
// call; LogN's dc_h = sum_ij dL_ij f_i scale q_i . k_j summed over each key's queries per head, as
// FoX's key sums are, into a.dc_rows as B x H x Tk parts). kAtomic: its atomic version (dq_step).
// kWg: the products on Hopper's wgmma from swizzled tiles (as the forward's kWg; bf16): S^T and dP^T
// with K and V as the A tiles, dV and dK with dO and Q read N-major, and with kDq dQ's part (dq_step).
template <int D, int kBqB, bool kFox, bool kGen, bool kSplit, int kDq = 0, bool kAtomic = false, bool kWg = false,
          class X>
HZ_KBODY void dkv_cta(X& x, const AttnKernelParams& P, const Args& a, int64_t cta, unsigned char* smem) {
  static_assert(!kDq || !kFox, "the one-pass backward: FoX at run time");
  constexpr bool kRows = kDq == 2;  // the one pass with FoX's and GRAPE's rows' sums and LogN's dc
  using S = DkvShape<D, kBqB, kSplit, kWg>;
  constexpr int W = row_width<D, kSplit>();
  constexpr int kBq = S::kBq, kBk = S::kBk, kNT = kBq / 8, kDT = D / 8, kPitch = kWg ? W : Tile<W>::kPitch;
  const int tid = x.tid(), lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
  if constexpr (kWg) smem = align_1k(x, smem);
  const int64_t nkb = num_blocks(P.Tk, kBk);
  const KeyTile tile = key_tile(P, kDq ? cta / nkb * nkb + (nkb - 1 - cta % nkb) : cta, kBk);
  const int64_t b = tile.b, hk = tile.hk, j0 = tile.j0, j1 = tile.j1;
  const int64_t krow = (b * P.Hkv + hk) * P.Tk;
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sV = sK + kBk * kPitch;
  uint16_t* sQ = sV + kBk * kPitch;    // 2 stages
  uint16_t* sG = sQ + 2 * kBq * kPitch;  // 2 stages
  float* sRow = reinterpret_cast<float*>(sG + 2 * kBq * kPitch);  // [2][kRowData]
  float* sT = sRow + 2 * S::kRowData;
  const bool fox = kFox || ((kGen || kRows) && a.fc != nullptr);
  const bool logn_keys = kRows && a.dc_rows != nullptr;  // the one pass: LogN's dc parts per key
  const bool tok = kGen && P.positions != nullptr;
  const bool dist = kGen && HZ_DIST(P);
  const double base = tok ? token_position(P, b, j0) : 0.0;  // token positions relative to the first key's

  // the (head, query block) pairs of the group, in order: heads h = hk G + gh, their query blocks
  int64_t n_pairs = 0;
  for (int64_t gh = 0; gh < P.G; ++gh) n_pairs += visit_queries<kGen>(P, b, hk * P.G + gh, j0, j1, kBq).count();
  if (tid == 0) x.add_counter(&a.counters[2], static_cast<Counter>(n_pairs));
  // cursor over the pairs
  struct Cursor {
    int64_t gh, qb;
    Visit<kGen> blocks;
  };
  auto first_pair = [&](int64_t gh) {
    Cursor c{gh, 0, {}};
    for (; c.gh < P.G; ++c.gh) {
      c.blocks = visit_queries<kGen>(P, b, hk * P.G + c.gh, j0, j1, kBq);
      if (c.blocks.count() > 0) {
        c.qb = c.blocks.first();
        return c;
      }
    }
    return c;
  };
  auto next_pair = [&](Cursor c) {
    const int64_t nq = c.blocks.next(c.qb);
    if (nq <= c.blocks.last()) {
      c.qb = nq;
      return c;
    }
    return first_pair(c.gh + 1);
  };
  // loads Q, dO tiles of a pair into a stage, and its per-row data (plain stores)
  auto load = [&](uint16_t* t, const uint16_t* src, int64_t r0, int R, int64_t rows) {
    if constexpr (kWg) load_tile_sw<W>(x, t, src, r0, R, rows);
    else load_tile<W>(x, t, src, r0, R, rows);
  };
  auto load_pair = [&](const Cursor& c, int stage) {
    const int64_t h = hk * P.G + c.gh, hrow = (b * P.H + h) * P.Tq, q0 = c.qb * kBq;
    load(sQ + stage * kBq * kPitch, a.q + hrow * W, q0, kBq, P.Tq);
    load(sG + stage * kBq * kPitch, a.gout + hrow * W, q0, kBq, P.Tq);
    float* rowd = sRow + stage * S::kRowData;
    for (int r = tid; r < kBq; r += kThreads) {
      const int64_t i = q0 + r;
      const bool in = i < P.Tq;
      const float rr = row_r(P, a.c, b, h, i);
      rowd[r] = in ? a.lse[hrow + i] * kLog2e : 0.0f;  // rows that see these keys have a finite lse
      rowd[kBq + r] = in ? a.Dvec[hrow + i] : 0.0f;
      rowd[2 * kBq + r] = rr;
      rowd[3 * kBq + r] = rr * static_cast<float>(P.scale) * kLog2e;
    }
    if (fox) {  // c_i joins the row's lse term (lse_i - c_i), the keys' c_j go in row 4
      const float* fch = a.fc + (b * P.H + h) * P.fox_T;
      for (int r = tid; r < kBq; r += kThreads)
        if (q0 + r < P.Tq) rowd[r] -= fch[P.q_offset + q0 + r] * kLog2e;
      for (int c = tid; c < kBk; c += kThreads) rowd[4 * kBq + c] = j0 + c < P.Tk ? fch[j0 + c] * kLog2e : 0.0f;
    }
    if (logn_keys)  // f_i scale
      for (int r = tid; r < kBq; r += kThreads)
        rowd[S::kRowF + r] = q0 + r < P.Tq ? row_factor<float>(P, b, h, q0 + r) * static_cast<float>(P.scale) : 0.0f;
    if (tok)  // the rows' token positions after row 4
      for (int r = tid; r < kBq; r += kThreads)
        rowd[S::kRowPos + r] = q0 + r < P.Tq ? rel_position(P, b, P.q_offset + q0 + r, base) : 0.0f;
    if (dist) {  // GRAPE's rates of the rows and of the keys for head h
      fill_row_rates(x, P, b, h, q0, kBq, rowd + S::kRowRq);
      const double* dkh = key_rates(P, b, h);
      for (int c = tid; c < kBk; c += kThreads)
        rowd[S::kRowRk + c] = dkh != nullptr && j0 + c < P.Tk ? static_cast<float>(dkh[j0 + c]) * kLog2e : 0.0f;
    }
  };

  load(sK, a.k + krow * W, j0, kBk, P.Tk);
  load(sV, a.v + krow * W, j0, kBk, P.Tk);
  Cursor cur = first_pair(0);
  if (n_pairs > 0) load_pair(cur, 0);
  x.cp_commit();

  float dk[kDT][4], dv[kDT][4];
  HZ_UNROLL
  for (int dt = 0; dt < kDT; ++dt)
    HZ_UNROLL
    for (int e = 0; e < 4; ++e) dk[dt][e] = dv[dt][e] = 0.0f;
  float dfk[2] = {0.0f, 0.0f};  // FoX: -sum_i dL_ij of this thread's keys, for the current head
  float dck[2] = {0.0f, 0.0f};  // the one pass, LogN: sum_i dL_ij f_i scale q_i . k_j, likewise
  float ddk[2] = {0.0f, 0.0f};  // GRAPE: -sum_i dL_ij |t_ij| of this thread's keys, for the current head
  float pk[2];                  // token positions: this thread's keys'
  HZ_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    const int64_t j = j0 + warp * 16 + g + 8 * hh;
    pk[hh] = tok && j < P.Tk ? rel_position(P, b, j, base) : 0.0f;
  }
  const bool si = P.logit == LogitKind::ScaleInvariant;

  for (int64_t n = 0; n < n_pairs; ++n) {
    const int st = static_cast<int>(n & 1);
    const int64_t h = hk * P.G + cur.gh, q0 = cur.qb * kBq;
    const int64_t t0 = P.q_offset + q0 - (j0 + kBk - 1);  // smallest distance of the pair
    const Cursor nxt = next_pair(cur);
    pipeline_step<kWg>(x, n + 1 < n_pairs, [&] { load_pair(nxt, st ^ 1); }, P, sT, t0, S::kTab, [] {});
    const uint16_t* sQs = sQ + st * kBq * kPitch;
    const uint16_t* sGs = sG + st * kBq * kPitch;
    const float* rowd = sRow + st * S::kRowData;
    const bool masked = cur.blocks.boundary(cur.qb) || q0 + kBq > P.Tq || j0 + kBk > P.Tk;
    const float slope2 = P.alibi ? static_cast<float>(P.slope[h]) * kLog2e : 0.0f;

    RowSums<kRows ? kBq : 8> rs{};  // the one pass: FoX's and GRAPE's rows' sums (dq_step)
    rs.on[0] = kRows && fox && a.dfox_q != nullptr;
    rs.on[1] = kRows && dist && a.ddist_q != nullptr;
    float s[kNT][4], dp[kNT][4];  // rows: this warp's 16 keys; columns: the kBq queries
    if constexpr (kWg) wg_scores_and_dp<D, kBq>(x, s, dp, sK, sQs, sV, sGs, kBk, kBq);
    else scores_and_dp<D, kBq, kSplit>(x, s, dp, sK, sQs, sV, sGs, warp * 16);  // k . q and v . dO
    HZ_UNROLL
    for (int hh = 0; hh < 2; ++hh) {
      // rows are keys here: key j = j0 + kloc, column r is query q0 + r, distance t = tb + r
      const int kloc = warp * 16 + g + 8 * hh;
      const int64_t j = j0 + kloc;
      const IndexRange qr = j < P.Tk ? query_range(P, b, h, j) : IndexRange{1, 0};
      const Range32 sq = range32(kGen && j < P.Tk ? sink_rows(P, b, h, j) : IndexRange{1, 0});  // as a sink token
      const float tb = static_cast<float>(P.q_offset + q0 - j);
      const int te0 = kBk - 1 - kloc;  // table entry of column r: te0 + r
      const ColRange qc = cols_in_block(qr, q0, kBq), sc = cols_in_block(sq, q0, kBq);
      const float cj = fox ? rowd[4 * kBq + kloc] : 0.0f;  // FoX: L_ij += c_i - c_j (c_i is in rowd[r])
      HZ_UNROLL
      for (int nt = 0; nt < kNT; ++nt)
        HZ_UNROLL
        for (int e = 0; e < 2; ++e) {
          const int r = nt * 8 + 2 * tig + e;
          float& val = s[nt][2 * hh + e];
          const Coef2 c = coef2<kGen>(
              P, si, tok, [&] { return rowd[2 * kBq + r]; }, [&] { return rowd[3 * kBq + r]; }, sT, te0 + r,
              tb + static_cast<float>(r), [&] { return rowd[S::kRowPos + r] - pk[hh]; });
          const float mul2 = c.mul;
          float add2 = c.add;
          if (P.alibi) add2 -= slope2 * c.t;
          if (dist) add2 -= (rowd[S::kRowRq + r] + rowd[S::kRowRk + kloc]) * c.t;  // GRAPE
          if (fox) add2 -= cj;
          const bool vis = !masked || in_cols(qc, r) || (kGen && in_cols(sc, r));
          const float p = vis ? x.exp2(mul2 * val + add2 - rowd[r]) : 0.0f;
          const float ds = p * (dp[nt][2 * hh + e] - rowd[kBq + r]);
          if (fox) dfk[hh] -= ds;                // FoX: dL_ij/dc_j = -1
          if constexpr (kRows) {
            if (rs.on[0]) rs.v[0][nt][e] += ds;                        // FoX: dL_ij/dc_i = 1
            if (kGen && rs.on[1]) rs.v[1][nt][e] -= ds * c.t;          // GRAPE: dL_ij/ddist_q_i = -|t_ij|
            if (logn_keys) dck[hh] += ds * val * rowd[S::kRowF + r];  // LogN: L = c f_i scale q.k
          }
          if (dist) ddk[hh] -= ds * c.t;         // GRAPE: dL_ij/ddist_k_j = -|t_ij|
          val = p;                               // P^T for dV
          dp[nt][2 * hh + e] = ds * mul2 * kLn2;  // dS'^T for dK
        }
    }
    if constexpr (kWg) {  // dV += P^T dO and dK += dS'^T Q, one batch
      wg_gemm_rn<D, kBq, true>(x, dv, s, sGs, dk, dp, sQs, kBq);
    } else {
      gemm_rn<D, kBq, kSplit>(x, dv, s, sGs, 0);   // dV += P^T dO
      gemm_rn<D, kBq, kSplit>(x, dk, dp, sQs, 0);  // dK += dS'^T Q
    }
    if constexpr (kDq) {  // dQ += dS' K, in the query block's turn; dS'^T over this stage's dO
      x.sync();  // every warp is done with dO (dV's product) before it is overwritten
      // (dS'^T over this stage's dO, FoX's rows' parts over its Q: both products are done)
      static_assert(2 * kWarps * kBq * 4 <= kBq * kPitch * 2, "the rows' sums' parts over a Q tile");
      dq_step<D, kBq, kSplit, kAtomic, kWg, kRows, kGen>(x, P, a, sG + st * kBq * kPitch, sK, dp, rs,
                                                   reinterpret_cast<float*>(sQ + st * kBq * kPitch), b, h, j0 / kBk,
                                                   cur.qb);
    }
    // the loop leaves head h: its key sums are done (FoX's -sum_i dL_ij, GRAPE's -sum_i dL_ij |t_ij|);
    // out is null when they need no gradient (FoX's c_i - c_j still shapes P)
    auto flush_key_sums = [&](float (&acc)[2], float* out) {
      HZ_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        float v = acc[hh];
        v += x.shfl_xor(v, 1);
        v += x.shfl_xor(v, 2);
        const int64_t j = j0 + warp * 16 + g + 8 * hh;
        if (out != nullptr && tig == 0 && j < P.Tk) out[(b * P.H + h) * P.Tk + j] = v;
        acc[hh] = 0.0f;
      }
    };
    const bool leaves = n + 1 == n_pairs || nxt.gh != cur.gh;
    if (fox && leaves) flush_key_sums(dfk, a.dfox_k);
    if (kRows && logn_keys && leaves) flush_key_sums(dck, a.dc_rows);
    if (dist && leaves) flush_key_sums(ddk, a.ddist_k);
    cur = nxt;
  }
  x.template cp_wait<0>();

  HZ_UNROLL
  for (int hh = 0; hh < 2; ++hh) {
    const int64_t j = j0 + warp * 16 + g + 8 * hh;
    if (j >= P.Tk) continue;
    HZ_UNROLL
    for (int dt = 0; dt < kDT; ++dt) {
      store_pair<kSplit>(x, a.dk, (krow + j) * D, dt * 8 + 2 * tig, dk[dt][2 * hh], dk[dt][2 * hh + 1]);
      store_pair<kSplit>(x, a.dv, (krow + j) * D, dt * 8 + 2 * tig, dv[dt][2 * hh], dv[dt][2 * hh + 1]);
    }
  }
}

}  // namespace hz::attn::mma
