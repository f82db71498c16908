// Horizon CUDA kernels: reductions (one dim, all elements, sums of squares), the max backward's
// scatter, softmax / log-softmax and their backward, cross-entropy.
//
// Layout around a reduced dim: x contiguous viewed as (outer, n, inner). Long rows (inner == 1,
// n >= 64) get one block per row and a fixed-tree block reduction; otherwise one thread per output
// walks its n elements in order. Partial results are always combined in a fixed order.
#include <math_constants.h>

#include <array>
#include <limits>
#include <vector>

#include "core/cuda/common.cuh"
#include "core/cuda/kernels.cuh"

namespace hz::cuda {

using math::load;
using math::store;

namespace {

bool row_blocks(const Around& g) { return g.inner == 1 && g.n >= 64; }

// (value, index) candidates for max with argmax: the first NaN if any, else the first maximum.
template <class A>
struct Arg {
  A v;
  int64_t i;
};
template <class A>
__device__ __forceinline__ Arg<A> better(Arg<A> a, Arg<A> b) {
  const bool na = a.v != a.v, nb = b.v != b.v;
  if (na || nb) {
    if (na && nb) return a.i < b.i ? a : b;
    return na ? a : b;
  }
  if (a.v > b.v) return a;
  if (b.v > a.v) return b;
  return a.i < b.i ? a : b;
}

// ---- one dim --------------------------------------------------------------------------------
template <class T>
__global__ void reduce_rows_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t* __restrict__ arg,
                                   int64_t n, int op) {
  __shared__ double sd[32];
  __shared__ Arg<math::acc_t<T>> sa[kThreads];
  using A = math::acc_t<T>;
  const T* row = x + blockIdx.x * n;
  if (op == static_cast<int>(ReduceOp::Max)) {
    Arg<A> best{load(row[0]), 0};
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) best = better(best, Arg<A>{load(row[k]), k});
    sa[threadIdx.x] = best;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) sa[threadIdx.x] = better(sa[threadIdx.x], sa[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      out[blockIdx.x] = store<T>(sa[0].v);
      arg[blockIdx.x] = sa[0].i;
    }
    return;
  }
  double acc = 0.0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) acc += static_cast<double>(load(row[k]));
  acc = block_reduce(acc, sd);
  if (threadIdx.x == 0) {
    if (op == static_cast<int>(ReduceOp::Mean)) acc /= static_cast<double>(n);
    out[blockIdx.x] = store<T>(acc);
  }
}

template <class T>
__global__ void reduce_cols_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t* __restrict__ arg,
                                   int64_t outer, int64_t n, int64_t inner, int op) {
  using A = math::acc_t<T>;
  const int64_t total = outer * inner;
  for (int64_t oi = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; oi < total;
       oi += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = oi / inner, i = oi % inner;
    const T* p = x + o * n * inner + i;
    if (op == static_cast<int>(ReduceOp::Max)) {
      Arg<A> best{load(p[0]), 0};
      for (int64_t k = 1; k < n; ++k) best = better(best, Arg<A>{load(p[k * inner]), k});
      out[oi] = store<T>(best.v);
      arg[oi] = best.i;
    } else {
      double acc = 0.0;
      for (int64_t k = 0; k < n; ++k) acc += static_cast<double>(load(p[k * inner]));
      if (op == static_cast<int>(ReduceOp::Mean)) acc /= static_cast<double>(n);
      out[oi] = store<T>(acc);
    }
  }
}

// One thread per (outer, inner) line scans its n elements in order (deterministic; the lines are
// B x H rows of at most a sequence, FoX's forget-gate prefix sums).
template <class T>
__global__ void cumsum_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t outer, int64_t n, int64_t inner,
                              bool reverse) {
  using A = math::acc_t<T>;
  const int64_t total = outer * inner;
  for (int64_t oi = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; oi < total;
       oi += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = oi / inner, i = oi % inner, base = o * n * inner + i;
    A acc = A(0);
    for (int64_t s = 0; s < n; ++s) {
      const int64_t k = base + (reverse ? n - 1 - s : s) * inner;
      acc += load(x[k]);
      out[k] = store<T>(acc);
    }
  }
}

