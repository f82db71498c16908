// Horizon: the reference CUDA kernels of the fused attention op — simple, for every floating dtype
// (f32, f64, bf16 loaded to f32) and every head dim up to kRefMaxD, accumulating in A = f32 (f64
// for f64). They are the CUDA definition the tensor-core kernels are validated against, and the
// path for f32 (parity with the CPU), f64 and head dims the tensor-core kernels do not take.
//
// One warp per query row (forward, dQ) or per key row (dK/dV): each lane takes every 32nd key (or
// query) of the row's visible intervals from tiling.h (key_range and the sink tokens' sink_range /
// query_range and sink_rows, the second interval first), computes its logit
// with tiling.h's row_factor / logit_coef, and the warp then accumulates the D-wide products
// key by key in a fixed order (lane l owns dims l, l + 32, ...). The forward is two passes (row max,
// then the exponentials and the weighted sum) rather than an online softmax; the backward
// recomputes the probabilities from the row log-sum-exp. dK/dV of a kv head sum over the G query
// heads of its group in head order, so no float atomics anywhere; only the integer block counters
// use atomicAdd. The blocks a CTA counts are tiling.h's key_block_spans / query_block_spans for the config's
// tiles, the same the CPU kernel visits.
#include <math.h>

#include "attention/cuda/attn_cuda.h"
#include "core/cuda/common.cuh"

