// Horizon: host-side helpers shared by the CPU and CUDA kernels: dtype and op dispatch (runtime
// value -> compile-time type or op), the (outer, n, inner) view around a reduced dim, dimension
// merging for strided loops, and the BLAS view of a strided matrix.
#pragma once
#include <algorithm>
#include <array>
#include <string>
#include <type_traits>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "core/op_kinds.h"
#include "core/tensor.h"

namespace hz {

// ---- dtype dispatch: calls f(T{}) with T the C++ type of dt ------------------------------------
// Written as functions taking generic lambdas (not macros) so `#pragma omp` can appear inside.
template <class F>
void dispatch_float(DType dt, F&& f) {  // f32, f64
  switch (dt) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    default:
      throw DTypeError(std::string("this op supports f32 and f64, got ") + dtype_name(dt) +
                       "; convert with .to(DType::F32)");
  }
}
template <class F>
void dispatch_floating(DType dt, F&& f) {  // f32, f64, bf16 (kernels use math::load/store, acc_t)
  switch (dt) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    case DType::BF16: f(bf16{}); break;
    default: throw DTypeError(std::string("this op supports f32, f64 and bf16, got ") + dtype_name(dt));
  }
}
template <class F>
void dispatch_dtype(DType dt, F&& f) {  // every dtype
  switch (dt) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    case DType::BF16: f(bf16{}); break;
    case DType::I32: f(int32_t{}); break;
    case DType::I64: f(int64_t{}); break;
    default: throw DTypeError("bad dtype");
  }
}
template <class F>
void dispatch_index(DType dt, F&& f) {  // i32, i64
  switch (dt) {
    case DType::I32: f(int32_t{}); break;
    case DType::I64: f(int64_t{}); break;
    default: throw DTypeError(std::string("indices must be i32 or i64, got ") + dtype_name(dt));
  }
}
// x's floating type and a gain's type W: x's own, or f32 with a bf16 x (RMSNorm's mixed precision).
template <class F>
void dispatch_x_w(DType xdt, DType wdt, F&& f) {
  dispatch_floating(xdt, [&](auto xt) {
    if (wdt == xdt) f(xt, xt);
    else if (wdt == DType::F32) f(xt, float{});
    else throw DTypeError(std::string("rms_norm: gain dtype ") + dtype_name(wdt) + " with input " + dtype_name(xdt) +
                          "; use the input's dtype or f32");
  });
}

// ---- op dispatch: f(std::integral_constant<Op, OP>{}) for the runtime op -----------------------
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
    case K::LogSigmoid: f(std::integral_constant<K, K::LogSigmoid>{}); break;
    default: throw NotImplementedError("unary op");
  }
}
template <class F>
void dispatch_binary(BinaryOp op, F&& f) {
  using K = BinaryOp;
  switch (op) {
    case K::Add: f(std::integral_constant<K, K::Add>{}); break;
    case K::Sub: f(std::integral_constant<K, K::Sub>{}); break;
    case K::Mul: f(std::integral_constant<K, K::Mul>{}); break;
    case K::Div: f(std::integral_constant<K, K::Div>{}); break;
    case K::Maximum: f(std::integral_constant<K, K::Maximum>{}); break;
    case K::Minimum: f(std::integral_constant<K, K::Minimum>{}); break;
    default: throw NotImplementedError("binary op");
  }
}

// ---- a contiguous tensor viewed as (outer, n, inner) around `dim` -------------------------------
struct Around {
  int64_t outer = 1, n = 1, inner = 1;
};
inline Around around(const Shape& s, int64_t dim) {
  Around a;
  for (int64_t i = 0; i < dim; ++i) a.outer *= s[i];
  a.n = s[dim];
  for (size_t i = dim + 1; i < s.size(); ++i) a.inner *= s[i];
  return a;
}
inline Shape reduced_shape(const Shape& s, int64_t dim, bool keepdim) {
  Shape r = s;
  if (keepdim) r[dim] = 1;
  else r.erase(r.begin() + dim);
  return r;
}

// ---- dims merged for a strided loop over N operands ----------------------------------------------
// Size-1 dims are dropped; dim i+1 merges into dim i when every operand is contiguous across the
// pair. The row-major order of elements is unchanged.
template <int N>
struct MergedDims {
  std::vector<int64_t> size;
  std::vector<std::array<int64_t, N>> stride;
};
template <int N>
MergedDims<N> merge_dims(const Shape& shape, const std::array<const Shape*, N>& strides) {
  MergedDims<N> m;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    std::array<int64_t, N> st;
    for (int k = 0; k < N; ++k) st[k] = (*strides[k])[i];
    if (!m.size.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge &= m.stride.back()[k] == st[k] * shape[i];
      if (merge) {
        m.size.back() *= shape[i];
        m.stride.back() = st;
        continue;
      }
    }
    m.size.push_back(shape[i]);
    m.stride.push_back(st);
  }
  return m;
}

// ---- BLAS view of a strided matrix (rows, cols) with strides (sr, sc) ---------------------------
// Row-major with leading dim ld (trans = false) or the transpose of a row-major matrix
// (trans = true). False when neither (the caller copies).
inline bool mat_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool& trans, int64_t& ld) {
  if ((sc == 1 || cols <= 1) && (rows <= 1 || sr >= std::max<int64_t>(1, cols))) {
    trans = false;
    ld = rows <= 1 ? std::max<int64_t>(1, cols) : sr;
    return true;
  }
  if (sr == 1 && (cols <= 1 || sc >= std::max<int64_t>(1, rows))) {
    trans = true;
    ld = cols <= 1 ? std::max<int64_t>(1, rows) : sc;
    return true;
  }
  return false;
}

}  // namespace hz