// ---- all elements: fixed chunks per block, then one block over the partials -------------------
constexpr int kMaxPartials = 1024;

template <class T>
__global__ void partial_kernel(const T* __restrict__ x, int64_t n, int64_t chunk, int op, bool square,
                               double* __restrict__ partials) {
  __shared__ double sd[32];
  const int64_t lo = blockIdx.x * chunk, hi = min(n, lo + chunk);
  const bool mx = op == static_cast<int>(ReduceOp::Max);
  double acc = mx ? -CUDART_INF : 0.0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const double v = static_cast<double>(load(x[i]));
    if (mx) acc = (v > acc || v != v) ? v : acc;
    else acc += square ? v * v : v;
  }
  if (mx) {
    // NaN-propagating max over the block: NaN compares false, so carry it explicitly
    __shared__ int any_nan;
    if (threadIdx.x == 0) any_nan = 0;
    __syncthreads();
    if (acc != acc) any_nan = 1;
    const double m = block_reduce<double, true>(acc != acc ? -CUDART_INF : acc, sd);
    if (threadIdx.x == 0) partials[blockIdx.x] = any_nan ? CUDART_NAN : m;
  } else {
    acc = block_reduce(acc, sd);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
  }
}

__global__ void final_kernel(const double* __restrict__ partials, int64_t np, int op, double* __restrict__ out) {
  __shared__ double sd[32];
  const bool mx = op == static_cast<int>(ReduceOp::Max);
  double acc = mx ? -CUDART_INF : 0.0;
  int nan = 0;
  for (int64_t i = threadIdx.x; i < np; i += blockDim.x) {
    const double v = partials[i];
    if (mx) {
      if (v != v) nan = 1;
      else acc = v > acc ? v : acc;
    } else {
      acc += v;
    }
  }
  if (mx) {
    __shared__ int any_nan;
    if (threadIdx.x == 0) any_nan = 0;
    __syncthreads();
    if (nan) any_nan = 1;
    const double m = block_reduce<double, true>(acc, sd);
    if (threadIdx.x == 0) out[0] = any_nan ? CUDART_NAN : m;
  } else {
    acc = block_reduce(acc, sd);
    if (threadIdx.x == 0) out[0] = acc;
  }
}

// Launches the partial sums of x (contiguous) into partials[0, nb); returns nb.
int64_t launch_partials(const Tensor& x, int op, bool square, double* partials, int dev) {
  const int64_t n = x.numel();
  const int64_t nb = std::max<int64_t>(1, std::min<int64_t>(kMaxPartials, (n + 4095) / 4096));
  const int64_t chunk = (n + nb - 1) / nb;
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    partial_kernel<T><<<static_cast<unsigned>(nb), kThreads, 0, stream(dev)>>>(ptr<const T>(x), n, std::max<int64_t>(chunk, 1),
                                                                               op, square, partials);
    HZ_CUDA_LAUNCHED("reduce partials");
  });
  return nb;
}

template <class T>
__global__ void store_scalar_kernel(const double* __restrict__ v, T* __restrict__ out, double scale) {
  out[0] = store<T>(v[0] * scale);
}

}  // namespace

