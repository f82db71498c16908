// Horizon CPU kernels: copies/conversions, fill, unary and binary elementwise ops.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/cpu/fast_math.h"
#include "core/math.h"
#include "core/cpu/kernels.h"
#include "core/cpu/loops.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace hz::cpu {

int num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// ---- conversions ------------------------------------------------------------------------------
using math::convert;

#define HZ_DISPATCH_ALL(dt, T, ...)                                      \
  switch (dt) {                                                          \
    case DType::F32: { using T = float; __VA_ARGS__; break; }            \
    case DType::F64: { using T = double; __VA_ARGS__; break; }           \
    case DType::BF16: { using T = bf16; __VA_ARGS__; break; }            \
    case DType::I32: { using T = int32_t; __VA_ARGS__; break; }          \
    case DType::I64: { using T = int64_t; __VA_ARGS__; break; }          \
    default: throw DTypeError("bad dtype");                              \
  }

// The f32 <-> bf16 casts of mixed precision on contiguous rows; false for every other pair.
template <class S, class D>
bool cast_row_vectorized(const S* s, D* d, int64_t n) {
  if constexpr (std::is_same_v<S, bf16> && std::is_same_v<D, float>) {
    widen_bf16(s, d, n);
    return true;
  } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, bf16>) {
    narrow_to_bf16(s, d, n);
    return true;
  } else {
    return false;
  }
}

void copy_strided(const Tensor& src, Tensor& dst) {
  HZ_CHECK(src.shape() == dst.shape(), ShapeError, "copy: shape ", shape_str(src.shape()),
           " into ", shape_str(dst.shape()));
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), src.numel() * dtype_size(src.dtype()));
    return;
  }
  HZ_DISPATCH_ALL(src.dtype(), S, HZ_DISPATCH_ALL(dst.dtype(), D, {
    const S* s = static_cast<const S*>(src.raw_data());
    D* d = static_cast<D*>(dst.raw_data());
    strided_rows<2>(dst.shape(), {&src.strides(), &dst.strides()}, [&](const RowSpec<2>& r) {
      const S* sp = s + r.off[0];
      D* dp = d + r.off[1];
      if (r.inner[0] == 1 && r.inner[1] == 1 && cast_row_vectorized(sp, dp, r.n)) return;
      for (int64_t i = 0; i < r.n; ++i) dp[i * r.inner[1]] = convert<D, S>(sp[i * r.inner[0]]);
    });
  }));
}

void fill(Tensor& dst, double v) {
  HZ_DISPATCH_ALL(dst.dtype(), D, {
    const D val = convert<D, double>(v);
    D* d = static_cast<D*>(dst.raw_data());
    strided_rows<1>(dst.shape(), {&dst.strides()}, [&](const RowSpec<1>& r) {
      D* dp = d + r.off[0];
      for (int64_t i = 0; i < r.n; ++i) dp[i * r.inner[0]] = val;
    });
  });
}

using math::load;
using math::store;

// ---- unary ------------------------------------------------------------------------------------
// bf16 is a struct, so a loop that loads it element by element does not vectorize. Contiguous bf16
// rows go through f32 blocks instead: widen (a shift), compute in f32, round back once; each of
// the three loops vectorizes and the results are those of the element-by-element loop.
template <int N, class F>
void bf16_block_rows(const bf16* const (&in)[N], bf16* out, int64_t n, F f) {
  constexpr int64_t kBlock = 256;
  float x[N][kBlock], y[kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = std::min(kBlock, n - i0);
    for (int k = 0; k < N; ++k) widen_bf16(in[k] + i0, x[k], m);
    for (int64_t j = 0; j < m; ++j) y[j] = f(x[0][j], x[N - 1][j]);
    narrow_to_bf16(y, out + i0, m);
  }
}

