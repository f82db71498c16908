// Horizon: fused attention on CPU — tiled online-softmax forward, recomputing backward.
// See fused.h for the legend, the alignment convention, the mask and the logit transforms.
#include "attention/fused.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cpu/fast_math.h"
#include "core/cpu/kernels.h"
#include "core/cpu/loops.h"
#include "core/ops.h"

namespace hz::attn {

AttnStats& attn_stats() {
  static AttnStats s;
  return s;
}

KeyRange visible_keys(const AttnConfig& cfg, int64_t Tk, int64_t p, int64_t w) {
  const int64_t kend = cfg.key_end < 0 ? Tk : std::min(cfg.key_end, Tk);
  KeyRange r;
  r.lo = std::max<int64_t>(cfg.key_begin, w > 0 ? p - w + 1 : 0);
  r.lo = std::max<int64_t>(r.lo, 0);
  r.hi = std::min<int64_t>(kend - 1, p - cfg.min_distance);
  return r;
}

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Everything a (b, h) task needs, resolved once per call.
struct Plan {
  int64_t B, H, Hkv, G, Tq, Tk, D, Bq, Bk, q_offset;
  double scale;
  LogitKind logit;
  bool has_tables;             // scale_invariant a_t / m_t
  std::vector<double> a, m;    // tables over t = 0..Tk+q_offset
  std::vector<double> slope;   // per head (0 if no ALiBi)
  std::vector<int64_t> window; // per head
  std::vector<double> logn_c;  // per head (LogN)
  AttnConfig cfg;