Tensor reduce_dim(ReduceOp op, const Tensor& x_in, int64_t dim, bool keepdim, Tensor* argmax) {
  const Tensor x = x_in.contiguous();
  const Around g = around(x.shape(), dim);
  const Shape rs = reduced_shape(x.shape(), dim, keepdim);
  Tensor out = Tensor::empty(rs, x.dtype(), x.device());
  if (op == ReduceOp::Max) {
    HZ_CHECK(g.n > 0, ShapeError, "max over an empty dim");
    *argmax = Tensor::empty(rs, DType::I64, x.device());
  }
  const int64_t total = g.outer * g.inner;
  if (total == 0) return out;
  const int dev = x.device().index;
  use_device(dev);
  if (g.n == 0) {  // empty sums are zero
    out.zero_();
    return out;
  }
  int64_t* ap = op == ReduceOp::Max ? argmax->data<int64_t>() : nullptr;
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (row_blocks(g))
      reduce_rows_kernel<T><<<static_cast<unsigned>(g.outer), kThreads, 0, stream(dev)>>>(ptr<const T>(x), ptr<T>(out), ap,
                                                                                           g.n, static_cast<int>(op));
    else
      reduce_cols_kernel<T><<<blocks_for(total), kThreads, 0, stream(dev)>>>(ptr<const T>(x), ptr<T>(out), ap, g.outer,
                                                                             g.n, g.inner, static_cast<int>(op));
    HZ_CUDA_LAUNCHED("reduce_dim");
  });
  return out;
}

Tensor cumsum(const Tensor& x_in, int64_t dim, bool reverse) {
  const Tensor x = x_in.contiguous();
  const Around g = around(x.shape(), dim);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t total = g.outer * g.inner;
  if (total == 0 || g.n == 0) return out;
  const int dev = x.device().index;
  use_device(dev);
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    cumsum_kernel<T><<<blocks_for(total), kThreads, 0, stream(dev)>>>(ptr<const T>(x), ptr<T>(out), g.outer, g.n,
                                                                      g.inner, reverse);
    HZ_CUDA_LAUNCHED("cumsum");
  });
  return out;
}

Tensor reduce_all(ReduceOp op, const Tensor& x_in) {
  const Tensor x = x_in.contiguous();
  const int64_t n = x.numel();
  HZ_CHECK(!(op == ReduceOp::Max && n == 0), ShapeError, "max of an empty tensor");
  Tensor out = Tensor::empty({}, x.dtype(), x.device());
  if (n == 0) {
    out.zero_();
    return out;
  }
  const int dev = x.device().index;
  use_device(dev);
  Tensor partials = Tensor::empty({kMaxPartials + 1}, DType::F64, x.device());
  double* pp = partials.data<double>();
  const int64_t nb = launch_partials(x, static_cast<int>(op), false, pp, dev);
  final_kernel<<<1, kThreads, 0, stream(dev)>>>(pp, nb, static_cast<int>(op), pp + kMaxPartials);
  HZ_CUDA_LAUNCHED("reduce_all");
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    store_scalar_kernel<T><<<1, 1, 0, stream(dev)>>>(pp + kMaxPartials, ptr<T>(out),
                                                     op == ReduceOp::Mean ? 1.0 / static_cast<double>(n) : 1.0);
    HZ_CUDA_LAUNCHED("reduce_all store");
  });
  return out;
}

double sum_squares(const std::vector<Tensor>& xs) {
  const int dev = xs.front().device().index;
  use_device(dev);
  std::vector<Tensor> keep;
  int64_t total = 0;
  for (const Tensor& x : xs) {
    keep.push_back(x.contiguous());
    total += std::max<int64_t>(1, std::min<int64_t>(kMaxPartials, (x.numel() + 4095) / 4096));
  }
  Tensor partials = Tensor::zeros({total + 1}, DType::F64, xs.front().device());
  double* pp = partials.data<double>();
  int64_t off = 0;
  for (const Tensor& x : keep) {
    if (x.numel() == 0) {
      off += 1;  // that slot stays 0
      continue;
    }
    off += launch_partials(x, static_cast<int>(ReduceOp::Sum), true, pp + off, dev);
  }
  final_kernel<<<1, kThreads, 0, stream(dev)>>>(pp, off, static_cast<int>(ReduceOp::Sum), pp + total);
  HZ_CUDA_LAUNCHED("sum_squares");
  double r = 0.0;
  HZ_CUDA_CHECK(cudaMemcpyAsync(&r, pp + total, sizeof(double), cudaMemcpyDeviceToHost, stream(dev)));
  HZ_CUDA_CHECK(cudaStreamSynchronize(stream(dev)));
  return r;
}

