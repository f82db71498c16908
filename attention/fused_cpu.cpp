// Horizon: the fused attention kernel on CPU (f32, f64) — tiled online-softmax forward,
// recomputing backward. Masks, block ranges, block classes and logit coefficients come from
// attention/tiling.h; fused.cpp has the checks, the planning and the autograd node.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "attention/fused_kernels.h"
#include "core/cpu/fast_math.h"
#include "core/cpu/kernels.h"
#include "core/cpu/loops.h"
#include "core/ops.h"

namespace hz::attn::detail {

namespace {

std::atomic<int64_t> g_fwd{0}, g_fwd_boundary{0}, g_bwd{0};

// The per-call tables of the CPU kernel: scale-invariant a_t / m_t over every index distance the
// call can meet (the same function the CUDA kernels evaluate inline; inline here too at drawn token
// positions, whose distances are not indices), LogN's c and the sink logit per head, FoX's prefix sums.
struct CpuPlan {
  const AttnKernelParams& P;
  bool has_tables, si_inline;
  std::vector<double> a, m;  // t = 0..q_offset + Tq
  std::vector<double> c, sink;
  const Tensor& fox_c;

  CpuPlan(const AttnKernelParams& p, const CpuTerms& t) : P(p), c(t.logn_c), sink(t.sink), fox_c(t.fox_c) {
    has_tables = P.logit == LogitKind::ScaleInvariant && !P.positions;
    si_inline = P.logit == LogitKind::ScaleInvariant && P.positions;
    if (has_tables) {
      const int64_t n = std::max(P.q_offset + P.Tq, P.Tk) + 1;  // |t|: a prefix's later keys too
      a.resize(n);
      m.resize(n);
      for (int64_t t = 0; t < n; ++t) scale_invariant_coef<double>(static_cast<double>(t), P.tau, a[t], m[t]);
    }
  }
  // At drawn token positions: a_t and m_t of the pair (query at key index pos, key j) of sequence b,
  // and its distance |t| (a prefix's later keys: both ways; other t < 0 are masked). Index distances
  // read the tables instead (the kernels' inner loops, below).
  double coef_at_positions(int64_t b, int64_t pos, int64_t j, double& m_t, double& t_abs) const {
    const double t = pair_distance<double>(P, b, pos, j);
    t_abs = t < 0 ? -t : t;
    double a_t = 1.0;
    m_t = 0.0;
    if (si_inline) scale_invariant_coef<double>(t_abs, P.tau, a_t, m_t);
    return a_t;
  }
  bool pair_terms() const { return has_tables || si_inline; }  // a_t varies by pair
  double row_scale(int64_t b, int64_t h, int64_t i) const {
    const double f = row_factor<double>(P, b, h, i);
    return P.logit == LogitKind::LogN ? f * c[h] : f;
  }
  // FoX's c over the keys of (b, h), or null without FoX
  // (f64: the decay c_(p_i) - c_j is taken in double, then rounded once)
  const double* fox_row(int64_t b, int64_t h) const {
    return P.fox ? fox_c.data<double>() + (b * P.H + h) * P.fox_T : nullptr;
  }
};

// Turn raw scores s (nq, nk; leading dim ld) into logits in place, masking only when `boundary`:
// L = r a_t s + m_t - (slope + dist_q_i + dist_k_j) t (tiling.h's logit_coef with the tables), plus
// FoX's c_(p_i) - c_j when fc (the row of c of (b, h)) is given.
template <class T>
void block_logits(const CpuPlan& C, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk, int64_t ld,
                  bool boundary, const double* rs, const double* fc, T* s) {
  const AttnKernelParams& P = C.P;
  const double slope = P.alibi ? P.slope[h] : 0.0;
  const bool simple = !logits_depend_on_t(P);
  const double* dq = P.dist_q ? P.dist_q + (b * P.H + h) * P.Tq : nullptr;  // GRAPE's rates (tiling.h dist_rate)
  const double* dk = P.dist_k ? P.dist_k + (b * P.H + h) * P.Tk : nullptr;
  for (int64_t i = 0; i < nq; ++i) {
    T* si = s + i * ld;
    const int64_t pos = P.q_offset + i0 + i;
    const T r = static_cast<T>(rs[i]);
    const double row_slope = slope + (dq ? dq[i0 + i] : 0.0);
    if (simple) {
      if (r != T(1))
        for (int64_t jj = 0; jj < nk; ++jj) si[jj] *= r;
    } else {
      if (P.positions) {
        for (int64_t jj = 0; jj < nk; ++jj) {
          double m_t, ta;
          const double a = C.coef_at_positions(b, pos, j0 + jj, m_t, ta);
          const double sl = row_slope + (dk ? dk[j0 + jj] : 0.0);
          si[jj] = static_cast<T>(rs[i] * a) * si[jj] + static_cast<T>(m_t - sl * ta);
        }
      } else {
        for (int64_t jj = 0; jj < nk; ++jj) {
          const int64_t t = pos - (j0 + jj);
          const int64_t ta = t < 0 ? -t : t;  // |t|: a prefix's later keys (other t < 0 are masked below)
          const double a = C.has_tables ? C.a[ta] : 1.0;
          const double sl = row_slope + (dk ? dk[j0 + jj] : 0.0);
          const double add = (C.has_tables ? C.m[ta] : 0.0) - sl * static_cast<double>(ta);
          si[jj] = static_cast<T>(rs[i] * a) * si[jj] + static_cast<T>(add);
        }
      }
    }
    if (fc) {
      const double ci = fc[pos];
      for (int64_t jj = 0; jj < nk; ++jj) si[jj] += static_cast<T>(ci - fc[j0 + jj]);
    }
    if (boundary) {
      const IndexRange kr = key_range(P, b, h, i0 + i), sr = sink_range(P, b, h, i0 + i);
      for (int64_t jj = 0; jj < nk; ++jj)
        if (!in_ranges(kr, sr, j0 + jj)) si[jj] = -std::numeric_limits<T>::infinity();
    }
  }
}

template <class T>
void forward_impl(const CpuPlan& C, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) {
  const AttnKernelParams& P = C.P;
  const T* qp = q.data<T>();
  const T* kp = k.data<T>();
  const T* vp = v.data<T>();
  T* op = out.data<T>();
  T* lp = lse.data<T>();
  const int64_t Bq = P.block_q, Bk = P.block_k;
  const int64_t nqb = num_blocks(P.Tq, Bq);
  const int64_t tasks = P.B * P.H * nqb;
  const T scale = static_cast<T>(P.scale);
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  int64_t visited = 0, boundary_n = 0;
#pragma omp parallel reduction(+ : visited, boundary_n)
  {
    std::vector<T> sbuf(Bq * Bk), acc(Bq * P.D), mrow(Bq), lrow(Bq);
    std::vector<double> rf(Bq);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qb = task % nqb, bh = task / nqb, h = bh % P.H, b = bh / P.H;
      const int64_t hk = h / P.G;
      const int64_t i0 = qb * Bq, nq = std::min(Bq, P.Tq - i0), i1 = i0 + nq - 1;
      const T* qblk = qp + ((b * P.H + h) * P.Tq + i0) * P.D;  // (nq, D)
      const T* kh = kp + (b * P.Hkv + hk) * P.Tk * P.D;        // (Tk, D)
      const T* vh = vp + (b * P.Hkv + hk) * P.Tk * P.D;        // (Tk, D)
      const double* fc = C.fox_row(b, h);
      for (int64_t i = 0; i < nq; ++i) {
        rf[i] = C.row_scale(b, h, i0 + i);
        mrow[i] = ninf;
        lrow[i] = T(0);
      }
      std::fill(acc.begin(), acc.end(), T(0));
      const BlockSpans span = key_block_spans(P, b, h, i0, i1, Bk);
      for (int64_t kb = spans_next(span, -1); kb <= spans_last(span); kb = spans_next(span, kb)) {
        int64_t j0 = kb * Bk, nk = std::min(Bk, P.Tk - j0);
        narrow_to_sinks(span, kb, j0, nk);
        const bool boundary = spans_class(span, kb) == BlockClass::Boundary;
        ++visited;
        boundary_n += boundary;
        T* s = sbuf.data();  // (nq, Bk): scores, then logits, then probabilities
        cpu::gemm<T>(false, true, nq, nk, P.D, scale, qblk, P.D, kh + j0 * P.D, P.D, T(0), s, Bk);
        block_logits(C, b, h, i0, nq, j0, nk, Bk, boundary, rf.data(), fc, s);
        for (int64_t i = 0; i < nq; ++i) {
          T* si = s + i * Bk;
          const T mx = std::max(mrow[i], cpu::row_max(si, nk));
          if (mx == ninf) {  // row fully masked so far: contributes nothing
            for (int64_t jj = 0; jj < nk; ++jj) si[jj] = T(0);
            continue;
          }
          const T corr = cpu::fast_exp(mrow[i] - mx);
          const T sum = cpu::exp_shift_sum(si, nk, mx);
          lrow[i] = lrow[i] * corr + sum;
          mrow[i] = mx;
          if (corr != T(1)) {
            T* ai = acc.data() + i * P.D;
            for (int64_t d = 0; d < P.D; ++d) ai[d] *= corr;
          }
        }
        // acc (nq, D) += P (nq, nk) V_blk (nk, D)
        cpu::gemm<T>(false, false, nq, P.D, nk, T(1), s, Bk, vh + j0 * P.D, P.D, T(1), acc.data(), P.D);
      }
      for (int64_t i = 0; i < nq; ++i) {
        T* o = op + ((b * P.H + h) * P.Tq + i0 + i) * P.D;
        const T* ai = acc.data() + i * P.D;
        T l = lrow[i];
        T& ls = lp[(b * P.H + h) * P.Tq + i0 + i];
        if (P.sink) {  // the sink joins the denominator: rescale to max(m, z), add exp(z - max)
          const T z = static_cast<T>(C.sink[h]);
          const T mx = std::max(mrow[i], z);
          const T corr = l > T(0) ? std::exp(mrow[i] - mx) : T(0);
          l = l * corr + std::exp(z - mx);
          const T inv = corr / l;
          for (int64_t d = 0; d < P.D; ++d) o[d] = ai[d] * inv;
          ls = mx + std::log(l);
        } else if (l > T(0)) {
          const T inv = T(1) / l;
          for (int64_t d = 0; d < P.D; ++d) o[d] = ai[d] * inv;
          ls = mrow[i] + std::log(l);
        } else {
          for (int64_t d = 0; d < P.D; ++d) o[d] = T(0);
          ls = ninf;
        }
      }
    }
  }
  cpu_add_stats(visited, boundary_n, 0);
}

// Backward. One task per (b, h): it owns dq rows of head h and per-query-head dk/dv buffers,
// which are summed over each GQA group afterwards in head order (deterministic).
template <class T>
void backward_impl(const CpuPlan& C, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, const Tensor& gout, Tensor& dq, Tensor& dk_h, Tensor& dv_h,
                   std::vector<double>* dlogn_c, std::vector<double>* dsink, Tensor* dfox, Tensor* ddist_q,
                   Tensor* ddist_k) {
  const AttnKernelParams& P = C.P;
  const T* qp = q.data<T>();
  const T* kp = k.data<T>();
  const T* vp = v.data<T>();
  const T* op = out.data<T>();
  const T* lp = lse.data<T>();
  const T* gp = gout.data<T>();
  T* dqp = dq.data<T>();
  T* dkp = dk_h.data<T>();
  T* dvp = dv_h.data<T>();
  const int64_t Bq = P.block_q, Bk = P.block_k;
  const int64_t nqb = num_blocks(P.Tq, Bq);
  const T scale = static_cast<T>(P.scale);
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  const bool logn = P.logit == LogitKind::LogN && dlogn_c != nullptr;
  std::vector<double> dc_bh(P.B * P.H, 0.0);  // per (b, h) task, summed over b in order below
  std::vector<double> dz_bh(P.B * P.H, 0.0);  // the sink's, likewise
  double* dfp = dfox ? dfox->data<double>() : nullptr;  // (B, H, fox_T) f64: each task writes its own row
  double* ddqp = ddist_q ? ddist_q->data<double>() : nullptr;  // GRAPE's rates: (B, H, Tq) and (B, H, Tk) f64, likewise
  double* ddkp = ddist_k ? ddist_k->data<double>() : nullptr;
  int64_t visited = 0;
  // Heads differ widely in cost (SCOPE: scopes from a few tokens to T), so hand the (b, h) tasks
  // out largest first (LPT) to balance the threads.
  std::vector<std::pair<int64_t, int64_t>> order;  // (-estimated key blocks, bh)
  for (int64_t bh = 0; bh < P.B * P.H; ++bh) {
    int64_t cost = 0;
    for (int64_t qb = 0; qb < nqb; ++qb)
      cost += spans_blocks(key_block_spans(P, bh / P.H, bh % P.H, qb * Bq, std::min(P.Tq, (qb + 1) * Bq) - 1, Bk));
    order.emplace_back(-cost, bh);
  }
  std::sort(order.begin(), order.end());
#pragma omp parallel reduction(+ : visited)
  {
    std::vector<T> sbuf(Bq * Bk), pbuf(Bq * Bk), dpbuf(Bq * Bk), Dvec(P.Tq);
    std::vector<double> rf(Bq), lnn(Bq);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < P.B * P.H; ++task) {
      const int64_t bh = order[task].second;
      const int64_t h = bh % P.H, b = bh / P.H, hk = h / P.G;
      const T* qh = qp + bh * P.Tq * P.D;   // (Tq, D)
      const T* oh = op + bh * P.Tq * P.D;   // (Tq, D)
      const T* gh = gp + bh * P.Tq * P.D;   // dO (Tq, D)
      const T* lh = lp + bh * P.Tq;         // (Tq)
      const T* kh = kp + (b * P.Hkv + hk) * P.Tk * P.D;  // (Tk, D)
      const T* vh = vp + (b * P.Hkv + hk) * P.Tk * P.D;  // (Tk, D)
      T* dqh = dqp + bh * P.Tq * P.D;
      T* dkh = dkp + bh * P.Tk * P.D;
      T* dvh = dvp + bh * P.Tk * P.D;
      std::fill(dqh, dqh + P.Tq * P.D, T(0));
      std::fill(dkh, dkh + P.Tk * P.D, T(0));
      std::fill(dvh, dvh + P.Tk * P.D, T(0));
      const double* fc = C.fox_row(b, h);
      double* dfc = dfp ? dfp + bh * P.fox_T : nullptr;
      if (dfc) std::fill(dfc, dfc + P.fox_T, 0.0);
      double* ddq = ddqp ? ddqp + bh * P.Tq : nullptr;
      double* ddk = ddkp ? ddkp + bh * P.Tk : nullptr;
      if (ddq) std::fill(ddq, ddq + P.Tq, 0.0);
      if (ddk) std::fill(ddk, ddk + P.Tk, 0.0);
      const bool dist = ddq || ddk;
      double dz = 0.0;
      for (int64_t i = 0; i < P.Tq; ++i) {  // D_i = dO_i . O_i
        T a = T(0);
        for (int64_t d = 0; d < P.D; ++d) a += gh[i * P.D + d] * oh[i * P.D + d];
        Dvec[i] = a;
        if (P.sink) dz -= std::exp(C.sink[h] - static_cast<double>(lh[i])) * static_cast<double>(a);
      }
      dz_bh[bh] = dz;
      double dch = 0.0;
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const int64_t i0 = qb * Bq, nq = std::min(Bq, P.Tq - i0), i1 = i0 + nq - 1;
        for (int64_t i = 0; i < nq; ++i) {
          rf[i] = C.row_scale(b, h, i0 + i);
          lnn[i] = logn ? row_factor<double>(P, b, h, i0 + i) : 0.0;
        }
        const BlockSpans span = key_block_spans(P, b, h, i0, i1, Bk);
        for (int64_t kbi = spans_next(span, -1); kbi <= spans_last(span); kbi = spans_next(span, kbi)) {
          int64_t j0 = kbi * Bk, nk = std::min(Bk, P.Tk - j0);
          narrow_to_sinks(span, kbi, j0, nk);
          ++visited;
          T* s = sbuf.data();    // raw scores scale * q.k   (nq, Bk)
          T* pr = pbuf.data();   // logits, then probabilities, then dS
          T* dpv = dpbuf.data(); // dP = dO v^T
          cpu::gemm<T>(false, true, nq, nk, P.D, scale, qh + i0 * P.D, P.D, kh + j0 * P.D, P.D, T(0), s, Bk);
          std::copy(s, s + nq * Bk, pr);
          block_logits(C, b, h, i0, nq, j0, nk, Bk, spans_class(span, kbi) == BlockClass::Boundary, rf.data(), fc, pr);
          for (int64_t i = 0; i < nq; ++i) {
            const T l = lh[i0 + i];
            T* pi = pr + i * Bk;
            if (l == ninf) std::fill(pi, pi + nk, T(0));
            else
              for (int64_t jj = 0; jj < nk; ++jj) pi[jj] = cpu::fast_exp(pi[jj] - l);
          }
          // dV_blk (nk, D) += P^T dO_blk
          cpu::gemm<T>(true, false, nk, P.D, nq, T(1), pr, Bk, gh + i0 * P.D, P.D, T(1), dvh + j0 * P.D, P.D);
          // dP (nq, nk) = dO_blk V_blk^T
          cpu::gemm<T>(false, true, nq, nk, P.D, T(1), gh + i0 * P.D, P.D, vh + j0 * P.D, P.D, T(0), dpv, Bk);
          for (int64_t i = 0; i < nq; ++i) {
            T* pi = pr + i * Bk;
            const T* di = dpv + i * Bk;
            const T* si = s + i * Bk;
            const T Di = Dvec[i0 + i];
            const T rsc = static_cast<T>(rf[i]) * scale;
            const int64_t pos = P.q_offset + i0 + i;
            if (!C.pair_terms() && !logn && !dfc && !dist) {  // plain logits: one vectorized pass
              for (int64_t jj = 0; jj < nk; ++jj) pi[jj] = pi[jj] * (di[jj] - Di) * rsc;
              continue;
            }
            double drow = 0.0, drate = 0.0;
            for (int64_t jj = 0; jj < nk; ++jj) {
              const T dl = pi[jj] * (di[jj] - Di);  // dLoss/dL_ij
              T a = T(1);
              if (C.has_tables && pi[jj] != T(0)) a = static_cast<T>(C.a[std::abs(pos - j0 - jj)]);
              if (C.si_inline && pi[jj] != T(0)) {
                double m_t, ta;
                a = static_cast<T>(C.coef_at_positions(b, pos, j0 + jj, m_t, ta));
              }
              if (logn && pi[jj] != T(0)) dch += static_cast<double>(dl) * lnn[i] * a * static_cast<double>(si[jj]);
              if (dfc) {  // L_ij gains c_(p_i) - c_j
                drow += dl;
                dfc[j0 + jj] -= dl;
              }
              if (dist && pi[jj] != T(0)) {  // L_ij gains -|t| (dist_q_i + dist_k_j)
                const double t = P.positions ? pair_distance<double>(P, b, pos, j0 + jj) : static_cast<double>(pos - j0 - jj);
                const double g = -static_cast<double>(dl) * std::abs(t);
                drate += g;
                if (ddk) ddk[j0 + jj] += g;
              }
              pi[jj] = dl * rsc * a;  // dLoss/d(q.k)
            }
            if (dfc) dfc[pos] += drow;
            if (ddq) ddq[i0 + i] += drate;
          }
          // dQ_blk (nq, D) += dS K_blk ; dK_blk (nk, D) += dS^T Q_blk
          cpu::gemm<T>(false, false, nq, P.D, nk, T(1), pr, Bk, kh + j0 * P.D, P.D, T(1), dqh + i0 * P.D, P.D);
          cpu::gemm<T>(true, false, nk, P.D, nq, T(1), pr, Bk, qh + i0 * P.D, P.D, T(1), dkh + j0 * P.D, P.D);
        }
      }
      dc_bh[bh] = dch;
    }
  }
  cpu_add_stats(0, 0, visited);
  if (dlogn_c) {
    dlogn_c->assign(P.H, 0.0);
    for (int64_t bh = 0; bh < P.B * P.H; ++bh) (*dlogn_c)[bh % P.H] += dc_bh[bh];
  }
  if (dsink) {
    dsink->assign(P.H, 0.0);
    for (int64_t bh = 0; bh < P.B * P.H; ++bh) (*dsink)[bh % P.H] += dz_bh[bh];
  }
}

}  // namespace

