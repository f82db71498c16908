// Horizon CPU kernels: copies/conversions, fill, unary and binary elementwise ops.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/cpu/fast_math.h"
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
template <class D, class S> inline D convert(S s) { return static_cast<D>(s); }
template <> inline bf16 convert<bf16, float>(float s) { return bf16{f32_to_bf16_bits(s)}; }
// double -> bf16 in one rounding: when the float rounding of s lands exactly on a bf16 tie, nudge
// it one float ulp towards s so the tie is broken the way s itself would break it.
template <> inline bf16 convert<bf16, double>(double s) {
  float f = static_cast<float>(s);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0xffffu) == 0x8000u && static_cast<double>(f) != s && std::isfinite(f)) {
    u += std::abs(s) > std::abs(static_cast<double>(f)) ? 1 : -1;
    std::memcpy(&f, &u, 4);
  }
  return bf16{f32_to_bf16_bits(f)};
}
template <> inline bf16 convert<bf16, int32_t>(int32_t s) { return bf16{f32_to_bf16_bits(static_cast<float>(s))}; }
template <> inline bf16 convert<bf16, int64_t>(int64_t s) { return bf16{f32_to_bf16_bits(static_cast<float>(s))}; }
template <> inline bf16 convert<bf16, bf16>(bf16 s) { return s; }
template <> inline float convert<float, bf16>(bf16 s) { return bf16_bits_to_f32(s.bits); }
template <> inline double convert<double, bf16>(bf16 s) { return bf16_bits_to_f32(s.bits); }
template <> inline int32_t convert<int32_t, bf16>(bf16 s) { return static_cast<int32_t>(bf16_bits_to_f32(s.bits)); }
template <> inline int64_t convert<int64_t, bf16>(bf16 s) { return static_cast<int64_t>(bf16_bits_to_f32(s.bits)); }