// ---- scatter (max backward) ---------------------------------------------------------------------
template <class T>
__global__ void scatter_kernel(const T* __restrict__ src, const int64_t* __restrict__ idx, T* __restrict__ out,
                               int64_t outer, int64_t n, int64_t inner) {
  const int64_t total = outer * inner;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < total;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = j / inner, i = j % inner, k = idx[j];
    if (k >= 0 && k < n) out[(o * n + k) * inner + i] = src[j];
  }
}

Tensor scatter_dim(const Tensor& src_in, const Tensor& index_in, int64_t dim, const Shape& out_shape) {
  Tensor out = Tensor::zeros(out_shape, src_in.dtype(), src_in.device());
  const Tensor src = src_in.contiguous(), ix = index_in.contiguous();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= out_shape[i];
  for (size_t i = dim + 1; i < out_shape.size(); ++i) inner *= out_shape[i];
  if (outer * inner == 0) return out;
  const int dev = src.device().index;
  use_device(dev);
  dispatch_dtype(src.dtype(), [&](auto tag) {
    using T = decltype(tag);
    scatter_kernel<T><<<blocks_for(outer * inner), kThreads, 0, stream(dev)>>>(ptr<const T>(src), ix.data<int64_t>(),
                                                                                ptr<T>(out), outer, out_shape[dim], inner);
    HZ_CUDA_LAUNCHED("scatter_dim");
  });
  return out;
}

// ---- softmax ------------------------------------------------------------------------------------
namespace {
template <class T>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, bool log) {
  using A = math::acc_t<T>;
  __shared__ A sm[32];
  const T* xr = x + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) m = max(m, load(xr[k]));
  m = block_reduce<A, true>(m, sm);
  if (m == -std::numeric_limits<A>::infinity()) {  // no mass at all: softmax 0, log-softmax -inf
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) yr[k] = store<T>(log ? m : A(0));
    return;
  }
  A s = 0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) s += math::exp_(load(xr[k]) - m);
  s = block_reduce(s, sm);
  const A ls = math::log_(s), inv = A(1) / s;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const A d = load(xr[k]) - m;
    yr[k] = store<T>(log ? d - ls : math::exp_(d) * inv);
  }
}

template <class T>
__global__ void softmax_cols_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n,
                                    int64_t inner, bool log) {
  using A = math::acc_t<T>;
  const int64_t total = outer * inner;
  for (int64_t oi = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; oi < total;
       oi += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = oi / inner, i = oi % inner, base = o * n * inner + i;
    A m = -std::numeric_limits<A>::infinity();
    for (int64_t k = 0; k < n; ++k) m = max(m, load(x[base + k * inner]));
    if (m == -std::numeric_limits<A>::infinity()) {
      for (int64_t k = 0; k < n; ++k) y[base + k * inner] = store<T>(log ? m : A(0));
      continue;
    }
    A s = 0;
    for (int64_t k = 0; k < n; ++k) s += math::exp_(load(x[base + k * inner]) - m);
    const A ls = math::log_(s), inv = A(1) / s;
    for (int64_t k = 0; k < n; ++k) {
      const A d = load(x[base + k * inner]) - m;
      y[base + k * inner] = store<T>(log ? d - ls : math::exp_(d) * inv);
    }
  }
}

// softmax: dx = y (g - sum(g y));  log_softmax: dx = g - exp(y) sum(g)
template <class T>
__global__ void softmax_bwd_rows_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                                        int64_t n, bool log) {
  using A = math::acc_t<T>;
  __shared__ A sm[32];
  const int64_t base = blockIdx.x * n;
  A acc = 0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
    acc += log ? load(g[base + k]) : load(g[base + k]) * load(y[base + k]);
  acc = block_reduce(acc, sm);
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
    const A gv = load(g[base + k]), yv = load(y[base + k]);
    dx[base + k] = store<T>(log ? gv - math::exp_(yv) * acc : yv * (gv - acc));
  }
}

