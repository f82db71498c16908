// Horizon CPU kernels: reductions, softmax / log-softmax, cross-entropy.
// Every output element is accumulated by one thread in a fixed order (sums in double), so
// results are bitwise independent of the number of threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/fast_math.h"
#include "core/math.h"
#include "core/cpu/kernels.h"
#include "core/cpu/loops.h"

namespace hz::cpu {

using math::load;
using math::store;

Tensor reduce_dim(ReduceOp op, const Tensor& x_in, int64_t dim, bool keepdim, Tensor* argmax) {
  const Tensor x = x_in.contiguous();
  const Around g = around(x.shape(), dim);
  const Shape rs = reduced_shape(x.shape(), dim, keepdim);
  Tensor out = Tensor::empty(rs, x.dtype());
  if (op == ReduceOp::Max) {
    HZ_CHECK(g.n > 0, ShapeError, "max over an empty dim");
    *argmax = Tensor::empty(rs, DType::I64);
  }
  dispatch_all_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); using A = math::acc_t<T>;
    const T* xp = static_cast<const T*>(x.raw_data());
    T* op_ = static_cast<T*>(out.raw_data());
    int64_t* ip = op == ReduceOp::Max ? argmax->data<int64_t>() : nullptr;
    const int64_t total = g.outer * g.inner;
#pragma omp parallel for schedule(static) if (total * g.n > 32768)
    for (int64_t oi = 0; oi < total; ++oi) {
      const int64_t o = oi / g.inner, i = oi % g.inner;
      const T* p = xp + o * g.n * g.inner + i;
      if (op == ReduceOp::Max) {
        A best = load(p[0]);
        int64_t bi = 0;
        for (int64_t k = 1; k < g.n; ++k) {
          const A v = load(p[k * g.inner]);
          if (v > best || (std::isnan(v) && !std::isnan(best))) { best = v; bi = k; }
        }
        op_[oi] = store<T>(best);
        ip[oi] = bi;
      } else {
        double acc = 0.0;
        for (int64_t k = 0; k < g.n; ++k) acc += load(p[k * g.inner]);
        if (op == ReduceOp::Mean) acc /= static_cast<double>(g.n);
        op_[oi] = store<T>(acc);
      }
    }
  });
  return out;
}

Tensor cumsum(const Tensor& x_in, int64_t dim, bool reverse) {
  const Tensor x = x_in.contiguous();
  const Around g = around(x.shape(), dim);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_all_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* xp = static_cast<const T*>(x.raw_data());
    T* op_ = static_cast<T*>(out.raw_data());
    const int64_t total = g.outer * g.inner;
#pragma omp parallel for schedule(static) if (total * g.n > 32768)
    for (int64_t oi = 0; oi < total; ++oi) {
      const int64_t o = oi / g.inner, i = oi % g.inner, base = o * g.n * g.inner + i;
      double acc = 0.0;
      for (int64_t s = 0; s < g.n; ++s) {
        const int64_t k = base + (reverse ? g.n - 1 - s : s) * g.inner;
        acc += load(xp[k]);
        op_[k] = store<T>(acc);
      }
    }
  });
  return out;
}

Tensor reduce_all(ReduceOp op, const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  const int64_t n = x.numel();
  Tensor out = Tensor::empty({}, x.dtype());
  dispatch_all_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* xp = static_cast<const T*>(x.raw_data());
    // fixed chunks reduced in parallel, then combined in order: thread-count independent
    constexpr int64_t kChunk = 4096;
    const int64_t nchunks = std::max<int64_t>(1, (n + kChunk - 1) / kChunk);
    std::vector<double> part(nchunks, op == ReduceOp::Max ? -std::numeric_limits<double>::infinity() : 0.0);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t c = 0; c < nchunks; ++c) {
      const int64_t lo = c * kChunk, hi = std::min(n, lo + kChunk);
      double acc = part[c];
      if (op == ReduceOp::Max) {
        for (int64_t i = lo; i < hi; ++i) {
          const double v = load(xp[i]);
          acc = (v > acc || std::isnan(v)) ? v : acc;
        }
      } else {
        for (int64_t i = lo; i < hi; ++i) acc += load(xp[i]);
      }
      part[c] = acc;
    }
    double acc = part[0];
    for (int64_t c = 1; c < nchunks; ++c)
      acc = op == ReduceOp::Max ? ((part[c] > acc || std::isnan(part[c])) ? part[c] : acc) : acc + part[c];
    if (op == ReduceOp::Mean) acc /= static_cast<double>(n);
    HZ_CHECK(!(op == ReduceOp::Max && n == 0), ShapeError, "max of an empty tensor");
    static_cast<T*>(out.raw_data())[0] = store<T>(acc);
  });
  return out;
}

