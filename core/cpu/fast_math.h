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

}  // namespace hz::cpu