template <class T>
__global__ void softmax_bwd_cols_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                                        int64_t outer, int64_t n, int64_t inner, bool log) {
  using A = math::acc_t<T>;
  const int64_t total = outer * inner;
  for (int64_t oi = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; oi < total;
       oi += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = oi / inner, i = oi % inner, base = o * n * inner + i;
    A acc = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t j = base + k * inner;
      acc += log ? load(g[j]) : load(g[j]) * load(y[j]);
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t j = base + k * inner;
      const A gv = load(g[j]), yv = load(y[j]);
      dx[j] = store<T>(log ? gv - math::exp_(yv) * acc : yv * (gv - acc));
    }
  }
}
}  // namespace

Tensor softmax(const Tensor& x_in, int64_t dim, bool log) {
  const Tensor x = x_in.contiguous();
  const Around g = around(x.shape(), dim);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return out;
  const int dev = x.device().index;
  use_device(dev);
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (row_blocks(g))
      softmax_rows_kernel<T><<<static_cast<unsigned>(g.outer), kThreads, 0, stream(dev)>>>(ptr<const T>(x), ptr<T>(out), g.n, log);
    else
      softmax_cols_kernel<T><<<blocks_for(g.outer * g.inner), kThreads, 0, stream(dev)>>>(ptr<const T>(x), ptr<T>(out),
                                                                                          g.outer, g.n, g.inner, log);
    HZ_CUDA_LAUNCHED("softmax");
  });
  return out;
}

Tensor softmax_backward(const Tensor& y_in, const Tensor& g_in, int64_t dim, bool log) {
  const Tensor y = y_in.contiguous(), gr = g_in.contiguous();
  const Around g = around(y.shape(), dim);
  Tensor out = Tensor::empty(y.shape(), y.dtype(), y.device());
  if (y.numel() == 0) return out;
  const int dev = y.device().index;
  use_device(dev);
  dispatch_floating(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (row_blocks(g))
      softmax_bwd_rows_kernel<T><<<static_cast<unsigned>(g.outer), kThreads, 0, stream(dev)>>>(
          ptr<const T>(y), ptr<const T>(gr), ptr<T>(out), g.n, log);
    else
      softmax_bwd_cols_kernel<T><<<blocks_for(g.outer * g.inner), kThreads, 0, stream(dev)>>>(
          ptr<const T>(y), ptr<const T>(gr), ptr<T>(out), g.outer, g.n, g.inner, log);
    HZ_CUDA_LAUNCHED("softmax_backward");
  });
  return out;
}

// ---- cross-entropy --------------------------------------------------------------------------------
// Forward: one block per row computes the row max, the log-sum-exp (f32 for f32/bf16 logits) and
// the row's NLL (double); a single block then sums the weighted NLLs in a fixed tree, counts
// targets outside [0, V) that are not ignore_index and records the first such row. Backward reads
// each logit once: d = c (exp(x - lse) - [v == t]) with c = w gscale / sum(w), no second softmax pass.
namespace {
template <class T, class I>
__global__ void ce_rows_kernel(const T* __restrict__ logits, const I* __restrict__ targets, int64_t V,
                               int64_t ignore, math::acc_t<T>* __restrict__ lse, double* __restrict__ nll) {
  using A = math::acc_t<T>;
  __shared__ A sm[32];
  const int64_t r = blockIdx.x;
  const T* row = logits + r * V;
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) m = max(m, load(row[v]));
  m = block_reduce<A, true>(m, sm);
  A s = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += math::exp_(load(row[v]) - m);
  s = block_reduce(s, sm);
  if (threadIdx.x == 0) {
    const double l = static_cast<double>(m) + ::log(static_cast<double>(s));
    lse[r] = static_cast<A>(l);
    const int64_t t = static_cast<int64_t>(targets[r]);
    nll[r] = (t == ignore || t < 0 || t >= V) ? 0.0 : l - static_cast<double>(load(row[t]));
  }
}

