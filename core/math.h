// Horizon: the math of every elementwise op, written once for the CPU kernels (core/cpu/) and the
// CUDA kernels (core/cuda/), so the two devices cannot disagree on a definition (NaN handling of
// maximum/minimum, the exp used by sigmoid/silu, GELU's erf form, ...).
//
// Compute types: f32 and f64 compute in their own type; bf16 is loaded to f32, computed in f32 and
// rounded back to nearest-even on store (acc_t<T>, load(), Store<T>). Integer tensors never reach
// these functions.
#pragma once
#include <math.h>

#include <cstdint>

#include "core/bf16.h"
#include "core/op_kinds.h"

namespace hz::math {

// ---- compute type and conversions -----------------------------------------------------------
template <class T> struct Acc { using type = T; };
template <> struct Acc<bf16> { using type = float; };
template <class T> using acc_t = typename Acc<T>::type;

HZ_HD float load(bf16 v) { return bf16_bits_to_f32(v.bits); }
HZ_HD float load(float v) { return v; }
HZ_HD double load(double v) { return v; }

template <class T> struct Store {
  template <class A> HZ_HD static T from(A v) { return static_cast<T>(v); }
};
template <> struct Store<bf16> {
  HZ_HD static bf16 from(float v) { return bf16{f32_to_bf16_bits(v)}; }
  HZ_HD static bf16 from(double v) { return bf16{f64_to_bf16_bits(v)}; }
};
template <class T, class A> HZ_HD T store(A v) { return Store<T>::from(v); }

// Value conversion between any two storage types (copies, casts): floats round to nearest even,
// floats to integers truncate toward zero (C++ conversion), bf16 goes through f32.
template <class D, class S> struct Convert {
  HZ_HD static D apply(S s) { return static_cast<D>(s); }
};
template <class S> struct Convert<bf16, S> {
  HZ_HD static bf16 apply(S s) { return bf16{f32_to_bf16_bits(static_cast<float>(s))}; }
};
template <> struct Convert<bf16, double> {
  HZ_HD static bf16 apply(double s) { return bf16{f64_to_bf16_bits(s)}; }
};
template <> struct Convert<bf16, bf16> {
  HZ_HD static bf16 apply(bf16 s) { return s; }
};
template <class D> struct Convert<D, bf16> {
  HZ_HD static D apply(bf16 s) { return static_cast<D>(bf16_bits_to_f32(s.bits)); }
};
template <class D, class S> HZ_HD D convert(S s) { return Convert<D, S>::apply(s); }

// ---- scalar functions per compute type ------------------------------------------------------
// exp for f32: branch-free so the CPU compiler vectorizes it (std::exp on float is a scalar libm
// call) and bit-identical on the device. Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, a
// degree-7 Taylor polynomial (truncation < 5e-9 relative, below float epsilon), scaling by 2^n
// through the exponent bits. Inputs below -87.3 (including -inf) give exactly 0; inputs above 88.7
// saturate. f64 uses the library exp.
HZ_HD float exp_(float x) {
  const bool under = x < -87.3f;
  const float xc = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  const float n = floorf(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693145751953125f;
  r = r - n * 1.42860682030941723212e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = bits_as_f32(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return under ? 0.0f : p * scale;
}
HZ_HD double exp_(double x) { return ::exp(x); }
HZ_HD float log_(float x) { return ::logf(x); }
HZ_HD double log_(double x) { return ::log(x); }
HZ_HD float log1p_(float x) { return ::log1pf(x); }
HZ_HD double log1p_(double x) { return ::log1p(x); }
HZ_HD float sqrt_(float x) { return ::sqrtf(x); }
HZ_HD double sqrt_(double x) { return ::sqrt(x); }
HZ_HD float tanh_(float x) { return ::tanhf(x); }
HZ_HD double tanh_(double x) { return ::tanh(x); }
HZ_HD float erf_(float x) { return ::erff(x); }
HZ_HD double erf_(double x) { return ::erf(x); }
// The standard normal CDF Phi(x) = (1 + erf(x / sqrt 2)) / 2, GELU's gate. f32: branch-free so the
// CPU compiler vectorizes it (erff is a scalar libm call that took ~7% of a bf16 GPT-2 step), and
// the same with or without fused multiply-add (the portable build has none). Two forms, selected:
// - |x| >= 1: Phi(x) = erfc(-x / sqrt 2) / 2, erfc(z) for z = |x| / sqrt 2 from the Chebyshev fit
//   erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2) (fractional error < 1.2e-7 for every z;
//   Numerical Recipes' erfcc), and the reflection erfc(-z) = 2 - erfc(z). Relative accuracy holds
//   in both tails, unlike 1 + erff(x), which cancels for negative x.
// - |x| < 1: Phi(x) = 1/2 + erf(z) / 2 with the Maclaurin series
//   erf(z) = 2/sqrt(pi) sum_n (-1)^n z^(2n+1) / (n! (2n+1)), n <= 9 (truncation < 3e-10 for
//   z < 0.71). Near Phi = 1/2 the fit's exp(-z^2 + P) rounds at |P| ~ 1.27 (several float ulps
//   of 0.5 without FMA); the series keeps the error there within about 1 ulp.
// f64 uses the library erf.
HZ_HD float normal_cdf(float x) {
  const float z = fabsf(x) * 0.70710678118654752440f;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float half_erfc = 0.5f * t * exp_(p - z * z);  // Phi(-|x|)
  const float tails = x < 0.0f ? half_erfc : 1.0f - half_erfc;
  // series in u = z^2 with coefficients (-1)^n / (n! (2n+1)), times z / sqrt(pi) (= erf(z) / 2)
  const float zs = x * 0.70710678118654752440f;
  const float u = zs * zs;
  float s = -1.0f / 6894720.0f;        // n = 9: 9! * 19
  s = s * u + 1.0f / 685440.0f;        // n = 8: 8! * 17
  s = s * u - 1.0f / 75600.0f;         // n = 7: 7! * 15
  s = s * u + 1.0f / 9360.0f;          // n = 6
  s = s * u - 1.0f / 1320.0f;          // n = 5
  s = s * u + 1.0f / 216.0f;           // n = 4
  s = s * u - 1.0f / 42.0f;            // n = 3
  s = s * u + 0.1f;                    // n = 2
  s = s * u - 1.0f / 3.0f;             // n = 1
  s = s * u;                           // sum_{n>=1}; the n = 0 term (1) is added last
  const float half_erf = zs * 0.56418958354775628695f + zs * 0.56418958354775628695f * s;
  const float centre = 0.5f + half_erf;
  return fabsf(x) < 1.0f ? centre : tails;
}
HZ_HD double normal_cdf(double x) { return 0.5 * (1.0 + ::erf(x * 0.70710678118654752440)); }
HZ_HD float fabs_(float x) { return ::fabsf(x); }
HZ_HD double fabs_(double x) { return ::fabs(x); }
HZ_HD float pow_(float x, float p) { return ::powf(x, p); }
HZ_HD double pow_(double x, double p) { return ::pow(x, p); }
template <class T> HZ_HD bool isnan_(T x) { return x != x; }

template <class T> HZ_HD T sigmoid(T x) { return T(1) / (T(1) + exp_(-x)); }
// log sigmoid(x) = min(x, 0) - log(1 + exp(-|x|)): finite for every finite x (FoX's log forget gate)
template <class T> HZ_HD T log_sigmoid(T x) { return (x < T(0) ? x : T(0)) - log1p_(exp_(-fabs_(x))); }

// ---- unary ops: f(x) and the derivative f'(x) ----------------------------------------------
template <UnaryOp OP, class T>
HZ_HD T unary_f(T x) {
  if constexpr (OP == UnaryOp::Neg) return -x;
  else if constexpr (OP == UnaryOp::Exp) return exp_(x);
  else if constexpr (OP == UnaryOp::Log) return log_(x);
  else if constexpr (OP == UnaryOp::Sqrt) return sqrt_(x);
  else if constexpr (OP == UnaryOp::Rsqrt) return T(1) / sqrt_(x);
  else if constexpr (OP == UnaryOp::Abs) return fabs_(x);
  else if constexpr (OP == UnaryOp::Square) return x * x;
  else if constexpr (OP == UnaryOp::Tanh) return tanh_(x);
  else if constexpr (OP == UnaryOp::Sigmoid) return sigmoid(x);
  else if constexpr (OP == UnaryOp::Relu) return x > T(0) ? x : T(0);
  else if constexpr (OP == UnaryOp::Relu2) return x > T(0) ? x * x : T(0);
  else if constexpr (OP == UnaryOp::Silu) return x * sigmoid(x);
  else if constexpr (OP == UnaryOp::Gelu) return x * normal_cdf(x);
  else if constexpr (OP == UnaryOp::LogSigmoid) return log_sigmoid(x);
  else return x;
}

template <UnaryOp OP, class T>
HZ_HD T unary_df(T x) {
  if constexpr (OP == UnaryOp::Neg) return T(-1);
  else if constexpr (OP == UnaryOp::Exp) return exp_(x);
  else if constexpr (OP == UnaryOp::Log) return T(1) / x;
  else if constexpr (OP == UnaryOp::Sqrt) return T(0.5) / sqrt_(x);
  else if constexpr (OP == UnaryOp::Rsqrt) return T(-0.5) / (x * sqrt_(x));
  else if constexpr (OP == UnaryOp::Abs) return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  else if constexpr (OP == UnaryOp::Square) return T(2) * x;
  else if constexpr (OP == UnaryOp::Tanh) { const T t = tanh_(x); return T(1) - t * t; }
  else if constexpr (OP == UnaryOp::Sigmoid) { const T s = sigmoid(x); return s * (T(1) - s); }
  else if constexpr (OP == UnaryOp::Relu) return x > T(0) ? T(1) : T(0);
  else if constexpr (OP == UnaryOp::Relu2) return x > T(0) ? T(2) * x : T(0);
  else if constexpr (OP == UnaryOp::Silu) { const T s = sigmoid(x); return s * (T(1) + x * (T(1) - s)); }
  else if constexpr (OP == UnaryOp::Gelu) {
    const T cdf = normal_cdf(x);
    const T pdf = exp_(T(-0.5) * x * x) * T(0.39894228040143267794);
    return cdf + x * pdf;
  } else if constexpr (OP == UnaryOp::LogSigmoid) return sigmoid(-x);
  else return T(0);
}

// ---- binary ops -------------------------------------------------------------------------------
// maximum/minimum propagate a NaN from either side (as IEEE-754 2019 maximum, numpy, PyTorch).
template <BinaryOp OP, class T>
HZ_HD T binary_f(T a, T b) {
  if constexpr (OP == BinaryOp::Add) return a + b;
  else if constexpr (OP == BinaryOp::Sub) return a - b;
  else if constexpr (OP == BinaryOp::Mul) return a * b;
  else if constexpr (OP == BinaryOp::Div) return a / b;
  else if constexpr (OP == BinaryOp::Maximum) return (isnan_(a) || a > b) ? a : b;
  else return (isnan_(a) || a < b) ? a : b;
}

// (x ^ p) * mul + add, with the common powers exact.
template <class T>
HZ_HD T scalar_f(T x, T mul, T add, T p, int pkind /* 1: p == 1, 2: p == 2, 0: general */) {
  const T y = pkind == 1 ? x : (pkind == 2 ? x * x : pow_(x, p));
  return y * mul + add;
}

// ---- SwiGLU's gate silu(a) * b, element by element in storage type S, with the roundings of the
// two ops it replaces (silu(a) stored in S, then the product; the gradients as mul's and silu's
// backwards round them) -------------------------------------------------------------------------
template <class S>
HZ_HD S swiglu_f(S a, S b) {
  const S s = store<S>(unary_f<UnaryOp::Silu>(load(a)));
  return store<S>(load(s) * load(b));
}
template <class S>
HZ_HD S swiglu_da(S a, S b, S g) {  // (g b) silu'(a)
  const S ds = store<S>(load(g) * load(b));
  return store<S>(load(ds) * unary_df<UnaryOp::Silu>(load(a)));
}
template <class S>
HZ_HD S swiglu_db(S a, S g) {  // g silu(a)
  const S s = store<S>(unary_f<UnaryOp::Silu>(load(a)));
  return store<S>(load(g) * load(s));
}

// ---- AdamW and momentum updates (per element, double arithmetic; see optim/optimizer.h) -------
struct AdamWCoef {
  double beta1, beta2, bc1, bc2, eps, lr, decay;  // bc = 1 - beta^t; decay = 1 - lr wd
  // the gradient clip's factor: g is read as g * gscale rounded to G, the value the clip's in-place
  // scaling (ops::axpby_) would have left in the gradient
  double gscale = 1.0;
};
// g * s rounded to G (exactly g when s is 1), read in double: a clipped gradient element.
template <class G>
HZ_HD double scaled_grad(G g, double s) {
  return static_cast<double>(load(store<G>(static_cast<double>(load(g)) * s)));
}
// Updates (p, m, v) in place from g; arithmetic in double, storage in P (param) and S (state).
template <class P, class G, class S>
HZ_HD void adamw_element(P& p, G g, S& m, S& v, const AdamWCoef& c) {
  const double gi = c.gscale == 1.0 ? static_cast<double>(load(g)) : scaled_grad(g, c.gscale);  // same bits at 1
  const double mi = c.beta1 * static_cast<double>(load(m)) + (1.0 - c.beta1) * gi;
  const double vi = c.beta2 * static_cast<double>(load(v)) + (1.0 - c.beta2) * gi * gi;
  m = store<S>(mi);
  v = store<S>(vi);
  const double mhat = static_cast<double>(load(m)) / c.bc1;
  const double vhat = static_cast<double>(load(v)) / c.bc2;
  const double pi = static_cast<double>(load(p)) * c.decay;  // decoupled decay first
  p = store<P>(pi - c.lr * mhat / (sqrt_(vhat) + c.eps));
}

}  // namespace hz::math