// ---- softmax ----------------------------------------------------------------------------------
Tensor softmax(const Tensor& x_in, int64_t dim, bool log) {
  const Tensor x = x_in.contiguous();
  const Around g = around(x.shape(), dim);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_all_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); using A = math::acc_t<T>;
    const T* xp = static_cast<const T*>(x.raw_data());
    T* yp = static_cast<T*>(out.raw_data());
    const int64_t total = g.outer * g.inner;
#pragma omp parallel for schedule(static) if (total * g.n > 16384)
    for (int64_t oi = 0; oi < total; ++oi) {
      const int64_t o = oi / g.inner, i = oi % g.inner;
      const int64_t base = o * g.n * g.inner + i, s = g.inner;
      A m = -std::numeric_limits<A>::infinity();
      for (int64_t k = 0; k < g.n; ++k) m = std::max(m, load(xp[base + k * s]));
      if (m == -std::numeric_limits<A>::infinity()) {  // no mass at all: softmax 0, log-softmax -inf
        for (int64_t k = 0; k < g.n; ++k) yp[base + k * s] = store<T>(log ? m : A(0));
        continue;
      }
      double sum = 0;
      for (int64_t k = 0; k < g.n; ++k) sum += std::exp(static_cast<double>(load(xp[base + k * s]) - m));
      if (log) {
        const A ls = static_cast<A>(std::log(sum));  // (x - m) - log(sum): no rounding of a large lse
        for (int64_t k = 0; k < g.n; ++k) yp[base + k * s] = store<T>((load(xp[base + k * s]) - m) - ls);
      } else {
        const double inv = 1.0 / sum;
        for (int64_t k = 0; k < g.n; ++k)
          yp[base + k * s] = store<T>(static_cast<A>(std::exp(static_cast<double>(load(xp[base + k * s]) - m)) * inv));
      }
    }
  });
  return out;
}

Tensor softmax_backward(const Tensor& y_in, const Tensor& g_in, int64_t dim, bool log) {
  const Tensor y = y_in.contiguous(), gr = g_in.contiguous();
  const Around g = around(y.shape(), dim);
  Tensor out = Tensor::empty(y.shape(), y.dtype());
  dispatch_all_float(y.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); using A = math::acc_t<T>;
    const T* yp = static_cast<const T*>(y.raw_data());
    const T* gp = static_cast<const T*>(gr.raw_data());
    T* op_ = static_cast<T*>(out.raw_data());
    const int64_t total = g.outer * g.inner;
#pragma omp parallel for schedule(static) if (total * g.n > 16384)
    for (int64_t oi = 0; oi < total; ++oi) {
      const int64_t o = oi / g.inner, i = oi % g.inner;
      const int64_t base = o * g.n * g.inner + i, s = g.inner;
      double acc = 0;
      if (log) {
        for (int64_t k = 0; k < g.n; ++k) acc += load(gp[base + k * s]);
        for (int64_t k = 0; k < g.n; ++k)
          op_[base + k * s] = store<T>(load(gp[base + k * s]) - std::exp(load(yp[base + k * s])) * static_cast<A>(acc));
      } else {
        for (int64_t k = 0; k < g.n; ++k)
          acc += static_cast<double>(load(gp[base + k * s])) * load(yp[base + k * s]);
        for (int64_t k = 0; k < g.n; ++k)
          op_[base + k * s] = store<T>(load(yp[base + k * s]) * (load(gp[base + k * s]) - static_cast<A>(acc)));
      }
    }
  });
  return out;
}