// out[0] = sum_r w_r nll_r (rows not ignored), out[1] = sum_r w_r, out[2] = number of bad targets,
// out[3] = first bad row, out[4] = its target.
template <class I>
__global__ void ce_sum_kernel(const double* __restrict__ nll, const I* __restrict__ targets,
                              const double* __restrict__ w, int64_t N, int64_t V, int64_t ignore,
                              double* __restrict__ out) {
  __shared__ double sd[32];
  double num = 0, den = 0, bad = 0, first = 1e300;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
    const int64_t t = static_cast<int64_t>(targets[r]);
    if (t == ignore) continue;
    if (t < 0 || t >= V) {
      bad += 1;
      first = min(first, static_cast<double>(r));
      continue;
    }
    const double wr = w ? w[r] : 1.0;
    num += wr * nll[r];
    den += wr;
  }
  num = block_reduce(num, sd);
  den = block_reduce(den, sd);
  bad = block_reduce(bad, sd);
  first = -block_reduce<double, true>(-first, sd);
  if (threadIdx.x == 0) {
    out[0] = num;
    out[1] = den;
    out[2] = bad;
    out[3] = first;
    out[4] = bad > 0 ? static_cast<double>(targets[static_cast<int64_t>(first)]) : 0.0;
  }
}

template <class T>
__global__ void ce_loss_kernel(const double* __restrict__ sums, T* __restrict__ loss) {
  loss[0] = store<T>(sums[1] > 0 ? sums[0] / sums[1] : 0.0);
}

template <class T, class I>
__global__ void ce_bwd_kernel(const T* __restrict__ logits, const I* __restrict__ targets, const double* __restrict__ w,
                              const math::acc_t<T>* __restrict__ lse, int64_t V, int64_t ignore, double inv_wsum,
                              double gscale, T* __restrict__ out) {
  using A = math::acc_t<T>;
  const int64_t r = blockIdx.x;
  const int64_t t = static_cast<int64_t>(targets[r]);
  const T* row = logits + r * V;
  T* o = out + r * V;
  const bool skip = t == ignore || inv_wsum <= 0 || t < 0 || t >= V;
  const A c = skip ? A(0) : static_cast<A>((w ? w[r] : 1.0) * inv_wsum * gscale);
  const A l = lse[r];
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const A p = skip ? A(0) : c * math::exp_(load(row[v]) - l);
    o[v] = store<T>(v == t && !skip ? p - c : p);
  }
}

// Runs the forward row kernel; returns (on the device) lse (acc dtype) and nll (f64).
void ce_forward(const Tensor& logits, const Tensor& targets, int64_t ignore, Tensor& lse, Tensor& nll) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const int dev = logits.device().index;
  lse = Tensor::empty({N}, acc_dtype(logits.dtype()), logits.device());
  nll = Tensor::empty({N}, DType::F64, logits.device());
  if (N == 0) return;
  dispatch_floating(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(targets.dtype(), [&](auto itag) {
      using I = decltype(itag);
      ce_rows_kernel<T, I><<<static_cast<unsigned>(N), kThreads, 0, stream(dev)>>>(
          ptr<const T>(logits), ptr<const I>(targets), V, ignore, ptr<math::acc_t<T>>(lse), nll.data<double>());
      HZ_CUDA_LAUNCHED("cross_entropy rows");
    });
  });
}

