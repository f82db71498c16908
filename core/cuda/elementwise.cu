// Horizon CUDA kernels: copies/conversions, fills, random fills, unary / binary / scalar
// elementwise ops and in-place updates. One thread per element (grid-stride), any strides through
// Indexer; the math is core/math.h, the same functions as the CPU kernels.
#include "core/cuda/common.cuh"
#include "core/cuda/kernels.cuh"
#include "core/philox.h"

namespace hz::cuda {

using math::load;
using math::store;

#define HZ_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// ---- copy / fill ----------------------------------------------------------------------------
template <class D, class S>
__global__ void copy_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n, Indexer<2> ix) {
  HZ_GRID_STRIDE(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    dst[off[1]] = math::convert<D, S>(src[off[0]]);
  }
}

void copy(const Tensor& src, Tensor& dst) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const int dev = dst.device().index;
  use_device(dev);
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    HZ_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), n * dtype_size(dst.dtype()),
                                  cudaMemcpyDeviceToDevice, stream(dev)));
    return;
  }
  const Shape* st[2] = {&src.strides(), &dst.strides()};
  const Indexer<2> ix = make_indexer<2>(dst.shape(), st);
  dispatch_dtype(src.dtype(), [&](auto s_tag) {
    using S = decltype(s_tag);
    dispatch_dtype(dst.dtype(), [&](auto d_tag) {
      using D = decltype(d_tag);
      copy_kernel<D, S><<<blocks_for(n), kThreads, 0, stream(dev)>>>(ptr<const S>(src), ptr<D>(dst), n, ix);
      HZ_CUDA_LAUNCHED("copy");
    });
  });
}

template <class D>
__global__ void fill_kernel(D* __restrict__ dst, D v, int64_t n, Indexer<1> ix) {
  HZ_GRID_STRIDE(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    dst[off[0]] = v;
  }
}

void fill(Tensor& dst, double v) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const int dev = dst.device().index;
  use_device(dev);
  const Shape* st[1] = {&dst.strides()};
  const Indexer<1> ix = make_indexer<1>(dst.shape(), st);
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using D = decltype(tag);
    fill_kernel<D><<<blocks_for(n), kThreads, 0, stream(dev)>>>(ptr<D>(dst), math::convert<D, double>(v), n, ix);
    HZ_CUDA_LAUNCHED("fill");
  });
}

template <class D>
__global__ void random_kernel(D* __restrict__ dst, int64_t n, RandomFill r, bool f32) {
  HZ_GRID_STRIDE(i, n) {
    const uint64_t w = r.offset + 2 * static_cast<uint64_t>(i);
    const uint32_t a = philox::word(r.seed, r.stream, w), b = philox::word(r.seed, r.stream, w + 1);
    const double v = r.kind == RandomKind::Normal ? philox::normal(a, b, r.a, r.b) : philox::uniform(a, b, r.a, r.b, f32);
    dst[i] = math::convert<D, double>(v);
  }
}

void random_fill(Tensor& dst, const RandomFill& r) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  const int dev = dst.device().index;
  use_device(dev);
  dispatch_floating(dst.dtype(), [&](auto tag) {
    using D = decltype(tag);
    random_kernel<D><<<blocks_for(n), kThreads, 0, stream(dev)>>>(ptr<D>(dst), n, r, dst.dtype() != DType::F64);
    HZ_CUDA_LAUNCHED("random_fill");
  });
}

// ---- unary --------------------------------------------------------------------------------------
template <UnaryOp OP, class T>
__global__ void unary_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, Indexer<1> ix) {
  HZ_GRID_STRIDE(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    y[i] = store<T>(math::unary_f<OP>(load(x[off[0]])));
  }
}
template <UnaryOp OP, class T>
__global__ void unary_bwd_kernel(const T* __restrict__ x, const T* __restrict__ g, T* __restrict__ y, int64_t n,
                                 Indexer<2> ix) {
  HZ_GRID_STRIDE(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    y[i] = store<T>(load(g[off[1]]) * math::unary_df<OP>(load(x[off[0]])));
  }
}