// ---- cross-entropy ----------------------------------------------------------------------------
// Logits may be bf16; the row log-sum-exp, the loss and the per-row NLL are in the compute type
// (f32 for bf16 logits), the logits gradient in the logits' dtype.
namespace {
template <class T, class I, class A>
void ce_rows(const T* lp, const I* tp, int64_t N, int64_t V, int64_t ignore, A* lse_out, double* nll) {
#pragma omp parallel if (N * V > 16384)
  {
    // bf16 rows are widened to f32 first: a loop over the bf16 struct does not vectorize
    std::vector<A> wide(std::is_same_v<T, A> ? 0 : V);
#pragma omp for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const A* row;
    if constexpr (std::is_same_v<T, A>) {
      row = lp + r * V;
    } else {
      widen_bf16(lp + r * V, wide.data(), V);
      row = wide.data();
    }
    A m = -std::numeric_limits<A>::infinity();
    for (int64_t v = 0; v < V; ++v) m = std::max(m, row[v]);
    const double s = lane_sum(V, [&](int64_t v) -> double { return fast_exp(row[v] - m); });  // f32: vectorized
    const double lse = static_cast<double>(m) + std::log(s);
    lse_out[r] = static_cast<A>(lse);
    const int64_t t = static_cast<int64_t>(tp[r]);
    nll[r] = t == ignore ? 0.0 : lse - static_cast<double>(row[t]);
  }
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
  const DType adt = acc_dtype(logits.dtype());
  CrossEntropyResult res;
  res.lse = Tensor::empty({N}, adt);
  std::vector<double> nll(N);
  dispatch_all_float(logits.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); using A = math::acc_t<T>;
   dispatch_index(targets.dtype(), [&](auto i_tag_) { using I = decltype(i_tag_);
    check_targets(targets.data<I>(), N, V, ignore);
    ce_rows(static_cast<const T*>(logits.raw_data()), targets.data<I>(), N, V, ignore,
            static_cast<A*>(res.lse.raw_data()), nll.data());
    const I* tp = targets.data<I>();
    double num = 0, den = 0;
    for (int64_t r = 0; r < N; ++r) {
      if (static_cast<int64_t>(tp[r]) == ignore) continue;
      const double w = weights.defined() ? weights.data<double>()[r] : 1.0;
      num += w * nll[r];
      den += w;
    }
    res.weight_sum = den;
    res.loss = Tensor::full({}, den > 0 ? num / den : 0.0, adt);
  }); });
  return res;
}

Tensor cross_entropy_backward(const Tensor& logits_in, const Tensor& targets_in,
                              const Tensor& weights_in, const Tensor& lse_in, double weight_sum,
                              int64_t ignore, double gscale) {
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const Tensor lse = lse_in.to(acc_dtype(logits.dtype())).contiguous();
  const Tensor weights = weights_in.defined() ? weights_in.to(DType::F64).contiguous() : Tensor();
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor out = Tensor::empty({N, V}, logits.dtype());
  dispatch_all_float(logits.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); using A = math::acc_t<T>;
   dispatch_index(targets.dtype(), [&](auto i_tag_) { using I = decltype(i_tag_);
    check_targets(targets.data<I>(), N, V, ignore);
    const T* lp = static_cast<const T*>(logits.raw_data());
    const A* sp = static_cast<const A*>(lse.raw_data());
    const I* tp = targets.data<I>();
    T* op_ = static_cast<T*>(out.raw_data());
    const double* wp = weights.defined() ? weights.data<double>() : nullptr;
#pragma omp parallel for schedule(static) if (N * V > 16384)
    for (int64_t r = 0; r < N; ++r) {
      const int64_t t = static_cast<int64_t>(tp[r]);
      T* o = op_ + r * V;
      const double w = (t == ignore || weight_sum <= 0) ? 0.0 : (wp ? wp[r] : 1.0) / weight_sum;
      if (w == 0.0) {
        for (int64_t v = 0; v < V; ++v) o[v] = store<T>(A(0));
        continue;
      }
      const A c = static_cast<A>(w * gscale);
      const T* row = lp + r * V;
      if constexpr (std::is_same_v<T, A>) {
        for (int64_t v = 0; v < V; ++v) o[v] = c * fast_exp(row[v] - sp[r]);
        o[t] -= c;
      } else {
        // the target's term is subtracted before rounding to the storage type
        for (int64_t v = 0; v < V; ++v) o[v] = store<T>(c * fast_exp(load(row[v]) - sp[r]));
        o[t] = store<T>(c * fast_exp(load(row[t]) - sp[r]) - c);
      }
    }
  }); });
  return out;
}

Tensor cross_entropy_rows(const Tensor& logits_in, const Tensor& targets_in, int64_t ignore) {
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor out = Tensor::empty({N}, DType::F64);  // the rows' NLL as cross_entropy sums them
  dispatch_all_float(logits.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); using A = math::acc_t<T>;
   dispatch_index(targets.dtype(), [&](auto i_tag_) { using I = decltype(i_tag_);
    check_targets(targets.data<I>(), N, V, ignore);
    std::vector<A> lse(N);
    ce_rows(static_cast<const T*>(logits.raw_data()), targets.data<I>(), N, V, ignore, lse.data(), out.data<double>());
  }); });
  return out;
}

}  // namespace hz::cpu