// Sums on the device, one host transfer of 5 doubles; throws for targets outside the vocabulary.
std::array<double, 5> ce_sums(const Tensor& nll, const Tensor& targets, const Tensor& w64, int64_t N, int64_t V,
                              int64_t ignore, Tensor& sums) {
  const int dev = nll.device().index;
  sums = Tensor::empty({5}, DType::F64, nll.device());
  dispatch_index(targets.dtype(), [&](auto itag) {
    using I = decltype(itag);
    ce_sum_kernel<I><<<1, kThreads, 0, stream(dev)>>>(nll.data<double>(), ptr<const I>(targets),
                                                      w64.defined() ? w64.data<double>() : nullptr, N, V, ignore,
                                                      sums.data<double>());
    HZ_CUDA_LAUNCHED("cross_entropy sums");
  });
  std::array<double, 5> h{};
  HZ_CUDA_CHECK(cudaMemcpyAsync(h.data(), sums.data<double>(), sizeof(h), cudaMemcpyDeviceToHost, stream(dev)));
  HZ_CUDA_CHECK(cudaStreamSynchronize(stream(dev)));
  HZ_CHECK(h[2] == 0, ValueError, "cross_entropy: target ", static_cast<int64_t>(h[4]), " at row ",
           static_cast<int64_t>(h[3]), " is outside [0, ", V, ") and is not ignore_index ", ignore);
  return h;
}
}  // namespace

CrossEntropyResult cross_entropy(const Tensor& logits_in, const Tensor& targets_in, const Tensor& weights,
                                 int64_t ignore) {
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const Tensor w64 = weights.defined() ? weights.to(DType::F64).contiguous() : Tensor();
  const int64_t N = logits.size(0), V = logits.size(1);
  use_device(logits.device().index);
  CrossEntropyResult res;
  Tensor nll, sums;
  ce_forward(logits, targets, ignore, res.lse, nll);
  const auto h = ce_sums(nll, targets, w64, N, V, ignore, sums);
  res.weight_sum = h[1];
  res.loss = Tensor::empty({}, acc_dtype(logits.dtype()), logits.device());
  const int dev = logits.device().index;
  dispatch_floating(res.loss.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ce_loss_kernel<T><<<1, 1, 0, stream(dev)>>>(sums.data<double>(), ptr<T>(res.loss));
    HZ_CUDA_LAUNCHED("cross_entropy loss");
  });
  return res;
}

// Targets were checked by the forward; a bad one here contributes nothing (never an access
// outside the row).
Tensor cross_entropy_backward(const Tensor& logits_in, const Tensor& targets_in, const Tensor& weights,
                              const Tensor& lse_in, double weight_sum, int64_t ignore, double gscale) {
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const Tensor lse = lse_in.to(acc_dtype(logits.dtype())).contiguous();
  const Tensor w64 = weights.defined() ? weights.to(DType::F64).contiguous() : Tensor();
  const int64_t N = logits.size(0), V = logits.size(1);
  Tensor out = Tensor::empty({N, V}, logits.dtype(), logits.device());
  if (N == 0 || V == 0) return out;
  const int dev = logits.device().index;
  use_device(dev);
  const double inv = weight_sum > 0 ? 1.0 / weight_sum : 0.0;
  dispatch_floating(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(targets.dtype(), [&](auto itag) {
      using I = decltype(itag);
      ce_bwd_kernel<T, I><<<static_cast<unsigned>(N), kThreads, 0, stream(dev)>>>(
          ptr<const T>(logits), ptr<const I>(targets), w64.defined() ? w64.data<double>() : nullptr,
          ptr<const math::acc_t<T>>(lse), V, ignore, inv, gscale, ptr<T>(out));
      HZ_CUDA_LAUNCHED("cross_entropy_backward");
    });
  });
  return out;
}

Tensor cross_entropy_rows(const Tensor& logits_in, const Tensor& targets_in, int64_t ignore) {
  const Tensor logits = logits_in.contiguous(), targets = targets_in.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1);
  use_device(logits.device().index);
  Tensor lse, nll, sums;
  ce_forward(logits, targets, ignore, lse, nll);
  ce_sums(nll, targets, Tensor(), N, V, ignore, sums);  // validates the targets
  return nll;  // f64, as cross_entropy sums them
}

}  // namespace hz::cuda
