// Horizon: small CPU helpers written so the compiler vectorizes them.
// - exp is core/math.h's (a branch-free polynomial for f32, the library exp for f64), the same
//   function the CUDA kernels use;
// - bf16 is a struct, so a loop that loads or stores it element by element does not vectorize:
//   widen_bf16 / narrow_to_bf16 go through its 16 bits instead (same values as load / store);
// - lane_sum adds in kLanes independent accumulators (term i goes to lane i % kLanes), combined
//   pairwise in a fixed order: a loop that vectorizes instead of waiting on one add chain, and a
//   result that depends only on n (deterministic, whatever the thread count).
#pragma once
#include <cstdint>
#include <limits>

#include "core/bf16.h"
#include "core/math.h"

namespace hz::cpu {

inline float fast_exp(float x) { return math::exp_(x); }
inline double fast_exp(double x) { return math::exp_(x); }

inline void widen_bf16(const bf16* in, float* out, int64_t n) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(in);
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_f32(bits[i]);
}
inline void narrow_to_bf16(const float* in, bf16* out, int64_t n) {
  uint16_t* bits = reinterpret_cast<uint16_t*>(out);
  for (int64_t i = 0; i < n; ++i) bits[i] = f32_to_bf16_bits(in[i]);
}

template <class F>
double lane_sum(int64_t n, F term) {
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += term(i + j);
  for (int j = 0; i < n; ++i, ++j) acc[j] += term(i);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

// The largest of x[0..n) (-inf for n == 0), in kLanes independent lanes so that the loop
// vectorizes (a max is exact, so the result is the sequential one).
template <class T>
T row_max(const T* x, int64_t n) {
  constexpr int kLanes = 16;
  T m[kLanes];
  for (int j = 0; j < kLanes; ++j) m[j] = -std::numeric_limits<T>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
  for (int j = 0; i < n; ++i, ++j) m[j] = x[i] > m[j] ? x[i] : m[j];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) m[j] = m[j + w] > m[j] ? m[j + w] : m[j];
  return m[0];
}

// x[j] = exp(x[j] - shift) in place (-inf entries become 0); returns their sum, added in kLanes
// lanes combined pairwise (the loop vectorizes; the order depends only on n: deterministic).
template <class T>
T exp_shift_sum(T* x, int64_t n, T shift) {
  for (int64_t i = 0; i < n; ++i) x[i] = fast_exp(x[i] - shift);
  constexpr int kLanes = 16;
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += x[i];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

}  // namespace hz::cpu
