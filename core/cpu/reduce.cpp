// Horizon CPU kernels: reductions, softmax / log-softmax, cross-entropy.
// Every output element is accumulated by one thread in a fixed order (sums in double), so
// results are bitwise independent of the number of threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/fast_math.h"
#include "core/cpu/kernels.h"
#include "core/cpu/loops.h"

namespace hz::cpu {

namespace {
// x viewed as (outer, n, inner) around `dim` (x made contiguous by the caller).
struct Around {
  int64_t outer = 1, n = 1, inner = 1;
};
Around around(const Shape& s, int64_t dim) {
  Around a;
  for (int64_t i = 0; i < dim; ++i) a.outer *= s[i];
  a.n = s[dim];
  for (size_t i = dim + 1; i < s.size(); ++i) a.inner *= s[i];
  return a;
}
Shape reduced_shape(const Shape& s, int64_t dim, bool keepdim) {
  Shape r = s;
  if (keepdim) r[dim] = 1;
  else r.erase(r.begin() + dim);
  return r;
}
}  // namespace

Tensor reduce_dim(ReduceOp op, const Tensor& x_in, int64_t dim, bool keepdim, Tensor* argmax) {
  const Tensor x = x_in.contiguous();
  const Around g = around(x.shape(), dim);
  const Shape rs = reduced_shape(x.shape(), dim, keepdim);
  Tensor out = Tensor::empty(rs, x.dtype());
  if (op == ReduceOp::Max) {
    HZ_CHECK(g.n > 0, ShapeError, "max over an empty dim");
    *argmax = Tensor::empty(rs, DType::I64);
  }
  dispatch_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* xp = x.data<T>();
    T* op_ = out.data<T>();
    int64_t* ip = op == ReduceOp::Max ? argmax->data<int64_t>() : nullptr;
    const int64_t total = g.outer * g.inner;
#pragma omp parallel for schedule(static) if (total * g.n > 32768)
    for (int64_t oi = 0; oi < total; ++oi) {
      const int64_t o = oi / g.inner, i = oi % g.inner;
      const T* p = xp + o * g.n * g.inner + i;
      if (op == ReduceOp::Max) {
        T best = p[0];
        int64_t bi = 0;
        for (int64_t k = 1; k < g.n; ++k) {
          const T v = p[k * g.inner];
          if (v > best || (std::isnan(v) && !std::isnan(best))) { best = v; bi = k; }
        }
        op_[oi] = best;
        ip[oi] = bi;
      } else {
        double acc = 0.0;
        for (int64_t k = 0; k < g.n; ++k) acc += p[k * g.inner];
        if (op == ReduceOp::Mean) acc /= static_cast<double>(g.n);
        op_[oi] = static_cast<T>(acc);
      }
    }
  });
  return out;
}

Tensor reduce_all(ReduceOp op, const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  const int64_t n = x.numel();
  Tensor out = Tensor::empty({}, x.dtype());
  dispatch_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* xp = x.data<T>();
    // fixed chunks reduced in parallel, then combined in order: thread-count independent
    constexpr int64_t kChunk = 4096;
    const int64_t nchunks = std::max<int64_t>(1, (n + kChunk - 1) / kChunk);
    std::vector<double> part(nchunks, op == ReduceOp::Max ? -std::numeric_limits<double>::infinity() : 0.0);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t c = 0; c < nchunks; ++c) {
      const int64_t lo = c * kChunk, hi = std::min(n, lo + kChunk);
      double acc = part[c];
      if (op == ReduceOp::Max) {
        for (int64_t i = lo; i < hi; ++i) acc = (xp[i] > acc || std::isnan(static_cast<double>(xp[i]))) ? xp[i] : acc;
      } else {
        for (int64_t i = lo; i < hi; ++i) acc += xp[i];
      }
      part[c] = acc;
    }
    double acc = part[0];
    for (int64_t c = 1; c < nchunks; ++c)
      acc = op == ReduceOp::Max ? ((part[c] > acc || std::isnan(part[c])) ? part[c] : acc) : acc + part[c];
    if (op == ReduceOp::Mean) acc /= static_cast<double>(n);
    HZ_CHECK(!(op == ReduceOp::Max && n == 0), ShapeError, "max of an empty tensor");
    out.data<T>()[0] = static_cast<T>(acc);
  });
  return out;
}