  KeyRange range(int64_t h, int64_t i) const { return visible_keys(cfg, Tk, q_offset + i, window[h]); }
  // row scale r_hi (without c for LogN: returns ln(n_i); the caller multiplies c)
  double row_factor(int64_t h, int64_t i) const {
    switch (logit) {
      case LogitKind::LogN: {
        const KeyRange r = range(h, i);
        const int64_t n = std::max<int64_t>(0, r.hi - r.lo + 1);
        return n > 0 ? std::log(static_cast<double>(n)) : 0.0;
      }
      case LogitKind::SwanRow: return swan_row_scale(cfg.swan_a, q_offset + i);
      case LogitKind::Temperature: return cfg.beta;
      default: return 1.0;
    }
  }
  double row_scale(int64_t h, int64_t i) const {
    const double f = row_factor(h, i);
    return logit == LogitKind::LogN ? f * logn_c[h] : f;
  }
};

Plan make_plan(const Tensor& q, const Tensor& k, const AttnConfig& cfg, const Tensor& logn_c) {
  Plan p;
  p.B = q.size(0);
  p.H = q.size(1);
  p.Tq = q.size(2);
  p.D = q.size(3);
  p.Hkv = k.size(1);
  p.Tk = k.size(2);
  p.G = p.H / p.Hkv;
  p.cfg = cfg;
  HZ_CHECK(cfg.min_distance >= 0, ValueError, "attention: min_distance must be >= 0 (keys after the query are never visible)");
  p.Bq = std::max<int64_t>(1, cfg.block_q);
  p.Bk = std::max<int64_t>(1, cfg.block_k);
  p.q_offset = cfg.q_offset < 0 ? p.Tk - p.Tq : cfg.q_offset;
  p.scale = cfg.scale > 0 ? cfg.scale : 1.0 / std::sqrt(static_cast<double>(p.D));
  p.logit = cfg.logit;
  p.window = cfg.window.empty() ? std::vector<int64_t>(p.H, 0) : cfg.window;
  HZ_CHECK(static_cast<int64_t>(p.window.size()) == p.H, ShapeError, "attention: ", p.window.size(),
           " windows for ", p.H, " query heads");
  p.slope = cfg.alibi_slope.empty() ? std::vector<double>(p.H, 0.0) : cfg.alibi_slope;
  HZ_CHECK(static_cast<int64_t>(p.slope.size()) == p.H, ShapeError, "attention: ", p.slope.size(),
           " ALiBi slopes for ", p.H, " query heads");
  p.has_tables = cfg.logit == LogitKind::ScaleInvariant;
  if (p.has_tables) scale_invariant_tables(cfg.tau, p.q_offset + p.Tq + 1, p.a, p.m);
  if (cfg.logit == LogitKind::LogN) {
    HZ_CHECK(logn_c.defined() && logn_c.numel() == p.H, ShapeError,
             "attention: logit 'logn' needs one c per query head (", p.H, " values)");
    p.logn_c = logn_c.to_vector();
  }
  return p;
}

// Scratch for one thread.
template <class T>
struct Scratch {
  std::vector<T> s, pr, acc, dp, dq;
  std::vector<double> rf;  // per-row factor
  std::vector<T> mrow, lrow;
};

// Turn raw scores into logits in place (masking only when `boundary`).
template <class T>
inline void block_logits(const Plan& P, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                         int64_t ld, bool boundary, const double* rs, T* s) {
  const double slope = P.slope[h];
  const bool simple = !P.has_tables && slope == 0.0;
  for (int64_t i = 0; i < nq; ++i) {
    T* si = s + i * ld;
    const int64_t pos = P.q_offset + i0 + i;
    const T r = static_cast<T>(rs[i]);
    if (simple) {
      for (int64_t jj = 0; jj < nk; ++jj) si[jj] *= r;
    } else {
      for (int64_t jj = 0; jj < nk; ++jj) {
        const int64_t t = pos - (j0 + jj);
        const int64_t tc = t < 0 ? 0 : t;  // masked entries (t < 0) are overwritten below
        const double a = P.has_tables ? P.a[tc] : 1.0;
        const double b = (P.has_tables ? P.m[tc] : 0.0) - slope * static_cast<double>(t);
        si[jj] = static_cast<T>(r * a) * si[jj] + static_cast<T>(b);
      }
    }
    if (boundary) {
      const KeyRange kr = P.range(h, i0 + i);
      for (int64_t jj = 0; jj < nk; ++jj) {
        const int64_t j = j0 + jj;
        if (j < kr.lo || j > kr.hi) si[jj] = -std::numeric_limits<T>::infinity();
      }
    }
  }
}

// Classify key block [j0, j1] against query rows [i0, i1]: 0 = masked for every row (skip),
// 1 = boundary (some entries masked), 2 = fully visible.
inline int classify(const Plan& P, int64_t h, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  bool any = false, all = true;
  for (int64_t i = i0; i <= i1; ++i) {
    const KeyRange r = P.range(h, i);
    const bool touches = r.lo <= j1 && r.hi >= j0 && r.lo <= r.hi;
    any |= touches;
    all &= r.lo <= j0 && r.hi >= j1;
  }
  return !any ? 0 : (all ? 2 : 1);
}

// Key-block index range that may hold visible keys for rows [i0, i1] (lo/hi grow with i).
inline void block_span(const Plan& P, int64_t h, int64_t i0, int64_t i1, int64_t& kb0, int64_t& kb1) {
  const KeyRange first = P.range(h, i0), last = P.range(h, i1);
  const int64_t lo = std::max<int64_t>(0, first.lo), hi = std::min(P.Tk - 1, last.hi);
  if (hi < lo) { kb0 = 0; kb1 = -1; return; }
  kb0 = lo / P.Bk;
  kb1 = hi / P.Bk;
}

template <class T>
void forward_impl(const Plan& P, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                  Tensor& lse) {
  const T* qp = q.data<T>();
  const T* kp = k.data<T>();
  const T* vp = v.data<T>();
  T* op = out.data<T>();
  T* lp = lse.data<T>();
  const int64_t nqb = (P.Tq + P.Bq - 1) / P.Bq;
  const int64_t tasks = P.B * P.H * nqb;
  const T scale = static_cast<T>(P.scale);
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  int64_t visited = 0, boundary_n = 0;
#pragma omp parallel reduction(+ : visited, boundary_n)
  {
    std::vector<T> sbuf(P.Bq * P.Bk), acc(P.Bq * P.D), mrow(P.Bq), lrow(P.Bq);
    std::vector<double> rf(P.Bq);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t qb = task % nqb, bh = task / nqb, h = bh % P.H, b = bh / P.H;
      const int64_t hk = h / P.G;
      const int64_t i0 = qb * P.Bq, nq = std::min(P.Bq, P.Tq - i0), i1 = i0 + nq - 1;
      const T* qblk = qp + ((b * P.H + h) * P.Tq + i0) * P.D;  // (nq, D)
      const T* kh = kp + (b * P.Hkv + hk) * P.Tk * P.D;        // (Tk, D)
      const T* vh = vp + (b * P.Hkv + hk) * P.Tk * P.D;        // (Tk, D)
      for (int64_t i = 0; i < nq; ++i) {
        rf[i] = P.row_scale(h, i0 + i);
        mrow[i] = ninf;
        lrow[i] = T(0);
      }
      std::fill(acc.begin(), acc.end(), T(0));
      int64_t kb0, kb1;
      block_span(P, h, i0, i1, kb0, kb1);
      for (int64_t kb = kb0; kb <= kb1; ++kb) {
        const int64_t j0 = kb * P.Bk, nk = std::min(P.Bk, P.Tk - j0), j1 = j0 + nk - 1;
        const int cls = classify(P, h, i0, i1, j0, j1);
        if (cls == 0) continue;  // never read a block that is masked for every row
        ++visited;
        boundary_n += cls == 1;
        T* s = sbuf.data();  // (nq, Bk): scores, then logits, then probabilities
        cpu::gemm<T>(false, true, nq, nk, P.D, scale, qblk, P.D, kh + j0 * P.D, P.D, T(0), s, P.Bk);
        block_logits(P, h, i0, nq, j0, nk, P.Bk, cls == 1, rf.data(), s);
        for (int64_t i = 0; i < nq; ++i) {
          T* si = s + i * P.Bk;
          T mx = mrow[i];
          for (int64_t jj = 0; jj < nk; ++jj) mx = std::max(mx, si[jj]);
          if (mx == ninf) {  // row fully masked so far: contributes nothing
            for (int64_t jj = 0; jj < nk; ++jj) si[jj] = T(0);
            continue;
          }
          const T corr = cpu::fast_exp(mrow[i] - mx);
          T sum = T(0);
          for (int64_t jj = 0; jj < nk; ++jj) {
            const T e = cpu::fast_exp(si[jj] - mx);
            si[jj] = e;
            sum += e;
          }
          lrow[i] = lrow[i] * corr + sum;
          mrow[i] = mx;
          if (corr != T(1)) {
            T* ai = acc.data() + i * P.D;
            for (int64_t d = 0; d < P.D; ++d) ai[d] *= corr;
          }
        }
        // acc (nq, D) += P (nq, nk) V_blk (nk, D)
        cpu::gemm<T>(false, false, nq, P.D, nk, T(1), s, P.Bk, vh + j0 * P.D, P.D, T(1), acc.data(), P.D);
      }
      for (int64_t i = 0; i < nq; ++i) {
        T* o = op + ((b * P.H + h) * P.Tq + i0 + i) * P.D;
        const T* ai = acc.data() + i * P.D;
        const T l = lrow[i];
        T& ls = lp[(b * P.H + h) * P.Tq + i0 + i];
        if (l > T(0)) {
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
  attn_stats().fwd_blocks += visited;
  attn_stats().fwd_boundary_blocks += boundary_n;
}

// Backward. One task per (b, h): it owns dq rows of head h and per-query-head dk/dv buffers,
// which are summed over each GQA group afterwards in head order (deterministic).
template <class T>
void backward_impl(const Plan& P, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, const Tensor& gout, Tensor& dq,
                   Tensor& dk_h, Tensor& dv_h, std::vector<double>* dlogn_c) {
  const T* qp = q.data<T>();
  const T* kp = k.data<T>();
  const T* vp = v.data<T>();
  const T* op = out.data<T>();
  const T* lp = lse.data<T>();
  const T* gp = gout.data<T>();
  T* dqp = dq.data<T>();
  T* dkp = dk_h.data<T>();
  T* dvp = dv_h.data<T>();
  const int64_t nqb = (P.Tq + P.Bq - 1) / P.Bq;
  const T scale = static_cast<T>(P.scale);
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  const bool logn = P.logit == LogitKind::LogN && dlogn_c != nullptr;
  std::vector<double> dc(P.H, 0.0);
  int64_t visited = 0;
  // Heads differ widely in cost (SCOPE: scopes from a few tokens to T), so hand the (b, h) tasks
  // out largest first (LPT) to balance the threads.
  std::vector<std::pair<int64_t, int64_t>> order;  // (estimated key blocks, bh)
  for (int64_t bh = 0; bh < P.B * P.H; ++bh) {
    int64_t cost = 0;
    for (int64_t qb = 0; qb < nqb; ++qb) {
      int64_t kb0, kb1;
      block_span(P, bh % P.H, qb * P.Bq, std::min(P.Tq, (qb + 1) * P.Bq) - 1, kb0, kb1);
      cost += std::max<int64_t>(0, kb1 - kb0 + 1);
    }
    order.emplace_back(-cost, bh);
  }
  std::sort(order.begin(), order.end());
#pragma omp parallel reduction(+ : visited)
  {
    std::vector<T> sbuf(P.Bq * P.Bk), pbuf(P.Bq * P.Bk), dpbuf(P.Bq * P.Bk), Dvec(P.Tq);
    std::vector<double> rf(P.Bq), lnn(P.Bq);
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
      for (int64_t i = 0; i < P.Tq; ++i) {  // D_i = dO_i . O_i
        T a = T(0);
        for (int64_t d = 0; d < P.D; ++d) a += gh[i * P.D + d] * oh[i * P.D + d];
        Dvec[i] = a;
      }
      double dch = 0.0;
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const int64_t i0 = qb * P.Bq, nq = std::min(P.Bq, P.Tq - i0), i1 = i0 + nq - 1;
        for (int64_t i = 0; i < nq; ++i) {
          rf[i] = P.row_scale(h, i0 + i);
          lnn[i] = logn ? P.row_factor(h, i0 + i) : 0.0;
        }
        int64_t kb0, kb1;
        block_span(P, h, i0, i1, kb0, kb1);
        for (int64_t kbi = kb0; kbi <= kb1; ++kbi) {
          const int64_t j0 = kbi * P.Bk, nk = std::min(P.Bk, P.Tk - j0), j1 = j0 + nk - 1;
          const int cls = classify(P, h, i0, i1, j0, j1);
          if (cls == 0) continue;
          ++visited;
          T* s = sbuf.data();    // raw scores scale * q.k   (nq, Bk)
          T* pr = pbuf.data();   // logits, then probabilities, then dS
          T* dpv = dpbuf.data(); // dP = dO v^T
          cpu::gemm<T>(false, true, nq, nk, P.D, scale, qh + i0 * P.D, P.D, kh + j0 * P.D, P.D, T(0), s, P.Bk);
          std::copy(s, s + nq * P.Bk, pr);
          block_logits(P, h, i0, nq, j0, nk, P.Bk, cls == 1, rf.data(), pr);
          for (int64_t i = 0; i < nq; ++i) {
            const T l = lh[i0 + i];
            T* pi = pr + i * P.Bk;
            for (int64_t jj = 0; jj < nk; ++jj) pi[jj] = l == ninf ? T(0) : cpu::fast_exp(pi[jj] - l);
          }
          // dV_blk (nk, D) += P^T dO_blk
          cpu::gemm<T>(true, false, nk, P.D, nq, T(1), pr, P.Bk, gh + i0 * P.D, P.D, T(1), dvh + j0 * P.D, P.D);
          // dP (nq, nk) = dO_blk V_blk^T
          cpu::gemm<T>(false, true, nq, nk, P.D, T(1), gh + i0 * P.D, P.D, vh + j0 * P.D, P.D, T(0), dpv, P.Bk);
          for (int64_t i = 0; i < nq; ++i) {
            T* pi = pr + i * P.Bk;
            const T* di = dpv + i * P.Bk;
            const T* si = s + i * P.Bk;
            const T Di = Dvec[i0 + i];
            const T rsc = static_cast<T>(rf[i]) * scale;
            const int64_t pos = P.q_offset + i0 + i;
            for (int64_t jj = 0; jj < nk; ++jj) {
              const T dl = pi[jj] * (di[jj] - Di);  // dLoss/dL_ij
              T a = T(1);
              if (P.has_tables && pi[jj] != T(0)) a = static_cast<T>(P.a[pos - j0 - jj]);
              if (logn && pi[jj] != T(0)) dch += static_cast<double>(dl) * lnn[i] * a * static_cast<double>(si[jj]);
              pi[jj] = dl * rsc * a;  // dLoss/d(q.k)
            }
          }
          // dQ_blk (nq, D) += dS K_blk ; dK_blk (nk, D) += dS^T Q_blk
          cpu::gemm<T>(false, false, nq, P.D, nk, T(1), pr, P.Bk, kh + j0 * P.D, P.D, T(1), dqh + i0 * P.D, P.D);
          cpu::gemm<T>(true, false, nk, P.D, nq, T(1), pr, P.Bk, qh + i0 * P.D, P.D, T(1), dkh + j0 * P.D, P.D);
        }
      }
      dc[h] = dch;  // each head is owned by exactly one task
    }
  }
  attn_stats().bwd_blocks += visited;
  if (dlogn_c) *dlogn_c = dc;
}

}  // namespace

AttnOutput fused_attention(const ag::Variable& q, const ag::Variable& k, const ag::Variable& v,
                           const AttnConfig& cfg, const ag::Variable& logn_c) {
  const Tensor& qv = q.value();
  const Tensor& kv = k.value();
  const Tensor& vv = v.value();
  HZ_CHECK(qv.device().is_cpu() && kv.device().is_cpu() && vv.device().is_cpu(), NotImplementedError,
           "fused attention has no CUDA kernel in this build yet (q on ", qv.device().str(),
           "); train attention layers on run.device=cpu");
  HZ_CHECK(qv.dim() == 4 && kv.dim() == 4 && vv.dim() == 4, ShapeError,
           "attention: q, k, v must be (B, H, T, D); got ", shape_str(qv.shape()), ", ",
           shape_str(kv.shape()), ", ", shape_str(vv.shape()));
  HZ_CHECK(kv.shape() == vv.shape(), ShapeError, "attention: k ", shape_str(kv.shape()),
           " and v ", shape_str(vv.shape()), " must match");
  HZ_CHECK(qv.size(0) == kv.size(0) && qv.size(3) == kv.size(3), ShapeError,
           "attention: q ", shape_str(qv.shape()), " and k ", shape_str(kv.shape()),
           " differ in batch or head_dim");
  HZ_CHECK(qv.size(1) % kv.size(1) == 0, ShapeError, "attention: n_heads (", qv.size(1),
           ") must be divisible by n_kv_heads (", kv.size(1), ")");
  HZ_CHECK(qv.dtype() == kv.dtype() && kv.dtype() == vv.dtype(), DTypeError,
           "attention: q, k, v dtypes differ");
  HZ_CHECK(qv.device().is_cpu(), NotImplementedError, "fused attention runs on CPU only until the CUDA backend issue");
  const Tensor qc = qv.contiguous(), kc = kv.contiguous(), vc = vv.contiguous();
  const Tensor cvals = logn_c.defined() ? logn_c.value() : Tensor();
  const Plan plan = make_plan(qc, kc, cfg, cvals);
  HZ_CHECK(plan.q_offset + plan.Tq <= plan.Tk || cfg.q_offset >= 0, ShapeError,
           "attention: Tq (", plan.Tq, ") > Tk (", plan.Tk, ") needs an explicit q_offset");
  Tensor out = Tensor::empty(qc.shape(), qc.dtype());
  Tensor lse = Tensor::empty({plan.B, plan.H, plan.Tq}, qc.dtype());
  cpu::dispatch_float(qc.dtype(), [&](auto tag) {
    using T = decltype(tag);
    forward_impl<T>(plan, qc, kc, vc, out, lse);
  });
  std::vector<ag::Variable> inputs{q, k, v};
  const bool with_c = cfg.logit == LogitKind::LogN && logn_c.defined();
  if (with_c) inputs.push_back(logn_c);
  AttnOutput res;
  res.lse = lse;
  res.out = ag::make_result(out, inputs, "fused_attention", [&] {
    return [plan, qc, kc, vc, out, lse, with_c](const Tensor& g, ag::Grads& gr) {
      const Tensor gc = g.contiguous();
      Tensor dq = Tensor::empty(qc.shape(), qc.dtype());
      Tensor dk_h = Tensor::empty({plan.B, plan.H, plan.Tk, plan.D}, qc.dtype());
      Tensor dv_h = Tensor::empty({plan.B, plan.H, plan.Tk, plan.D}, qc.dtype());
      std::vector<double> dc;
      const bool need_c = with_c && gr.needs(3);
      cpu::dispatch_float(qc.dtype(), [&](auto tag) {
        using T = decltype(tag);
        backward_impl<T>(plan, qc, kc, vc, out, lse, gc, dq, dk_h, dv_h, need_c ? &dc : nullptr);
      });
      if (gr.needs(0)) gr.set(0, dq);
      // sum per-query-head dk/dv over each GQA group, in head order
      auto group_sum = [&](const Tensor& t) {
        if (plan.G == 1) return t;
        return ops::sum(t.view({plan.B, plan.Hkv, plan.G, plan.Tk, plan.D}), 2, false);
      };
      if (gr.needs(1)) gr.set(1, group_sum(dk_h));
      if (gr.needs(2)) gr.set(2, group_sum(dv_h));
      if (need_c) {
        Tensor t = Tensor::from_vector(dc, {plan.H}, qc.dtype());
        gr.set(3, t);
      }
    };
  });
  return res;
}

}  // namespace hz::attn