namespace hz::attn::cuda_impl {

namespace {

using hz::cuda::ptr;
using hz::cuda::warp_max;
using hz::cuda::warp_sum;
using math::load;
using math::store;

constexpr int kWarps = 4;             // rows per CTA in flight (one per warp)
constexpr int kPer = kRefMaxD / 32;   // dims per lane

template <class A, class T>
__device__ __forceinline__ void load_row(A* dst, const T* src, int64_t D, int lane) {
  for (int64_t d = lane; d < D; d += 32) dst[d] = static_cast<A>(load(src[d]));
}
template <class A, class T>
__device__ __forceinline__ A dot_row(const A* a, const T* b, int64_t D) {
  A s = A(0);
  for (int64_t d = 0; d < D; ++d) s += a[d] * static_cast<A>(load(b[d]));
  return s;
}
template <class A>
__device__ __forceinline__ A row_scale(const AttnKernelParams& P, const A* c, A factor, int64_t h) {
  return P.logit == LogitKind::LogN ? factor * c[h] : factor;
}
// acc[u] += sum over l < n of w_l rows_l[lane + 32 u], where w_l is lane l's weight and rows_l the
// l-th row (length D) from `rows`: the warp's fixed-order accumulation of n <= 32 weighted rows.
template <class A, class T>
__device__ __forceinline__ void accumulate_rows(A (&acc)[kPer], A w, const T* rows, int n, int64_t D, int lane) {
  for (int l = 0; l < n; ++l) {
    const A wl = __shfl_sync(0xffffffffu, w, l);
    const T* row = rows + l * D;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int64_t d = lane + 32 * u;
      if (d < D) acc[u] += wl * static_cast<A>(load(row[d]));
    }
  }
}
// Lanes holding an entry of the 32-wide chunk starting at c of the interval [c, hi].
__device__ __forceinline__ int chunk(int64_t c, int64_t hi) { return hi - c + 1 < 32 ? static_cast<int>(hi - c + 1) : 32; }

template <class A>
__device__ __forceinline__ A neg_inf() {
  return -static_cast<A>(INFINITY);
}

// out, lse. Grid: B * H * (query blocks of block_q rows); CTA (b, h, query block).
template <class T, class A>
__global__ void __launch_bounds__(kWarps * 32)
    ref_fwd_kernel(const AttnKernelParams P, const T* __restrict__ q, const T* __restrict__ k,
                   const T* __restrict__ v, const A* __restrict__ c, const A* __restrict__ fc, T* __restrict__ out,
                   A* __restrict__ lse, Counter* __restrict__ counters) {
  extern __shared__ unsigned char smem_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  A* qs = reinterpret_cast<A*>(smem_raw) + warp * P.D;  // q_i (D)
  const QueryTile tile = query_tile(P, blockIdx.x, P.block_q);
  const int64_t b = tile.b, h = tile.h, hk = tile.hk, i0 = tile.i0, i1 = tile.i1;
  if (threadIdx.x == 0) {
    const BlockSpans s = key_block_spans(P, b, h, i0, i1, P.block_k);
    atomicAdd(&counters[0], static_cast<Counter>(spans_blocks(s)));
    atomicAdd(&counters[1], static_cast<Counter>(spans_blocks(s) - spans_full_blocks(s)));
  }
  const T* kh = k + (b * P.Hkv + hk) * P.Tk * P.D;  // (Tk, D)
  const T* vh = v + (b * P.Hkv + hk) * P.Tk * P.D;  // (Tk, D)
  const A scale = static_cast<A>(P.scale);
  for (int64_t i = i0 + warp; i <= i1; i += kWarps) {
    const int64_t row = (b * P.H + h) * P.Tq + i;
    T* oi = out + row * P.D;
    __syncwarp();
    load_row(qs, q + row * P.D, P.D, lane);
    __syncwarp();
    const IndexRange ranges[2] = {sink_range(P, b, h, i), key_range(P, b, h, i)};  // sinks first: keys in order
    if (range_empty(ranges[0]) && range_empty(ranges[1])) {
      for (int64_t d = lane; d < P.D; d += 32) oi[d] = store<T>(A(0));
      if (lane == 0) lse[row] = neg_inf<A>();
      continue;
    }
    const A r = row_scale<A>(P, c, row_factor<A>(P, b, h, i), h);
    const int64_t pos = P.q_offset + i;
    const A* fch = fc ? fc + (b * P.H + h) * P.fox_T : nullptr;  // FoX: L_ij += c_pos - c_j
    const A fci = fch ? fch[pos] : A(0);
    auto logit = [&](int64_t j) {
      const LogitCoef<A> cf = logit_coef<A>(P, h, r, pair_distance<A>(P, b, pos, j), dist_rate<A>(P, b, h, i, j));
      return cf.mul * (scale * dot_row(qs, kh + j * P.D, P.D)) + cf.add + (fch ? fci - fch[j] : A(0));
    };
    A m = neg_inf<A>();
    for (const IndexRange& kr : ranges)
      for (int64_t j = kr.lo + lane; j <= kr.hi; j += 32) {
        const A L = logit(j);
        m = L > m ? L : m;
      }
    m = warp_max(m);
    A l = A(0), acc[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) acc[u] = A(0);
    for (const IndexRange& kr : ranges)
      for (int64_t jb = kr.lo; jb <= kr.hi; jb += 32) {
        const int64_t j = jb + lane;
        const A p = j <= kr.hi ? math::exp_(logit(j) - m) : A(0);
        l += p;
        accumulate_rows(acc, p, vh + jb * P.D, chunk(jb, kr.hi), P.D, lane);
      }
    l = warp_sum(l);
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int64_t d = lane + 32 * u;
      if (d < P.D) oi[d] = store<T>(acc[u] / l);
    }
    if (lane == 0) lse[row] = m + math::log_(l);
  }
}

// Dvec_i = dO_i . O_i (B*H*Tq rows), one warp per row.
template <class T, class A>
__global__ void ref_bwd_dot_kernel(int64_t rows, int64_t D, const T* __restrict__ o, const T* __restrict__ g,
                                   A* __restrict__ Dvec) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= rows) return;
  A s = A(0);
  for (int64_t d = lane; d < D; d += 32)
    s += static_cast<A>(load(o[row * D + d])) * static_cast<A>(load(g[row * D + d]));
  s = warp_sum(s);
  if (lane == 0) Dvec[row] = s;
}