#define HZ_DISPATCH_ALL(dt, T, ...)                                      \
  switch (dt) {                                                          \
    case DType::F32: { using T = float; __VA_ARGS__; break; }            \
    case DType::F64: { using T = double; __VA_ARGS__; break; }           \
    case DType::BF16: { using T = bf16; __VA_ARGS__; break; }            \
    case DType::I32: { using T = int32_t; __VA_ARGS__; break; }          \
    case DType::I64: { using T = int64_t; __VA_ARGS__; break; }          \
    default: throw DTypeError("bad dtype");                              \
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

// ---- unary ------------------------------------------------------------------------------------
template <class T>
struct UnaryMath {
  static T sigmoid(T x) { return T(1) / (T(1) + fast_exp(-x)); }  // vectorizable for f32
  static T f(UnaryOp op, T x) {
    switch (op) {
      case UnaryOp::Neg: return -x;
      case UnaryOp::Exp: return fast_exp(x);
      case UnaryOp::Log: return std::log(x);
      case UnaryOp::Sqrt: return std::sqrt(x);
      case UnaryOp::Rsqrt: return T(1) / std::sqrt(x);
      case UnaryOp::Abs: return std::abs(x);
      case UnaryOp::Square: return x * x;
      case UnaryOp::Tanh: return std::tanh(x);
      case UnaryOp::Sigmoid: return sigmoid(x);
      case UnaryOp::Relu: return x > T(0) ? x : T(0);
      case UnaryOp::Relu2: return x > T(0) ? x * x : T(0);
      case UnaryOp::Silu: return x * sigmoid(x);
      case UnaryOp::Gelu: return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
      default: return x;
    }
  }
  // derivative f'(x)
  static T df(UnaryOp op, T x) {
    switch (op) {
      case UnaryOp::Neg: return T(-1);
      case UnaryOp::Exp: return std::exp(x);
      case UnaryOp::Log: return T(1) / x;
      case UnaryOp::Sqrt: return T(0.5) / std::sqrt(x);
      case UnaryOp::Rsqrt: return T(-0.5) / (x * std::sqrt(x));
      case UnaryOp::Abs: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
      case UnaryOp::Square: return T(2) * x;
      case UnaryOp::Tanh: { T t = std::tanh(x); return T(1) - t * t; }
      case UnaryOp::Sigmoid: { T s = sigmoid(x); return s * (T(1) - s); }
      case UnaryOp::Relu: return x > T(0) ? T(1) : T(0);
      case UnaryOp::Relu2: return x > T(0) ? T(2) * x : T(0);
      case UnaryOp::Silu: { T s = sigmoid(x); return s * (T(1) + x * (T(1) - s)); }
      case UnaryOp::Gelu: {
        const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
        const T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
        return cdf + x * pdf;
      }
      default: return T(0);
    }
  }
};

// Calls f(std::integral_constant<UnaryOp, OP>{}) for the runtime op, so every loop below is
// compiled per op without a switch inside it (and vectorizes).
template <class F>
void dispatch_unary(UnaryOp op, F&& f) {
  using K = UnaryOp;
  switch (op) {
    case K::Neg: f(std::integral_constant<K, K::Neg>{}); break;
    case K::Exp: f(std::integral_constant<K, K::Exp>{}); break;
    case K::Log: f(std::integral_constant<K, K::Log>{}); break;
    case K::Sqrt: f(std::integral_constant<K, K::Sqrt>{}); break;
    case K::Rsqrt: f(std::integral_constant<K, K::Rsqrt>{}); break;
    case K::Abs: f(std::integral_constant<K, K::Abs>{}); break;
    case K::Square: f(std::integral_constant<K, K::Square>{}); break;
    case K::Tanh: f(std::integral_constant<K, K::Tanh>{}); break;
    case K::Sigmoid: f(std::integral_constant<K, K::Sigmoid>{}); break;
    case K::Relu: f(std::integral_constant<K, K::Relu>{}); break;
    case K::Relu2: f(std::integral_constant<K, K::Relu2>{}); break;
    case K::Silu: f(std::integral_constant<K, K::Silu>{}); break;
    case K::Gelu: f(std::integral_constant<K, K::Gelu>{}); break;
    default: throw NotImplementedError("unary op");
  }
}

Tensor unary(UnaryOp op, const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    dispatch_unary(op, [&](auto k) {
      constexpr UnaryOp OP = decltype(k)::value;
      const T* xp = x.data<T>();
      T* op_ = out.data<T>();
      strided_rows<2>(x.shape(), {&x.strides(), &out.strides()}, [&](const RowSpec<2>& r) {
        const T* a = xp + r.off[0];
        T* o = op_ + r.off[1];
        const int64_t s = r.inner[0];
        if (s == 1)
          for (int64_t i = 0; i < r.n; ++i) o[i] = UnaryMath<T>::f(OP, a[i]);
        else
          for (int64_t i = 0; i < r.n; ++i) o[i] = UnaryMath<T>::f(OP, a[i * s]);
      });
    });
  });
  return out;
}

Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& g) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    dispatch_unary(op, [&](auto k) {
      constexpr UnaryOp OP = decltype(k)::value;
      const T* xp = x.data<T>();
      const T* gp = g.data<T>();
      T* op_ = out.data<T>();
      strided_rows<3>(x.shape(), {&x.strides(), &g.strides(), &out.strides()}, [&](const RowSpec<3>& r) {
        const T* a = xp + r.off[0];
        const T* b = gp + r.off[1];
        T* o = op_ + r.off[2];
        if (r.inner[0] == 1 && r.inner[1] == 1)
          for (int64_t i = 0; i < r.n; ++i) o[i] = b[i] * UnaryMath<T>::df(OP, a[i]);
        else
          for (int64_t i = 0; i < r.n; ++i) o[i] = b[i * r.inner[1]] * UnaryMath<T>::df(OP, a[i * r.inner[0]]);
      });
    });
  });
  return out;
}

// ---- binary -----------------------------------------------------------------------------------
template <class T, BinaryOp OP>
inline T bin(T a, T b) {
  if constexpr (OP == BinaryOp::Add) return a + b;
  else if constexpr (OP == BinaryOp::Sub) return a - b;
  else if constexpr (OP == BinaryOp::Mul) return a * b;
  else if constexpr (OP == BinaryOp::Div) return a / b;
  else if constexpr (OP == BinaryOp::Maximum) return a > b ? a : b;
  else return a < b ? a : b;
}

