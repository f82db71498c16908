// Horizon optim: small host loops shared by the optimizers and gradient clipping.
#pragma once
#include <cstdint>

namespace hz::optim::detail {

// Sum of squares in double, in index order (deterministic).
template <class T>
double sum_squares(const T* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

template <class T>
void scale(T* x, int64_t n, double s) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<double>(x[i]) * s);
}

}  // namespace hz::optim::detail