Tensor unary(UnaryOp op, const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_all_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    dispatch_unary(op, [&](auto k) {
      constexpr UnaryOp OP = decltype(k)::value;
      const T* xp = static_cast<const T*>(x.raw_data());
      T* op_ = static_cast<T*>(out.raw_data());
      strided_rows<2>(x.shape(), {&x.strides(), &out.strides()}, [&](const RowSpec<2>& r) {
        const T* a = xp + r.off[0];
        T* o = op_ + r.off[1];
        const int64_t s = r.inner[0];
        if constexpr (std::is_same_v<T, bf16>)
          if (s == 1) {
            bf16_block_rows<1>({a}, o, r.n, [&](float v, float) { return math::unary_f<OP>(v); });
            return;
          }
        if (s == 1)
          for (int64_t i = 0; i < r.n; ++i) o[i] = store<T>(math::unary_f<OP>(load(a[i])));
        else
          for (int64_t i = 0; i < r.n; ++i) o[i] = store<T>(math::unary_f<OP>(load(a[i * s])));
      });
    });
  });
  return out;
}

Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& g) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_all_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    dispatch_unary(op, [&](auto k) {
      constexpr UnaryOp OP = decltype(k)::value;
      const T* xp = static_cast<const T*>(x.raw_data());
      const T* gp = static_cast<const T*>(g.raw_data());
      T* op_ = static_cast<T*>(out.raw_data());
      strided_rows<3>(x.shape(), {&x.strides(), &g.strides(), &out.strides()}, [&](const RowSpec<3>& r) {
        const T* a = xp + r.off[0];
        const T* b = gp + r.off[1];
        T* o = op_ + r.off[2];
        if constexpr (std::is_same_v<T, bf16>)
          if (r.inner[0] == 1 && r.inner[1] == 1) {
            bf16_block_rows<2>({a, b}, o, r.n, [&](float v, float gv) { return gv * math::unary_df<OP>(v); });
            return;
          }
        if (r.inner[0] == 1 && r.inner[1] == 1)
          for (int64_t i = 0; i < r.n; ++i) o[i] = store<T>(load(b[i]) * math::unary_df<OP>(load(a[i])));
        else
          for (int64_t i = 0; i < r.n; ++i)
            o[i] = store<T>(load(b[i * r.inner[1]]) * math::unary_df<OP>(load(a[i * r.inner[0]])));
      });
    });
  });
  return out;
}

// ---- binary -----------------------------------------------------------------------------------
template <class T, BinaryOp OP>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out) {
  const T* ap = static_cast<const T*>(a.raw_data());
  const T* bp = static_cast<const T*>(b.raw_data());
  T* op_ = static_cast<T*>(out.raw_data());
  strided_rows<3>(out.shape(), {&a.strides(), &b.strides(), &out.strides()},
                  [&](const RowSpec<3>& r) {
                    const T* x = ap + r.off[0];
                    const T* y = bp + r.off[1];
                    T* o = op_ + r.off[2];
                    const int64_t sa = r.inner[0], sb = r.inner[1];
                    if (sa == 1 && sb == 1) {
                      for (int64_t i = 0; i < r.n; ++i) o[i] = store<T>(math::binary_f<OP>(load(x[i]), load(y[i])));
                    } else if (sa == 1 && sb == 0) {
                      const auto yv = load(y[0]);
                      for (int64_t i = 0; i < r.n; ++i) o[i] = store<T>(math::binary_f<OP>(load(x[i]), yv));
                    } else {
                      for (int64_t i = 0; i < r.n; ++i)
                        o[i] = store<T>(math::binary_f<OP>(load(x[i * sa]), load(y[i * sb])));
                    }
                  });
}

Tensor binary(BinaryOp op, const Tensor& a_in, const Tensor& b_in, const Shape& out_shape) {
  const Tensor a = a_in.expand(out_shape), b = b_in.expand(out_shape);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  dispatch_all_float(a.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    dispatch_binary(op, [&](auto k) { binary_loop<T, decltype(k)::value>(a, b, out); });
  });
  return out;
}

Tensor scalar_op(const Tensor& x, double mul, double add, double pw) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_all_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); using A = math::acc_t<T>;
    const T* xp = static_cast<const T*>(x.raw_data());
    T* op_ = static_cast<T*>(out.raw_data());
    const A m = static_cast<A>(mul), c = static_cast<A>(add), p = static_cast<A>(pw);
    const int pk = pw == 1.0 ? 1 : (pw == 2.0 ? 2 : 0);
    strided_rows<2>(x.shape(), {&x.strides(), &out.strides()}, [&](const RowSpec<2>& r) {
      const T* a = xp + r.off[0];
      T* o = op_ + r.off[1];
      for (int64_t i = 0; i < r.n; ++i) o[i] = store<T>(math::scalar_f<A>(load(a[i * r.inner[0]]), m, c, p, pk));
    });
  });
  return out;
}