Tensor unary(UnaryOp op, const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int dev = x.device().index;
  use_device(dev);
  const Shape* st[1] = {&x.strides()};
  const Indexer<1> ix = make_indexer<1>(x.shape(), st);
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_unary(op, [&](auto k) {
      unary_kernel<decltype(k)::value, T><<<blocks_for(n), kThreads, 0, stream(dev)>>>(ptr<const T>(x), ptr<T>(out), n, ix);
      HZ_CUDA_LAUNCHED("unary");
    });
  });
  return out;
}

Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& g) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int dev = x.device().index;
  use_device(dev);
  const Shape* st[2] = {&x.strides(), &g.strides()};
  const Indexer<2> ix = make_indexer<2>(x.shape(), st);
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_unary(op, [&](auto k) {
      unary_bwd_kernel<decltype(k)::value, T>
          <<<blocks_for(n), kThreads, 0, stream(dev)>>>(ptr<const T>(x), ptr<const T>(g), ptr<T>(out), n, ix);
      HZ_CUDA_LAUNCHED("unary_backward");
    });
  });
  return out;
}

// ---- binary -------------------------------------------------------------------------------------
template <BinaryOp OP, class T>
__global__ void binary_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, int64_t n,
                              Indexer<2> ix) {
  HZ_GRID_STRIDE(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    y[i] = store<T>(math::binary_f<OP>(load(a[off[0]]), load(b[off[1]])));
  }
}

Tensor binary(BinaryOp op, const Tensor& a_in, const Tensor& b_in, const Shape& out_shape) {
  const Tensor a = a_in.expand(out_shape), b = b_in.expand(out_shape);
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const int dev = a.device().index;
  use_device(dev);
  const Shape* st[2] = {&a.strides(), &b.strides()};
  const Indexer<2> ix = make_indexer<2>(out_shape, st);
  dispatch_floating(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_binary(op, [&](auto k) {
      binary_kernel<decltype(k)::value, T>
          <<<blocks_for(n), kThreads, 0, stream(dev)>>>(ptr<const T>(a), ptr<const T>(b), ptr<T>(out), n, ix);
      HZ_CUDA_LAUNCHED("binary");
    });
  });
  return out;
}

// ---- scalar ops and in-place updates --------------------------------------------------------------
template <class T>
__global__ void scalar_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, Indexer<1> ix,
                              math::acc_t<T> m, math::acc_t<T> c, math::acc_t<T> p, int pk) {
  HZ_GRID_STRIDE(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    y[i] = store<T>(math::scalar_f(load(x[off[0]]), m, c, p, pk));
  }
}

Tensor scalar_op(const Tensor& x, double mul, double add, double pw) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int dev = x.device().index;
  use_device(dev);
  const Shape* st[1] = {&x.strides()};
  const Indexer<1> ix = make_indexer<1>(x.shape(), st);
  const int pk = pw == 1.0 ? 1 : (pw == 2.0 ? 2 : 0);
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = math::acc_t<T>;
    scalar_kernel<T><<<blocks_for(n), kThreads, 0, stream(dev)>>>(ptr<const T>(x), ptr<T>(out), n, ix, static_cast<A>(mul),
                                                                  static_cast<A>(add), static_cast<A>(pw), pk);
    HZ_CUDA_LAUNCHED("scalar_op");
  });
  return out;
}

template <class T>
__global__ void add_inplace_kernel(T* __restrict__ d, const T* __restrict__ s, int64_t n, Indexer<2> ix,
                                   math::acc_t<T> alpha) {
  HZ_GRID_STRIDE(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    d[off[0]] = store<T>(load(d[off[0]]) + alpha * load(s[off[1]]));
  }
}