// ---- softmax ----------------------------------------------------------------------------------
Tensor softmax(const Tensor& x_in, int64_t dim, bool log) {
  const Tensor x = x_in.contiguous();
  const Around g = around(x.shape(), dim);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* xp = x.data<T>();
    T* yp = out.data<T>();
    const int64_t total = g.outer * g.inner;
#pragma omp parallel for schedule(static) if (total * g.n > 16384)
    for (int64_t oi = 0; oi < total; ++oi) {
      const int64_t o = oi / g.inner, i = oi % g.inner;
      const int64_t base = o * g.n * g.inner + i, s = g.inner;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t k = 0; k < g.n; ++k) m = std::max(m, xp[base + k * s]);
      if (m == -std::numeric_limits<T>::infinity()) {  // no mass at all: softmax 0, log-softmax -inf
        for (int64_t k = 0; k < g.n; ++k) yp[base + k * s] = log ? m : T(0);
        continue;
      }
      double sum = 0;
      for (int64_t k = 0; k < g.n; ++k) sum += std::exp(static_cast<double>(xp[base + k * s] - m));
      if (log) {
        const T ls = static_cast<T>(std::log(sum));  // (x - m) - log(sum): no rounding of a large lse
        for (int64_t k = 0; k < g.n; ++k) yp[base + k * s] = (xp[base + k * s] - m) - ls;
      } else {
        const double inv = 1.0 / sum;
        for (int64_t k = 0; k < g.n; ++k)
          yp[base + k * s] = static_cast<T>(std::exp(static_cast<double>(xp[base + k * s] - m)) * inv);
      }
    }
  });
  return out;
}

Tensor softmax_backward(const Tensor& y_in, const Tensor& g_in, int64_t dim, bool log) {
  const Tensor y = y_in.contiguous(), gr = g_in.contiguous();
  const Around g = around(y.shape(), dim);
  Tensor out = Tensor::empty(y.shape(), y.dtype());
  dispatch_float(y.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* yp = y.data<T>();
    const T* gp = gr.data<T>();
    T* op_ = out.data<T>();
    const int64_t total = g.outer * g.inner;
#pragma omp parallel for schedule(static) if (total * g.n > 16384)
    for (int64_t oi = 0; oi < total; ++oi) {
      const int64_t o = oi / g.inner, i = oi % g.inner;
      const int64_t base = o * g.n * g.inner + i, s = g.inner;
      double acc = 0;
      if (log) {
        for (int64_t k = 0; k < g.n; ++k) acc += gp[base + k * s];
        for (int64_t k = 0; k < g.n; ++k)
          op_[base + k * s] = gp[base + k * s] - std::exp(yp[base + k * s]) * static_cast<T>(acc);
      } else {
        for (int64_t k = 0; k < g.n; ++k) acc += static_cast<double>(gp[base + k * s]) * yp[base + k * s];
        for (int64_t k = 0; k < g.n; ++k)
          op_[base + k * s] = yp[base + k * s] * (gp[base + k * s] - static_cast<T>(acc));
      }
    }
  });
  return out;
}

// ---- cross-entropy ----------------------------------------------------------------------------
namespace {
template <class T, class I>
void ce_rows(const T* lp, const I* tp, int64_t N, int64_t V, int64_t ignore, T* lse_out, double* nll) {
#pragma omp parallel for schedule(static) if (N * V > 16384)
  for (int64_t r = 0; r < N; ++r) {
    const T* row = lp + r * V;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t v = 0; v < V; ++v) m = std::max(m, row[v]);
    double s = 0;
    for (int64_t v = 0; v < V; ++v) s += fast_exp(row[v] - m);  // f32: vectorized; f64: std::exp
    const double lse = static_cast<double>(m) + std::log(s);
    lse_out[r] = static_cast<T>(lse);
    const int64_t t = static_cast<int64_t>(tp[r]);
    nll[r] = t == ignore ? 0.0 : lse - static_cast<double>(row[t]);
  }
}
template <class I>
void check_targets(const I* tp, int64_t N, int64_t V, int64_t ignore) {
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = static_cast<int64_t>(tp[r]);
    HZ_CHECK(t == ignore || (t >= 0 && t < V), ValueError, "cross_entropy: target ", t, " at row ",
             r, " is outside [0, ", V, ") and is not ignore_index ", ignore);
  }
}
}  // namespace