void add_inplace(Tensor& dst, const Tensor& src_in, double alpha) {
  const Tensor src = src_in.expand(dst.shape());
  dispatch_all_float(dst.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_); using A = math::acc_t<T>;
    const T* sp = static_cast<const T*>(src.raw_data());
    T* dp = static_cast<T*>(dst.raw_data());
    const A al = static_cast<A>(alpha);
    strided_rows<2>(dst.shape(), {&src.strides(), &dst.strides()}, [&](const RowSpec<2>& r) {
      const T* s = sp + r.off[0];
      T* d = dp + r.off[1];
      if (alpha == 1.0)
        for (int64_t i = 0; i < r.n; ++i) d[i * r.inner[1]] = store<T>(load(d[i * r.inner[1]]) + load(s[i * r.inner[0]]));
      else
        for (int64_t i = 0; i < r.n; ++i)
          d[i * r.inner[1]] = store<T>(load(d[i * r.inner[1]]) + al * load(s[i * r.inner[0]]));
    });
  });
}

// x = alpha x + beta y in double arithmetic (the optimizers' and clipping's rounding).
void axpby(Tensor& x, const Tensor& y_in, double alpha, double beta) {
  dispatch_all_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    T* xp = static_cast<T*>(x.raw_data());
    if (!y_in.defined()) {
      strided_rows<1>(x.shape(), {&x.strides()}, [&](const RowSpec<1>& r) {
        T* d = xp + r.off[0];
        for (int64_t i = 0; i < r.n; ++i)
          d[i * r.inner[0]] = store<T>(alpha * static_cast<double>(load(d[i * r.inner[0]])));
      });
      return;
    }
    const Tensor y = y_in.dtype() == x.dtype() ? y_in.expand(x.shape()) : y_in.to(x.dtype()).expand(x.shape());
    const T* yp = static_cast<const T*>(y.raw_data());
    strided_rows<2>(x.shape(), {&x.strides(), &y.strides()}, [&](const RowSpec<2>& r) {
      T* d = xp + r.off[0];
      const T* s = yp + r.off[1];
      for (int64_t i = 0; i < r.n; ++i)
        d[i * r.inner[0]] = store<T>(alpha * static_cast<double>(load(d[i * r.inner[0]])) +
                                     beta * static_cast<double>(load(s[i * r.inner[1]])));
    });
  });
}

// SwiGLU's gate and its gradients (core/math.h's swiglu_f / swiglu_da / swiglu_db: the two ops' roundings).
Tensor swiglu(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  const int64_t n = a.numel();
  dispatch_all_float(a.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* ap = static_cast<const T*>(a.raw_data());
    const T* bp = static_cast<const T*>(b.raw_data());
    T* op_ = static_cast<T*>(out.raw_data());
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) op_[i] = math::swiglu_f(ap[i], bp[i]);
  });
  return out;
}

ops::SwiGluGrads swiglu_backward(const Tensor& a, const Tensor& b, const Tensor& g, bool need_a, bool need_b) {
  ops::SwiGluGrads r;
  if (need_a) r.da = Tensor::empty(a.shape(), a.dtype());
  if (need_b) r.db = Tensor::empty(a.shape(), a.dtype());
  const int64_t n = a.numel();
  dispatch_all_float(a.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* ap = static_cast<const T*>(a.raw_data());
    const T* bp = static_cast<const T*>(b.raw_data());
    const T* gp = static_cast<const T*>(g.raw_data());
    T* dap = need_a ? static_cast<T*>(r.da.raw_data()) : nullptr;
    T* dbp = need_b ? static_cast<T*>(r.db.raw_data()) : nullptr;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      if (dap) dap[i] = math::swiglu_da(ap[i], bp[i], gp[i]);
      if (dbp) dbp[i] = math::swiglu_db(ap[i], gp[i]);
    }
  });
  return r;
}

}  // namespace hz::cpu
