// Helpers for the optim tests: double-precision references written with plain loops (no hz::ops),
// independent of the library's code paths.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace hz::optim::testing {

// Row-major dense matrix in double.
struct Mat {
  int64_t r = 0, c = 0;
  std::vector<double> v;
  Mat() = default;
  Mat(int64_t rows, int64_t cols, double fill = 0.0) : r(rows), c(cols), v(rows * cols, fill) {}
  double& operator()(int64_t i, int64_t j) { return v[i * c + j]; }
  double operator()(int64_t i, int64_t j) const { return v[i * c + j]; }
};

inline Mat transpose(const Mat& a) {
  Mat t(a.c, a.r);
  for (int64_t i = 0; i < a.r; ++i)
    for (int64_t j = 0; j < a.c; ++j) t(j, i) = a(i, j);
  return t;
}
inline Mat matmul(const Mat& a, const Mat& b) {
  Mat o(a.r, b.c);
  for (int64_t i = 0; i < a.r; ++i)
    for (int64_t k = 0; k < a.c; ++k)
      for (int64_t j = 0; j < b.c; ++j) o(i, j) += a(i, k) * b(k, j);
  return o;
}
inline Mat from_tensor(const Tensor& t) {
  Mat m(t.size(0), t.size(1));
  m.v = t.to_vector();
  return m;
}

// docs/methods.md's quintic Newton-Schulz, literally: normalise, transpose if tall, iterate, transpose back.
inline Mat ref_newton_schulz(const Mat& g, int steps = 5) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  double fro = 0.0;
  for (double x : g.v) fro += x * x;
  fro = std::sqrt(fro);
  Mat x = g;
  for (double& e : x.v) e /= fro + 1e-7;
  const bool tall = g.r > g.c;
  if (tall) x = transpose(x);
  for (int s = 0; s < steps; ++s) {
    Mat A = matmul(x, transpose(x));
    Mat AA = matmul(A, A);
    Mat B(A.r, A.c);
    for (size_t i = 0; i < B.v.size(); ++i) B.v[i] = b * A.v[i] + c * AA.v[i];
    Mat BX = matmul(B, x);
    for (size_t i = 0; i < x.v.size(); ++i) x.v[i] = a * x.v[i] + BX.v[i];
  }
  return tall ? transpose(x) : x;
}

// Eigenvalues of a symmetric matrix by cyclic Jacobi rotations, ascending.
inline std::vector<double> jacobi_eigenvalues(Mat a) {
  const int64_t n = a.r;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) off += a(p, q) * a(p, q);
    if (off < 1e-30) break;
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        if (std::abs(a(p, q)) < 1e-300) continue;
        const double theta = (a(q, q) - a(p, p)) / (2.0 * a(p, q));
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1.0));
        const double cs = 1.0 / std::sqrt(t * t + 1.0), sn = t * cs;
        for (int64_t k = 0; k < n; ++k) {  // A <- A J (columns p, q)
          const double akp = a(k, p), akq = a(k, q);
          a(k, p) = cs * akp - sn * akq;
          a(k, q) = sn * akp + cs * akq;
        }
        for (int64_t k = 0; k < n; ++k) {  // A <- J^T A (rows p, q)
          const double apk = a(p, k), aqk = a(q, k);
          a(p, k) = cs * apk - sn * aqk;
          a(q, k) = sn * apk + cs * aqk;
        }
      }
  }
  std::vector<double> ev(n);
  for (int64_t i = 0; i < n; ++i) ev[i] = a(i, i);
  std::sort(ev.begin(), ev.end());
  return ev;
}

// Singular values (ascending) of m: sqrt of the eigenvalues of the smaller Gram matrix.
inline std::vector<double> singular_values(const Mat& m) {
  Mat gram = m.r <= m.c ? matmul(m, transpose(m)) : matmul(transpose(m), m);
  std::vector<double> ev = jacobi_eigenvalues(gram);
  for (double& e : ev) e = std::sqrt(std::max(0.0, e));
  return ev;
}

// A leaf parameter with a value and (optionally) a grad.
inline ag::Variable make_param(const std::vector<double>& values, const Shape& shape,
                               DType dt = DType::F64) {
  return ag::Variable(Tensor::from_vector(values, shape, dt), true);
}
inline void set_grad(ag::Variable& v, const std::vector<double>& g) {
  v.grad() = Tensor::from_vector(g, v.shape(), v.dtype());
}
// Deterministic pseudo-random values for step `k` of parameter `salt`.
inline std::vector<double> noise(int64_t n, uint64_t salt, uint64_t k, double stddev = 1.0) {
  Generator gen(1234 + salt, k);
  return gen.normal({n}, 0.0, stddev, DType::F64).to_vector();
}

}  // namespace hz::optim::testing