// dQ (and LogN's per-row dc). Grid as the forward.
template <class T, class A>
__global__ void __launch_bounds__(kWarps * 32)
    ref_bwd_dq_kernel(const AttnKernelParams P, const T* __restrict__ q, const T* __restrict__ k,
                      const T* __restrict__ v, const A* __restrict__ lse, const A* __restrict__ Dvec,
                      const T* __restrict__ gout, const A* __restrict__ c, const A* __restrict__ fc,
                      T* __restrict__ dq, A* __restrict__ dc_rows, A* __restrict__ dfq, A* __restrict__ ddq) {
  extern __shared__ unsigned char smem_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  A* qs = reinterpret_cast<A*>(smem_raw) + warp * 2 * P.D;  // q_i (D)
  A* gs = qs + P.D;                                         // dO_i (D)
  const QueryTile tile = query_tile(P, blockIdx.x, P.block_q);
  const int64_t b = tile.b, h = tile.h, hk = tile.hk, i0 = tile.i0, i1 = tile.i1;
  const T* kh = k + (b * P.Hkv + hk) * P.Tk * P.D;
  const T* vh = v + (b * P.Hkv + hk) * P.Tk * P.D;
  const A scale = static_cast<A>(P.scale);
  for (int64_t i = i0 + warp; i <= i1; i += kWarps) {
    const int64_t row = (b * P.H + h) * P.Tq + i;
    T* dqi = dq + row * P.D;
    __syncwarp();
    load_row(qs, q + row * P.D, P.D, lane);
    load_row(gs, gout + row * P.D, P.D, lane);
    __syncwarp();
    const IndexRange ranges[2] = {sink_range(P, b, h, i), key_range(P, b, h, i)};
    const A f = row_factor<A>(P, b, h, i), r = row_scale<A>(P, c, f, h);
    const A li = lse[row], Di = Dvec[row];
    const int64_t pos = P.q_offset + i;
    const A* fch = fc ? fc + (b * P.H + h) * P.fox_T : nullptr;
    const A fci = fch ? fch[pos] : A(0);
    A acc[kPer], dcs = A(0), dfs = A(0), dds = A(0);
#pragma unroll
    for (int u = 0; u < kPer; ++u) acc[u] = A(0);
    for (const IndexRange& kr : ranges)
      for (int64_t jb = kr.lo; jb <= kr.hi; jb += 32) {  // empty rows skip the loop: dq = 0
        const int64_t j = jb + lane;
        A gval = A(0);
        if (j <= kr.hi) {
          const A t = pair_distance<A>(P, b, pos, j);
          const LogitCoef<A> cf = logit_coef<A>(P, h, A(1), t, dist_rate<A>(P, b, h, i, j));  // a_t and the additive part
          const A s = scale * dot_row(qs, kh + j * P.D, P.D);
          const A p = math::exp_(r * cf.mul * s + cf.add + (fch ? fci - fch[j] : A(0)) - li);
          const A ds = p * (dot_row(gs, vh + j * P.D, P.D) - Di);  // dLoss/dL_ij
          gval = ds * r * cf.mul * scale;                           // dLoss/d(q_i . k_j)
          dcs += ds * f * cf.mul * s;                               // dLoss/dc_h (LogN)
          dfs += ds;                                                // FoX: dLoss/dc_pos, this row's part
          dds -= ds * (t < A(0) ? -t : t);                          // GRAPE: dLoss/ddist_q_i
        }
        accumulate_rows(acc, gval, kh + jb * P.D, chunk(jb, kr.hi), P.D, lane);
      }
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int64_t d = lane + 32 * u;
      if (d < P.D) dqi[d] = store<T>(acc[u]);
    }
    dcs = warp_sum(dcs);
    if (dc_rows != nullptr && lane == 0) dc_rows[row] = dcs;
    if (dfq != nullptr) {
      dfs = warp_sum(dfs);
      if (lane == 0) dfq[row] = dfs;
    }
    if (ddq != nullptr) {
      dds = warp_sum(dds);
      if (lane == 0) ddq[row] = dds;
    }
  }
}