void add_inplace(Tensor& dst, const Tensor& src_in, double alpha) {
  const Tensor src = src_in.expand(dst.shape());
  const int64_t n = dst.numel();
  if (n == 0) return;
  const int dev = dst.device().index;
  use_device(dev);
  const Shape* st[2] = {&dst.strides(), &src.strides()};
  const Indexer<2> ix = make_indexer<2>(dst.shape(), st);
  dispatch_floating(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    add_inplace_kernel<T><<<blocks_for(n), kThreads, 0, stream(dev)>>>(ptr<T>(dst), ptr<const T>(src), n, ix,
                                                                       static_cast<math::acc_t<T>>(alpha));
    HZ_CUDA_LAUNCHED("add_inplace");
  });
}

// x = alpha x + beta y in double arithmetic (the optimizers' rounding, as on the CPU)
template <class T>
__global__ void axpby_kernel(T* __restrict__ x, const T* __restrict__ y, int64_t n, Indexer<2> ix, double alpha,
                             double beta) {
  HZ_GRID_STRIDE(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    const double xv = alpha * static_cast<double>(load(x[off[0]]));
    x[off[0]] = store<T>(y ? xv + beta * static_cast<double>(load(y[off[1]])) : xv);
  }
}

void axpby(Tensor& x, const Tensor& y_in, double alpha, double beta) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const int dev = x.device().index;
  use_device(dev);
  Tensor y;
  if (y_in.defined()) y = (y_in.dtype() == x.dtype() ? y_in : y_in.to(x.dtype())).expand(x.shape());
  const Shape* st[2] = {&x.strides(), y.defined() ? &y.strides() : &x.strides()};
  const Indexer<2> ix = make_indexer<2>(x.shape(), st);
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    axpby_kernel<T><<<blocks_for(n), kThreads, 0, stream(dev)>>>(ptr<T>(x), y.defined() ? ptr<const T>(y) : nullptr, n,
                                                                 ix, alpha, beta);
    HZ_CUDA_LAUNCHED("axpby");
  });
}

// ---- SwiGLU's gate --------------------------------------------------------------------------------
// silu(a) * b and its gradients (core/math.h's swiglu_*, the CPU's math); contiguous operands.
template <class T>
__global__ void swiglu_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t n) {
  HZ_GRID_STRIDE(i, n) out[i] = math::swiglu_f(a[i], b[i]);
}
template <class T>
__global__ void swiglu_bwd_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ g,
                                  T* __restrict__ da, T* __restrict__ db, int64_t n) {
  HZ_GRID_STRIDE(i, n) {
    if (da) da[i] = math::swiglu_da(a[i], b[i], g[i]);
    if (db) db[i] = math::swiglu_db(a[i], g[i]);
  }
}

Tensor swiglu(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.numel();
  if (n == 0) return out;
  const int dev = a.device().index;
  use_device(dev);
  dispatch_floating(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    swiglu_kernel<T><<<blocks_for(n), kThreads, 0, stream(dev)>>>(ptr<const T>(a), ptr<const T>(b), ptr<T>(out), n);
    HZ_CUDA_LAUNCHED("swiglu");
  });
  return out;
}

ops::SwiGluGrads swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& g, bool need_a, bool need_b) {
  ops::SwiGluGrads r;
  if (need_a) r.da = Tensor::empty(a.shape(), a.dtype(), a.device());
  if (need_b) r.db = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.numel();
  if (n == 0) return r;
  const int dev = a.device().index;
  use_device(dev);
  dispatch_floating(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    swiglu_bwd_kernel<T><<<blocks_for(n), kThreads, 0, stream(dev)>>>(
        ptr<const T>(a), ptr<const T>(b), ptr<const T>(g), need_a ? ptr<T>(r.da) : nullptr, need_b ? ptr<T>(r.db) : nullptr, n);
    HZ_CUDA_LAUNCHED("swiglu_backward");
  });
  return r;
}

}  // namespace hz::cuda