CrossEntropyResult cross_entropy(const Tensor& logits_in, const Tensor& targets_in,
                                 const Tensor& weights_in, int64_t ignore) {
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const Tensor weights = weights_in.defined() ? weights_in.to(DType::F64).contiguous() : Tensor();
  const int64_t N = logits.size(0), V = logits.size(1);
  CrossEntropyResult res;
  res.lse = Tensor::empty({N}, logits.dtype());
  std::vector<double> nll(N);
  dispatch_float(logits.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); dispatch_index(targets.dtype(), [&](auto i_tag_) { using I = decltype(i_tag_);
    check_targets(targets.data<I>(), N, V, ignore);
    ce_rows(logits.data<T>(), targets.data<I>(), N, V, ignore, res.lse.data<T>(), nll.data());
    const I* tp = targets.data<I>();
    double num = 0, den = 0;
    for (int64_t r = 0; r < N; ++r) {
      if (static_cast<int64_t>(tp[r]) == ignore) continue;
      const double w = weights.defined() ? weights.data<double>()[r] : 1.0;
      num += w * nll[r];
      den += w;
    }
    res.weight_sum = den;
    res.loss = Tensor::full({}, den > 0 ? num / den : 0.0, logits.dtype());
  }); });
  return res;
}

Tensor cross_entropy_backward(const Tensor& logits_in, const Tensor& targets_in,
                              const Tensor& weights_in, const Tensor& lse_in, double weight_sum,
                              int64_t ignore, double gscale) {
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const Tensor lse = lse_in.contiguous();
  const Tensor weights = weights_in.defined() ? weights_in.to(DType::F64).contiguous() : Tensor();
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor out = Tensor::empty({N, V}, logits.dtype());
  dispatch_float(logits.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); dispatch_index(targets.dtype(), [&](auto i_tag_) { using I = decltype(i_tag_);
    check_targets(targets.data<I>(), N, V, ignore);
    const T* lp = logits.data<T>();
    const T* sp = lse.data<T>();
    const I* tp = targets.data<I>();
    T* op_ = out.data<T>();
    const double* wp = weights.defined() ? weights.data<double>() : nullptr;
#pragma omp parallel for schedule(static) if (N * V > 16384)
    for (int64_t r = 0; r < N; ++r) {
      const int64_t t = static_cast<int64_t>(tp[r]);
      T* o = op_ + r * V;
      const double w = (t == ignore || weight_sum <= 0) ? 0.0 : (wp ? wp[r] : 1.0) / weight_sum;
      if (w == 0.0) {
        for (int64_t v = 0; v < V; ++v) o[v] = T(0);
        continue;
      }
      const T c = static_cast<T>(w * gscale);
      const T* row = lp + r * V;
      for (int64_t v = 0; v < V; ++v) o[v] = c * fast_exp(row[v] - sp[r]);
      o[t] -= c;
    }
  }); });
  return out;
}

Tensor cross_entropy_rows(const Tensor& logits_in, const Tensor& targets_in, int64_t ignore) {
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor out = Tensor::empty({N}, logits.dtype());
  dispatch_float(logits.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); dispatch_index(targets.dtype(), [&](auto i_tag_) { using I = decltype(i_tag_);
    check_targets(targets.data<I>(), N, V, ignore);
    std::vector<T> lse(N);
    std::vector<double> nll(N);
    ce_rows(logits.data<T>(), targets.data<I>(), N, V, ignore, lse.data(), nll.data());
    for (int64_t r = 0; r < N; ++r) out.data<T>()[r] = static_cast<T>(nll[r]);
  }); });
  return out;
}

}  // namespace hz::cpu