// dK, dV of kv head hk. Grid: B * Hkv * (key blocks of block_k keys); one warp per key row, the G
// query heads of the group in order.
template <class T, class A>
__global__ void __launch_bounds__(kWarps * 32)
    ref_bwd_dkdv_kernel(const AttnKernelParams P, const T* __restrict__ q, const T* __restrict__ k,
                        const T* __restrict__ v, const A* __restrict__ lse, const A* __restrict__ Dvec,
                        const T* __restrict__ gout, const A* __restrict__ c, const A* __restrict__ fc,
                        T* __restrict__ dk, T* __restrict__ dv, A* __restrict__ dfk, A* __restrict__ ddk,
                        Counter* __restrict__ counters) {
  extern __shared__ unsigned char smem_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  A* ks = reinterpret_cast<A*>(smem_raw) + warp * 2 * P.D;  // k_j (D)
  A* vs = ks + P.D;                                         // v_j (D)
  const KeyTile tile = key_tile(P, blockIdx.x, P.block_k);
  const int64_t b = tile.b, hk = tile.hk, j0 = tile.j0, j1 = tile.j1;
  if (threadIdx.x == 0) {
    Counter n = 0;
    for (int64_t g = 0; g < P.G; ++g) n += spans_blocks(query_block_spans(P, b, hk * P.G + g, j0, j1, P.block_q));
    atomicAdd(&counters[2], n);
  }
  const A scale = static_cast<A>(P.scale);
  for (int64_t j = j0 + warp; j <= j1; j += kWarps) {
    const int64_t krow = (b * P.Hkv + hk) * P.Tk + j;
    __syncwarp();
    load_row(ks, k + krow * P.D, P.D, lane);
    load_row(vs, v + krow * P.D, P.D, lane);
    __syncwarp();
    A acck[kPer], accv[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) acck[u] = accv[u] = A(0);
    for (int64_t g = 0; g < P.G; ++g) {
      const int64_t h = hk * P.G + g;
      const IndexRange ranges[2] = {query_range(P, b, h, j), sink_rows(P, b, h, j)};  // rows in order
      const A ch = P.logit == LogitKind::LogN ? c[h] : A(1);
      const int64_t hrow = (b * P.H + h) * P.Tq;
      const A* fch = fc ? fc + (b * P.H + h) * P.fox_T : nullptr;
      A dfs = A(0);  // FoX: -sum_i dL_ij, key j's part of dLoss/dc_j for this query head
      A dds = A(0);  // GRAPE: -sum_i dL_ij |t_ij|, dLoss/ddist_k_j for this query head
      for (const IndexRange& qr : ranges)
        for (int64_t ib = qr.lo; ib <= qr.hi; ib += 32) {
          const int64_t i = ib + lane;
          A pval = A(0), gval = A(0);
          if (i <= qr.hi) {
            const A r = row_factor<A>(P, b, h, i) * ch;
            const A t = pair_distance<A>(P, b, P.q_offset + i, j);
            const LogitCoef<A> cf = logit_coef<A>(P, h, A(1), t, dist_rate<A>(P, b, h, i, j));
            const A s = scale * dot_row(ks, q + (hrow + i) * P.D, P.D);
            const A fox = fch ? fch[P.q_offset + i] - fch[j] : A(0);
            pval = math::exp_(r * cf.mul * s + cf.add + fox - lse[hrow + i]);
            const A ds = pval * (dot_row(vs, gout + (hrow + i) * P.D, P.D) - Dvec[hrow + i]);
            gval = ds * r * cf.mul * scale;
            dfs -= ds;
            dds -= ds * (t < A(0) ? -t : t);
          }
          accumulate_rows(accv, pval, gout + (hrow + ib) * P.D, chunk(ib, qr.hi), P.D, lane);  // dV += P^T dO
          accumulate_rows(acck, gval, q + (hrow + ib) * P.D, chunk(ib, qr.hi), P.D, lane);     // dK += dS'^T Q
        }
      if (dfk != nullptr) {
        dfs = warp_sum(dfs);
        if (lane == 0) dfk[(b * P.H + h) * P.Tk + j] = dfs;
      }
      if (ddk != nullptr) {
        dds = warp_sum(dds);
        if (lane == 0) ddk[(b * P.H + h) * P.Tk + j] = dds;
      }
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int64_t d = lane + 32 * u;
      if (d < P.D) {
        dk[krow * P.D + d] = store<T>(acck[u]);
        dv[krow * P.D + d] = store<T>(accv[u]);
      }
    }
  }
}

void check_dim(const AttnKernelParams& P) {
  HZ_CHECK(P.D <= kRefMaxD, NotImplementedError, "attention: the CUDA reference kernels take head_dim <= ",
           kRefMaxD, ", got ", P.D);
}
unsigned grid_of(int64_t n) {
  HZ_CHECK(n < (int64_t{1} << 31), ShapeError, "attention: ", n, " thread blocks exceed the CUDA grid limit");
  return static_cast<unsigned>(n);
}

}  // namespace