void cpu_add_stats(int64_t fwd, int64_t fwd_boundary, int64_t bwd) {
  g_fwd += fwd;
  g_fwd_boundary += fwd_boundary;
  g_bwd += bwd;
}
AttnStats cpu_stats() { return {g_fwd.load(), g_fwd_boundary.load(), g_bwd.load()}; }
void cpu_reset_stats() {
  g_fwd = 0;
  g_fwd_boundary = 0;
  g_bwd = 0;
}

void cpu_forward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const CpuTerms& terms,
                 Tensor& out, Tensor& lse) {
  const CpuPlan C(P, terms);
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    forward_impl<T>(C, q, k, v, out, lse);
  });
}

void cpu_backward(const AttnKernelParams& P, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                  const Tensor& lse, const Tensor& gout, const CpuTerms& terms, Tensor& dq, Tensor& dk, Tensor& dv,
                  const CpuTermGrads& grads) {
  const CpuPlan C(P, terms);
  const bool grouped = P.G > 1;
  Tensor dk_h = grouped ? Tensor::empty({P.B, P.H, P.Tk, P.D}, q.dtype()) : dk;
  Tensor dv_h = grouped ? Tensor::empty({P.B, P.H, P.Tk, P.D}, q.dtype()) : dv;
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    backward_impl<T>(C, q, k, v, out, lse, gout, dq, dk_h, dv_h, grads.logn_c, grads.sink, grads.fox_c, grads.dist_q,
                     grads.dist_k);
  });
  if (grouped) {  // sum the per-query-head copies over each GQA group, in head order
    dk.copy_(ops::sum(dk_h.view({P.B, P.Hkv, P.G, P.Tk, P.D}), 2, false));
    dv.copy_(ops::sum(dv_h.view({P.B, P.Hkv, P.G, P.Tk, P.D}), 2, false));
  }
}

}  // namespace hz::attn::detail