template <class T, BinaryOp OP>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out) {
  const T* ap = a.data<T>();
  const T* bp = b.data<T>();
  T* op_ = out.data<T>();
  strided_rows<3>(out.shape(), {&a.strides(), &b.strides(), &out.strides()},
                  [&](const RowSpec<3>& r) {
                    const T* x = ap + r.off[0];
                    const T* y = bp + r.off[1];
                    T* o = op_ + r.off[2];
                    const int64_t sa = r.inner[0], sb = r.inner[1];
                    if (sa == 1 && sb == 1) {
                      for (int64_t i = 0; i < r.n; ++i) o[i] = bin<T, OP>(x[i], y[i]);
                    } else if (sa == 1 && sb == 0) {
                      const T yv = y[0];
                      for (int64_t i = 0; i < r.n; ++i) o[i] = bin<T, OP>(x[i], yv);
                    } else {
                      for (int64_t i = 0; i < r.n; ++i) o[i] = bin<T, OP>(x[i * sa], y[i * sb]);
                    }
                  });
}

Tensor binary(BinaryOp op, const Tensor& a_in, const Tensor& b_in, const Shape& out_shape) {
  const Tensor a = a_in.expand(out_shape), b = b_in.expand(out_shape);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  dispatch_float(a.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    switch (op) {
      case BinaryOp::Add: binary_loop<T, BinaryOp::Add>(a, b, out); break;
      case BinaryOp::Sub: binary_loop<T, BinaryOp::Sub>(a, b, out); break;
      case BinaryOp::Mul: binary_loop<T, BinaryOp::Mul>(a, b, out); break;
      case BinaryOp::Div: binary_loop<T, BinaryOp::Div>(a, b, out); break;
      case BinaryOp::Maximum: binary_loop<T, BinaryOp::Maximum>(a, b, out); break;
      case BinaryOp::Minimum: binary_loop<T, BinaryOp::Minimum>(a, b, out); break;
      default: throw NotImplementedError("binary op");
    }
  });
  return out;
}

Tensor scalar_op(const Tensor& x, double mul, double add, double pw) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* xp = x.data<T>();
    T* op_ = out.data<T>();
    const T m = static_cast<T>(mul), c = static_cast<T>(add), p = static_cast<T>(pw);
    strided_rows<2>(x.shape(), {&x.strides(), &out.strides()}, [&](const RowSpec<2>& r) {
      const T* a = xp + r.off[0];
      T* o = op_ + r.off[1];
      if (pw == 1.0) {
        for (int64_t i = 0; i < r.n; ++i) o[i] = a[i * r.inner[0]] * m + c;
      } else if (pw == 2.0) {
        for (int64_t i = 0; i < r.n; ++i) { T v = a[i * r.inner[0]]; o[i] = v * v * m + c; }
      } else {
        for (int64_t i = 0; i < r.n; ++i) o[i] = std::pow(a[i * r.inner[0]], p) * m + c;
      }
    });
  });
  return out;
}

void add_inplace(Tensor& dst, const Tensor& src_in, double alpha) {
  const Tensor src = src_in.expand(dst.shape());
  dispatch_float(dst.dtype(), [&](auto t_tag_) { using T = decltype(t_tag_);
    const T* sp = src.data<T>();
    T* dp = dst.data<T>();
    const T al = static_cast<T>(alpha);
    strided_rows<2>(dst.shape(), {&src.strides(), &dst.strides()}, [&](const RowSpec<2>& r) {
      const T* s = sp + r.off[0];
      T* d = dp + r.off[1];
      if (alpha == 1.0)
        for (int64_t i = 0; i < r.n; ++i) d[i * r.inner[1]] += s[i * r.inner[0]];
      else
        for (int64_t i = 0; i < r.n; ++i) d[i * r.inner[1]] += al * s[i * r.inner[0]];
    });
  });
}

}  // namespace hz::cpu