void ref_forward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& logn_c,
                 const Tensor& fox_c, Tensor& out, Tensor& lse, Counter* counters, cudaStream_t s) {
  check_dim(P);
  const unsigned grid = grid_of(P.B * P.H * num_blocks(P.Tq, P.block_q));
  dispatch_floating(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = math::acc_t<T>;
    ref_fwd_kernel<T, A><<<grid, kWarps * 32, kWarps * P.D * sizeof(A), s>>>(
        P, ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), logn_c.defined() ? ptr<const A>(logn_c) : nullptr,
        fox_c.defined() ? ptr<const A>(fox_c) : nullptr, ptr<T>(out), ptr<A>(lse), counters);
    HZ_CUDA_LAUNCHED("attention reference forward");
  });
}

void ref_backward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& gout, const Tensor& logn_c, const Tensor& fox_c, Tensor& dq,
                  Tensor& dk, Tensor& dv, Tensor* dc_rows, Tensor* dfox_q, Tensor* dfox_k, Tensor* ddist_q,
                  Tensor* ddist_k, Counter* counters, cudaStream_t s) {
  check_dim(P);
  const int64_t rows = P.B * P.H * P.Tq;
  Tensor Dvec = Tensor::empty({P.B, P.H, P.Tq}, lse.dtype(), q.device());  // (B, H, Tq)
  if (dc_rows) *dc_rows = Tensor::empty({P.B, P.H, P.Tq}, lse.dtype(), q.device());
  // FoX: every (b, h, key) gets its sum (keys no query sees: 0)
  if (dfox_q) *dfox_q = Tensor::empty({P.B, P.H, P.Tq}, lse.dtype(), q.device());
  if (dfox_k) *dfox_k = Tensor::zeros({P.B, P.H, P.Tk}, lse.dtype(), q.device());
  // GRAPE's rates, likewise (every row written; keys no query sees keep 0)
  if (ddist_q) *ddist_q = Tensor::empty({P.B, P.H, P.Tq}, lse.dtype(), q.device());
  if (ddist_k) *ddist_k = Tensor::zeros({P.B, P.H, P.Tk}, lse.dtype(), q.device());
  dispatch_floating(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = math::acc_t<T>;
    const A* c = logn_c.defined() ? ptr<const A>(logn_c) : nullptr;
    const A* fc = fox_c.defined() ? ptr<const A>(fox_c) : nullptr;
    ref_bwd_dot_kernel<T, A><<<grid_of((rows + 7) / 8), 256, 0, s>>>(rows, P.D, ptr<const T>(out),
                                                                       ptr<const T>(gout), ptr<A>(Dvec));
    HZ_CUDA_LAUNCHED("attention reference backward (dO . O)");
    ref_bwd_dq_kernel<T, A><<<grid_of(P.B * P.H * num_blocks(P.Tq, P.block_q)), kWarps * 32,
                              kWarps * 2 * P.D * sizeof(A), s>>>(
        P, ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const A>(lse), ptr<const A>(Dvec),
        ptr<const T>(gout), c, fc, ptr<T>(dq), dc_rows ? ptr<A>(*dc_rows) : nullptr, dfox_q ? ptr<A>(*dfox_q) : nullptr,
        ddist_q ? ptr<A>(*ddist_q) : nullptr);
    HZ_CUDA_LAUNCHED("attention reference backward (dQ)");
    ref_bwd_dkdv_kernel<T, A><<<grid_of(P.B * P.Hkv * num_blocks(P.Tk, P.block_k)), kWarps * 32,
                                kWarps * 2 * P.D * sizeof(A), s>>>(
        P, ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const A>(lse), ptr<const A>(Dvec),
        ptr<const T>(gout), c, fc, ptr<T>(dk), ptr<T>(dv), dfox_k ? ptr<A>(*dfox_k) : nullptr,
        ddist_k ? ptr<A>(*ddist_k) : nullptr, counters);
    HZ_CUDA_LAUNCHED("attention reference backward (dK, dV)");
  });
}

}  // namespace hz::attn::cuda_impl
